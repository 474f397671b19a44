// The sparse MoE block on the CPU (moe_block.h). Sources: transformers
// modeling_mixtral.py (MixtralSparseMoeBlock), modeling_qwen2_moe.py
// (Qwen2MoeSparseMoeBlock, shared expert), modeling_qwen3_moe.py; vLLM's
// fused_moe (moe_align_block_size: group the pairs by expert).
#include "engine/model/moe_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace tq {

TokenRoute RouteToken(const float* logits, const MoeConfig& c) {
  const int32_t e = c.num_experts, k = c.num_experts_per_tok;
  std::vector<float> prob(static_cast<size_t>(e));
  const float top = *std::max_element(logits, logits + e);
  float sum = 0.0f;
  for (int32_t i = 0; i < e; ++i) {
    prob[i] = std::exp(logits[i] - top);
    sum += prob[i];
  }
  for (float& p : prob) p /= sum;
  std::vector<int32_t> order(static_cast<size_t>(e));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return prob[a] > prob[b] || (prob[a] == prob[b] && a < b);
  });
  TokenRoute r;
  r.experts.assign(order.begin(), order.begin() + k);
  float picked = 0.0f;
  for (int32_t i : r.experts) {
    r.weights.push_back(prob[i]);
    picked += prob[i];
  }
  if (c.norm_topk_prob) {
    for (float& w : r.weights) w /= picked;
  }
  return r;
}

float* MoeBlock::Scratch(kernels::BackendBuffer& buf, size_t floats) {
  if (buf.bytes() < floats * sizeof(float)) buf = kernels::BackendBuffer(backend_, floats * 4);
  return buf.as<float>();
}

void MoeBlock::Forward(const MoeConfig& c, const MoeLayerWeights& w, const float* x, int32_t n,
                       int32_t hidden, float* out) {
  const int32_t e = c.num_experts, k = c.num_experts_per_tok;
  const size_t h = static_cast<size_t>(hidden);
  // Router logits [n, E] in fp32 (the router stays fp32 in every format).
  float* logits = Scratch(logits_, static_cast<size_t>(n) * e);
  backend_->MatMul({x, w.router.View(), logits, n, false});
  routes_.resize(static_cast<size_t>(n));
  count_.assign(static_cast<size_t>(e), 0);
  for (int32_t t = 0; t < n; ++t) {
    routes_[t] = RouteToken(logits + static_cast<size_t>(t) * e, c);
    for (int32_t x_e : routes_[t].experts) ++count_[x_e];
  }
  // Group the (token, slot) pairs by expert: a counting sort, tokens in batch
  // order within each expert; copy each pair's input row to its place.
  offset_.assign(static_cast<size_t>(e) + 1, 0);
  for (int32_t i = 0; i < e; ++i) offset_[i + 1] = offset_[i] + count_[i];
  std::vector<int32_t> fill(offset_.begin(), offset_.end() - 1);
  const size_t pairs = static_cast<size_t>(n) * k;
  float* xperm = Scratch(xperm_, pairs * h);
  float* yperm = Scratch(yperm_, pairs * h);
  pair_row_.resize(pairs);
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t j = 0; j < k; ++j) {
      const int32_t row = fill[routes_[t].experts[j]]++;
      pair_row_[static_cast<size_t>(t) * k + j] = row;
      std::memcpy(xperm + row * h, x + t * h, h * sizeof(float));
    }
  }
  // Each selected expert over its rows: down(silu(gate(x)) * up(x)).
  int32_t widest = 0;
  for (const LinearWeight& g : w.gate_proj) widest = std::max(widest, g.out_features);
  widest = std::max(widest, w.shared_gate_proj.out_features);
  float* gate = Scratch(gate_, static_cast<size_t>(n) * widest);
  float* up = Scratch(up_, static_cast<size_t>(n) * widest);
  for (int32_t i = 0; i < e; ++i) {
    const int32_t rows = count_[i];
    if (rows == 0 || w.gate_proj[i].empty()) continue;  // expert parallel: another rank's
    const float* xi = xperm + static_cast<size_t>(offset_[i]) * h;
    const int32_t inter = w.gate_proj[i].out_features;
    backend_->MatMul({xi, w.gate_proj[i].View(), gate, rows, false});
    backend_->MatMul({xi, w.up_proj[i].View(), up, rows, false});
    backend_->SiluMul({gate, up, gate, rows, inter});
    backend_->MatMul(
        {gate, w.down_proj[i].View(), yperm + static_cast<size_t>(offset_[i]) * h, rows, false});
  }
  // Combine: each token's experts in its own top-k order.
  for (int32_t t = 0; t < n; ++t) {
    float* o = out + t * h;
    std::fill(o, o + h, 0.0f);
    for (int32_t j = 0; j < k; ++j) {
      if (w.gate_proj[routes_[t].experts[j]].empty()) continue;
      const float wt = routes_[t].weights[j];
      const float* y = yperm + static_cast<size_t>(pair_row_[static_cast<size_t>(t) * k + j]) * h;
      for (size_t d = 0; d < h; ++d) o[d] += wt * y[d];
    }
  }
  if (w.shared_gate_proj.empty()) return;
  // Qwen2-MoE: + sigmoid(shared_expert_gate . x) * shared_expert(x).
  const int32_t si = w.shared_gate_proj.out_features;
  backend_->MatMul({x, w.shared_gate_proj.View(), gate, n, false});
  backend_->MatMul({x, w.shared_up_proj.View(), up, n, false});
  backend_->SiluMul({gate, up, gate, n, si});
  float* shared = Scratch(yperm_, pairs * h);  // the routed rows are combined already
  backend_->MatMul({gate, w.shared_down_proj.View(), shared, n, false});
  float* g = Scratch(shared_logit_, static_cast<size_t>(n));
  backend_->MatMul({x, w.shared_expert_gate.View(), g, n, false});
  for (int32_t t = 0; t < n; ++t) {
    const float s = 1.0f / (1.0f + std::exp(-g[t]));
    float* o = out + t * h;
    const float* y = shared + t * h;
    for (size_t d = 0; d < h; ++d) o[d] += s * y[d];
  }
}

}  // namespace tq
