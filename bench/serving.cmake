# tq_bench_serving: HTTP load generator for /v1/completions (cpp-httplib client,
# nlohmann/json, CLI11). A client of the daemon only: no engine link.
pkg_check_modules(TQ_BENCH_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
tq_bench(serving serving_bench.cc LIBS PkgConfig::TQ_BENCH_HTTPLIB nlohmann_json::nlohmann_json
                                       Threads::Threads)
