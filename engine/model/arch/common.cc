// Config pieces shared by several families (families.h).
#include <string>

#include "engine/model/arch/families.h"

namespace tq::arch {

void ParseQwenSlidingWindow(const ConfigFields& f, ModelConfig& c) {
  if (f.Bool("use_sliding_window", false) && f.Has("sliding_window")) {
    c.sliding_window = f.Int("sliding_window", 1);
  }
}

void WriteQwenSlidingWindow(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["use_sliding_window"] = c.sliding_window > 0;
  j["sliding_window"] =
      c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nlohmann::ordered_json();
}

void ParseSlidingWindow(const ConfigFields& f, ModelConfig& c) {
  if (f.Has("sliding_window")) c.sliding_window = f.Int("sliding_window", 1);
}

void WriteSlidingWindow(const ModelConfig& c, nlohmann::ordered_json& j) {
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
}

void CheckMoe(const ConfigFields& f, const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  if (m.num_experts > 0 && m.num_experts_per_tok > m.num_experts) {
    ConfigFail(f.file(), "num_experts_per_tok " + std::to_string(m.num_experts_per_tok) +
                             " exceeds the " + std::to_string(m.num_experts) + " experts");
  }
}

void ParseQwenMoe(const ConfigFields& f, ModelConfig& c, int32_t default_experts,
                  int32_t default_top_k, int32_t default_moe_intermediate) {
  MoeConfig& m = c.moe;
  m.num_experts = f.Int("num_experts", 0, default_experts);
  m.num_experts_per_tok = f.Int("num_experts_per_tok", 1, default_top_k);
  m.moe_intermediate_size = f.Int("moe_intermediate_size", 1, default_moe_intermediate);
  m.norm_topk_prob = f.Bool("norm_topk_prob", false);
  m.decoder_sparse_step = f.Int("decoder_sparse_step", 1, 1);
  m.mlp_only_layers = f.IntList("mlp_only_layers");
  CheckMoe(f, c);
}

void WriteQwenMoe(const ModelConfig& c, nlohmann::ordered_json& j) {
  const MoeConfig& m = c.moe;
  j["num_experts"] = m.num_experts;
  j["num_experts_per_tok"] = m.num_experts_per_tok;
  j["moe_intermediate_size"] = m.moe_intermediate_size;
  j["norm_topk_prob"] = m.norm_topk_prob;
  j["decoder_sparse_step"] = m.decoder_sparse_step;
  j["mlp_only_layers"] = m.mlp_only_layers;
  // Training-only: the loader ignores them (written as transformers does).
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = 0.001;
}

}  // namespace tq::arch
