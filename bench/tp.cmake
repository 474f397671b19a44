# Tensor-parallel benchmarks (issue 8; docs/PERFORMANCE.md).
add_executable(tq_bench_tp_allreduce ${CMAKE_CURRENT_LIST_DIR}/tp_allreduce_bench.cc)
target_link_libraries(tq_bench_tp_allreduce PRIVATE tq_engine)
tq_target_warnings(tq_bench_tp_allreduce)
add_executable(tq_bench_tp_decode ${CMAKE_CURRENT_LIST_DIR}/tp_decode_bench.cc)
target_link_libraries(tq_bench_tp_decode PRIVATE tq_engine)
tq_target_warnings(tq_bench_tp_decode)
