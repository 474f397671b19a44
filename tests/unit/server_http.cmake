# The OpenAI HTTP front end (server/http): request parsing and validation,
# response/chunk shapes and SSE framing, the request session and runner on a
# fake engine, the HTTP routes on a real socket, and `tqserve serve` as a process.
tq_unit_test(tq_test_openai
  test_openai_requests.cc
  test_tool_request.cc
  test_openai_responses.cc
  test_openai_runner.cc
  test_request_session.cc
  test_openai_http.cc
  test_openai_serve.cc
)
# cpp-httplib's client talks to the server (test-only: the server is Boost.Beast).
pkg_check_modules(TQ_TEST_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
target_link_libraries(tq_test_openai PRIVATE tq_server_http PkgConfig::TQ_TEST_HTTPLIB)
add_dependencies(tq_test_openai tqserve)  # test_openai_serve.cc runs the binary
if(TQ_SANITIZED AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC 12 at -O1 with the sanitizers warns -Wmaybe-uninitialized inside
  # libstdc++'s <regex> (std::function in _StateT; a false positive of the
  # std::regex this test uses); the Release build keeps the warning.
  set_source_files_properties(test_openai_serve.cc PROPERTIES COMPILE_OPTIONS -Wno-maybe-uninitialized)
endif()
