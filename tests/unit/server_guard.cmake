# Request guards shared by the HTTP and gRPC front ends (server/guard).
tq_unit_test(tq_test_guard ${CMAKE_CURRENT_LIST_DIR}/test_request_limits.cc
             ${CMAKE_CURRENT_LIST_DIR}/test_http_guard.cc ${CMAKE_CURRENT_LIST_DIR}/test_log_field.cc
             ${CMAKE_CURRENT_LIST_DIR}/test_liveness.cc)
target_link_libraries(tq_test_guard PRIVATE tq_server_guard)
