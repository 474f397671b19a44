# Prometheus metrics (server/metrics): rendered text parsed and checked against
# hand-computed values, and linted by promtool (Debian package prometheus).
# A missing promtool is passed on as a path that does not exist: the lint test
# fails then instead of skipping.
find_program(TQ_PROMTOOL promtool)
tq_unit_test(tq_test_server_metrics test_server_metrics.cc)
target_link_libraries(tq_test_server_metrics PRIVATE tq_server_metrics)
target_compile_definitions(tq_test_server_metrics PRIVATE TQ_PROMTOOL="${TQ_PROMTOOL}")
# tqserve_info{version} must be the CMake project's version.
target_compile_definitions(tq_test_server_metrics PRIVATE TQ_PROJECT_VERSION="${PROJECT_VERSION}")
