# Tensor-parallel benchmarks (issue 8; docs/PERFORMANCE.md).
tq_bench(tp_allreduce tp_allreduce_bench.cc)
tq_bench(tp_decode tp_decode_bench.cc)
