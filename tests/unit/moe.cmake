# Mixture-of-experts architectures (issue 42) against the float64 reference:
# each MoE preset of `tqserve make-random-model` shrunk (vocab 512 with the
# bundled tokenizer, fp32, few experts of width 32), written by the fixture
# tq_moe_models; tests/reference/llama_ref.py computes their logits and greedy
# tokens (fixture tq_moe_reference), which tq_test_moe checks.
#   qwen3-moe: Qwen3-30B-A3B's layout, 16 experts top 4 renormalised, layer 1
#              dense (mlp_only_layers), experts as fused 3-D tensors;
#   mixtral:   Mixtral-8x7B's, 8 experts top 2, per-expert w1/w3/w2;
#   qwen2-moe: Qwen1.5-MoE-A2.7B's, 8 experts top 4 not renormalised, a
#              shared expert with its sigmoid gate, q/k/v biases, every
#              second layer sparse (decoder_sparse_step 2).
tq_unit_test(tq_test_moe test_moe_reference.cc)
add_dependencies(tq_test_moe tqserve)

set(TQ_MOE_COMMON --vocab-size 512 --dtype fp32 --seed 42 --num-heads 4 --head-dim 32
    --moe-intermediate-size 32 --tokenizer ${TQ_MODEL_DIR}/tokenizer.model)
set(TQ_MOE_qwen3-moe --preset qwen3-30b-a3b --hidden-size 64 --num-kv-heads 2 --num-layers 3
    --intermediate-size 128 --num-experts 16 --num-experts-per-tok 4 --mlp-only-layers 1
    --fused-experts)
set(TQ_MOE_mixtral --preset mixtral-8x7b --hidden-size 128 --num-kv-heads 2 --num-layers 2
    --intermediate-size 32 --num-experts 8)
set(TQ_MOE_qwen2-moe --preset qwen1.5-moe-a2.7b --hidden-size 128 --num-layers 4
    --intermediate-size 128 --num-experts 8 --num-experts-per-tok 4
    --shared-expert-intermediate-size 64 --decoder-sparse-step 2)
foreach(name qwen3-moe mixtral qwen2-moe)
  set(dir ${TQ_REF_DIR}/moe/${name})
  add_test(NAME reference.moe_model.${name}
    COMMAND $<TARGET_FILE:tqserve> make-random-model --out ${dir} ${TQ_MOE_${name}}
            ${TQ_MOE_COMMON})
  set_tests_properties(reference.moe_model.${name} PROPERTIES FIXTURES_SETUP tq_moe_models)
  add_test(NAME reference.moe_float64.${name}
    COMMAND ${TQ_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/reference/llama_ref.py --model ${dir}
            --out ${TQ_REF_DIR}/moe_${name}_logits.bin)
  add_test(NAME reference.moe_greedy.${name}
    COMMAND ${TQ_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/reference/llama_ref.py --model ${dir}
            --greedy 32 --ids 1,403,407,261,378,432,383,286,261,376,298,315,421,395,317,426
            --greedy-out ${TQ_REF_DIR}/moe_${name}_greedy.txt)
  set_tests_properties(reference.moe_float64.${name} reference.moe_greedy.${name} PROPERTIES
    FIXTURES_REQUIRED tq_moe_models FIXTURES_SETUP tq_reference)
endforeach()
