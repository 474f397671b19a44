# The gRPC front end (server/grpc): request validation and stream messages
# without a server, then a C++ gRPC client against a real in-process server on
# the bundled model (generation, tokenization, health, reflection, status
# codes, cancellation and deadlines, drain, concurrency). Sources are named
# from this file's directory so that it can be included from anywhere.
tq_unit_test(tq_test_grpc
  ${CMAKE_CURRENT_LIST_DIR}/test_grpc_requests.cc
  ${CMAKE_CURRENT_LIST_DIR}/test_grpc_wire.cc
  ${CMAKE_CURRENT_LIST_DIR}/test_grpc_service.cc
  ${CMAKE_CURRENT_LIST_DIR}/test_grpc_lifecycle.cc
  ${CMAKE_CURRENT_LIST_DIR}/test_grpc_concurrency.cc
)
target_link_libraries(tq_test_grpc PRIVATE tq_server_grpc nlohmann_json::nlohmann_json)
target_compile_definitions(tq_test_grpc PRIVATE TQ_PROJECT_VERSION="${PROJECT_VERSION}")
