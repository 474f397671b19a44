# Issue 7 (mixed-precision weights): packed-weight kernels.
tq_unit_test(tq_test_quant_kernels test_quant_kernels.cc)
