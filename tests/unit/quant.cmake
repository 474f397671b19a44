# Issue 7 (mixed-precision weights): packed-weight kernels.
tq_unit_test(tq_test_quant_kernels test_quant_kernels.cc)
# Engine side: group-wise RTN formats, configs, quantization-aware loading,
# offline checkpoints, sensitivity search and perplexity bounds.
tq_unit_test(tq_test_quant test_quant_format.cc test_quant_config.cc test_quant_weights.cc
             test_quant_tables.cc)
target_compile_definitions(tq_test_quant PRIVATE TQ_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
target_link_libraries(tq_test_quant PRIVATE nlohmann_json::nlohmann_json)
# Whole-text perplexity runs: ~20 s each in Release, ~215 s under ASan (Debug),
# so these get a longer timeout than tq_unit_test's 300 s.
add_executable(tq_test_quant_perplexity test_quant_perplexity.cc)
target_link_libraries(tq_test_quant_perplexity PRIVATE tq_server GTest::gtest GTest::gtest_main
                                                       GTest::gmock)
target_compile_definitions(tq_test_quant_perplexity PRIVATE
  TQ_MODEL_DIR="${TQ_MODEL_DIR}"
  TQ_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
  TQ_BINARY="$<TARGET_FILE:tqserve>")
tq_target_warnings(tq_test_quant_perplexity)
add_dependencies(tq_test_quant_perplexity tqserve)
gtest_discover_tests(tq_test_quant_perplexity DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 900)
