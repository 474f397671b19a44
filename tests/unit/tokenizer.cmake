# tokenizer.json parity with Hugging Face tokenizers (npm tokenizers@0.23.2):
# the fixture tokenizer.oracle encodes the corpora with it (node,
# tests/tokenizer/oracle.mjs) for Llama 3, Qwen3, Mistral and GPT-2 (the
# tokenizer.json tokenizer.gpt2_json writes), then tq_test_tokenizer_parity
# requires the same ids and decoded text from the C++ tokenizer. Own fixture
# (not tq_reference), so other `ctest -R` runs do not wait for node.
if(NOT TQ_TOKENIZER_JSON)
  message(STATUS "tokenizer.json support off: tokenizer parity tests not registered")
  return()
endif()
if(NOT TQ_NODE OR NOT TQ_SHARED_DATA_DIR)
  message(WARNING "node or the shared data (../shared/data) missing: tokenizer parity tests not registered")
  return()
endif()
# GPT-2's vocabulary as llama.cpp publishes it (ggml-vocab-gpt-2.gguf), written
# as tokenizer.json (a file format change; stdlib Python): the GPT-2 case of
# llama.cpp's vectors, and a fourth tokenizer for the oracle.
set(TQ_GPT2_TOKENIZER_DIR ${TQ_REF_DIR}/gpt2-tokenizer)
add_test(NAME tokenizer.gpt2_json
  COMMAND ${TQ_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/reference/gguf_to_tokenizer_json.py
          --gguf ${TQ_SHARED_DATA_DIR}/tokenizer-vectors/ggml-vocab-gpt-2.gguf
          --out ${TQ_GPT2_TOKENIZER_DIR})
set_tests_properties(tokenizer.gpt2_json PROPERTIES FIXTURES_SETUP tq_tokenizer_gpt2 TIMEOUT 120)

add_test(NAME tokenizer.oracle
  COMMAND ${TQ_NODE} ${TQ_TOKENIZER_ORACLE_DIR}/oracle.mjs --data ${TQ_SHARED_DATA_DIR}
          --out-dir ${TQ_REF_DIR} --gpt2 ${TQ_GPT2_TOKENIZER_DIR}/tokenizer.json)
set_tests_properties(tokenizer.oracle PROPERTIES
  FIXTURES_SETUP tq_tokenizer_parity FIXTURES_REQUIRED "tq_tokenizer_oracle;tq_tokenizer_gpt2"
  TIMEOUT 300)

add_executable(tq_test_tokenizer_parity test_tokenizer_parity.cc)
target_link_libraries(tq_test_tokenizer_parity PRIVATE tq_engine nlohmann_json::nlohmann_json
                      GTest::gtest GTest::gtest_main)
target_compile_definitions(tq_test_tokenizer_parity PRIVATE
  TQ_REF_DIR="${TQ_REF_DIR}"
  TQ_SHARED_DATA_DIR="${TQ_SHARED_DATA_DIR}"
  TQ_TOKENIZER_ORACLE_DIR="${TQ_TOKENIZER_ORACLE_DIR}"
  TQ_GPT2_TOKENIZER_DIR="${TQ_GPT2_TOKENIZER_DIR}")
tq_target_warnings(tq_test_tokenizer_parity)
gtest_discover_tests(tq_test_tokenizer_parity
  DISCOVERY_TIMEOUT 60
  PROPERTIES FIXTURES_REQUIRED tq_tokenizer_parity TIMEOUT 300 LABELS tokenizer)

# Streaming detokenization over the real tokenizer.json vocabularies.
if(TARGET tq_server_text)
  add_executable(tq_test_detokenizer_bpe test_detokenizer_bpe.cc)
  target_link_libraries(tq_test_detokenizer_bpe PRIVATE tq_server_text tq_engine GTest::gtest
                        GTest::gtest_main)
  target_compile_definitions(tq_test_detokenizer_bpe PRIVATE
    TQ_TOKENIZER_ORACLE_DIR="${TQ_TOKENIZER_ORACLE_DIR}")
  tq_target_warnings(tq_test_detokenizer_bpe)
  gtest_discover_tests(tq_test_detokenizer_bpe
    DISCOVERY_TIMEOUT 60
    PROPERTIES FIXTURES_REQUIRED tq_tokenizer_oracle TIMEOUT 300 LABELS tokenizer)
endif()
