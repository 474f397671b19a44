# tq_bench_serving: HTTP load generator for /v1/completions (cpp-httplib client,
# nlohmann/json, CLI11). A client of the daemon only: no engine link.
find_package(CLI11 REQUIRED)
pkg_check_modules(TQ_BENCH_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
add_executable(tq_bench_serving ${CMAKE_CURRENT_LIST_DIR}/serving_bench.cc)
target_link_libraries(tq_bench_serving PRIVATE PkgConfig::TQ_BENCH_HTTPLIB nlohmann_json::nlohmann_json
                                               CLI11::CLI11 Threads::Threads)
tq_target_warnings(tq_bench_serving)
