# The OpenAI HTTP front end (server/http): request parsing and validation,
# response/chunk shapes and SSE framing, the request runner on a fake engine,
# and the HTTP routes on a real socket.
tq_unit_test(tq_test_openai
  test_openai_requests.cc
  test_openai_responses.cc
  test_openai_runner.cc
  test_openai_http.cc
)
target_link_libraries(tq_test_openai PRIVATE tq_server_http PkgConfig::HTTPLIB)
