// Weights of a Llama-family model, loaded from a HF checkpoint into backend memory.
#pragma once

#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/parallel/tp_plan.h"
#include "kernels/backend.h"

namespace tq {

/// One decoder layer's tensors (HF names model.layers.N.*), fp32 in backend
/// memory; under tensor parallelism the rank's slices (TpPlan): heads, KV heads
/// and intermediate channels replace the full counts in the shapes below.
struct LlamaLayerWeights {
  kernels::BackendBuffer input_layernorm;           // [hidden]
  kernels::BackendBuffer q_proj, k_proj, v_proj;    // [heads*hd, hidden], [kv*hd, hidden] x2
  kernels::BackendBuffer o_proj;                    // [hidden, heads*hd]
  kernels::BackendBuffer post_attention_layernorm;  // [hidden]
  kernels::BackendBuffer gate_proj, up_proj;        // [inter, hidden]
  kernels::BackendBuffer down_proj;                 // [hidden, inter]
};

/// All weights. lm_head aliases embed_tokens when tie_word_embeddings.
struct LlamaWeights {
  kernels::BackendBuffer embed_tokens;  // [vocab, hidden]
  std::vector<LlamaLayerWeights> layers;
  kernels::BackendBuffer norm;     // [hidden]
  kernels::BackendBuffer lm_head;  // [vocab, hidden] (TP: [vocab_shard, hidden]); empty when tied
  size_t total_bytes = 0;          // backend bytes held
  size_t lm_head_offset = 0;       // tied under TP: elements into embed_tokens of the shard

  const float* LmHead() const {
    return lm_head.data() ? lm_head.as<float>() : embed_tokens.as<float>() + lm_head_offset;
  }
};

/// Loads and converts (F32/F16/BF16 -> fp32) every tensor the config needs,
/// checking each shape. With a TpPlan of world_size > 1 only the rank's slices
/// are read from the mmapped files (embeddings and norms whole); a tied
/// lm_head shard is a view into embed_tokens when the vocabulary splits
/// evenly, else a zero-padded copy. Throws tq::Error naming the file and
/// tensor on a missing tensor or wrong shape.
LlamaWeights LoadLlamaWeights(const std::string& model_dir, const ModelConfig& config,
                              kernels::Backend* backend, const TpPlan& plan = {});

}  // namespace tq
