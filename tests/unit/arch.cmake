# Architectures of issue 15 against the float64 reference: each preset at
# reduced sizes (2 layers, vocab 512 with the bundled tokenizer, fp32) is
# written by `tqserve make-random-model` (fixture tq_arch_models), then
# tests/reference/llama_ref.py computes its logits, RoPE frequencies and
# greedy tokens (fixture tq_reference), which tq_test_arch checks.
tq_unit_test(tq_test_arch test_arch_reference.cc)
add_dependencies(tq_test_arch tqserve)

set(TQ_ARCH_COMMON --num-layers 2 --intermediate-size 256 --vocab-size 512 --dtype fp32 --seed 15
    --tokenizer ${TQ_MODEL_DIR}/tokenizer.model)
# name | preset | hidden heads kv_heads head_dim (qwen3: head_dim 32 != 64 / 4; smollm2: 3 heads)
set(TQ_ARCH_MODELS
  "llama3.2|llama3.2-1b|128|4|2|32"
  "qwen2.5|qwen2.5-0.5b|128|4|2|32"
  "qwen3|qwen3-0.6b|64|4|2|32"
  "smollm2|smollm2-135m|96|3|1|32")
foreach(spec ${TQ_ARCH_MODELS})
  string(REPLACE "|" ";" f "${spec}")
  list(GET f 0 name)
  list(GET f 1 preset)
  list(GET f 2 hidden)
  list(GET f 3 heads)
  list(GET f 4 kv)
  list(GET f 5 hd)
  set(dir ${TQ_REF_DIR}/arch/${name})
  set(make $<TARGET_FILE:tqserve> make-random-model --out ${dir} --preset ${preset}
      --hidden-size ${hidden} --num-heads ${heads} --num-kv-heads ${kv} --head-dim ${hd}
      ${TQ_ARCH_COMMON})
  if(name STREQUAL "llama3.2")
    # The preset's llama3 RoPE scaling (factor 32, original context 8192)
    # barely moves logits within 64 positions (1.6e-4); with an original
    # context of 32 it changes every frequency with a wavelength over 8
    # positions, so the 64-token comparison checks the scaling end to end.
    string(REPLACE ";" "|" make_args "${make}")
    add_test(NAME reference.arch_model.${name}
      COMMAND ${CMAKE_COMMAND} "-DMAKE=${make_args}" -DCONFIG=${dir}/config.json
              -P ${CMAKE_CURRENT_LIST_DIR}/arch_short_rope.cmake)
  else()
    add_test(NAME reference.arch_model.${name} COMMAND ${make})
  endif()
  set_tests_properties(reference.arch_model.${name} PROPERTIES FIXTURES_SETUP tq_arch_models)
  add_test(NAME reference.arch_float64.${name}
    COMMAND ${TQ_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/reference/llama_ref.py --model ${dir}
            --out ${TQ_REF_DIR}/arch_${name}_logits.bin
            --inv-freq-out ${TQ_REF_DIR}/arch_${name}_inv_freq.txt)
  add_test(NAME reference.arch_greedy.${name}
    COMMAND ${TQ_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/reference/llama_ref.py --model ${dir}
            --greedy 32 --ids 1,403,407,261,378,432,383,286,261,376,298,315,421,395,317,426
            --greedy-out ${TQ_REF_DIR}/arch_${name}_greedy.txt)
  set_tests_properties(reference.arch_float64.${name} reference.arch_greedy.${name} PROPERTIES
    FIXTURES_REQUIRED tq_arch_models FIXTURES_SETUP tq_reference)
endforeach()
