# The OpenAI HTTP front end (server/http): request parsing and validation,
# response/chunk shapes and SSE framing, the request runner on a fake engine,
# the HTTP routes on a real socket, and `tqserve serve` as a process.
tq_unit_test(tq_test_openai
  test_openai_requests.cc
  test_openai_responses.cc
  test_openai_runner.cc
  test_openai_http.cc
  test_openai_serve.cc
)
target_link_libraries(tq_test_openai PRIVATE tq_server_http PkgConfig::HTTPLIB)
add_dependencies(tq_test_openai tqserve)  # test_openai_serve.cc runs the binary
