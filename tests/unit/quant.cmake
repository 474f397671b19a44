# Issue 7 (mixed-precision weights): packed-weight kernels.
tq_unit_test(tq_test_quant_kernels test_quant_kernels.cc)
# Engine side: group-wise RTN formats, configs, quantization-aware loading,
# offline checkpoints, sensitivity search and perplexity bounds.
tq_unit_test(tq_test_quant test_quant_format.cc test_quant_config.cc test_quant_weights.cc)
target_compile_definitions(tq_test_quant PRIVATE TQ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
target_link_libraries(tq_test_quant PRIVATE nlohmann_json::nlohmann_json)
tq_unit_test(tq_test_quant_perplexity test_quant_perplexity.cc)
add_dependencies(tq_test_quant_perplexity tqserve)
