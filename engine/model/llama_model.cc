#include "engine/model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/common/error.h"
#include "engine/model/decode_graphs.h"
#include "engine/parallel/communicator.h"

namespace tq {
namespace {

void CheckBatch(const ForwardBatch& b, const ModelConfig& c, const kernels::KvLayout& layout) {
  const size_t n = b.token_ids.size();
  if (b.positions.size() != n || b.token_seq.size() != n || b.slot_mapping.size() != n) {
    throw std::invalid_argument("ForwardBatch: per-token vectors differ in size");
  }
  if (b.block_tables.size() != static_cast<size_t>(b.num_seqs) * b.max_blocks_per_seq) {
    throw std::invalid_argument("ForwardBatch: block_tables size != num_seqs * max_blocks");
  }
  const int64_t num_slots = static_cast<int64_t>(layout.num_blocks) * layout.block_size;
  for (size_t t = 0; t < n; ++t) {
    if (b.token_ids[t] < 0 || b.token_ids[t] >= c.vocab_size) {
      throw std::invalid_argument("ForwardBatch: token id " + std::to_string(b.token_ids[t]) +
                                  " out of range [0, " + std::to_string(c.vocab_size) + ")");
    }
    if (b.token_seq[t] < 0 || b.token_seq[t] >= b.num_seqs || b.positions[t] < 0 ||
        b.positions[t] >= b.max_blocks_per_seq * layout.block_size ||
        b.slot_mapping[t] >= num_slots) {
      throw std::invalid_argument("ForwardBatch: token " + std::to_string(t) +
                                  " has an invalid sequence, position or slot");
    }
  }
  for (int32_t i : b.logit_indices) {
    if (i < 0 || static_cast<size_t>(i) >= n) {
      throw std::invalid_argument("ForwardBatch: logit index out of range");
    }
  }
}

}  // namespace

LlamaModel::LlamaModel(const ModelConfig& config, LlamaWeights weights, kernels::Backend* backend,
                       const TpPlan& plan)
    : config_(config),
      weights_(std::move(weights)),
      backend_(backend),
      plan_(plan.world_size > 1 || plan.comm ? plan : MakeTpPlan(config, 0, 1)),
      moe_(backend) {
  if (config_.moe.enabled() && backend_->Capabilities().device_memory) {
    throw Error(config_.architecture +
                ": mixture-of-experts layers run on the CPU backend only in "
                "this version (the " +
                std::string(backend_->Name()) + " MoE path is issue 42 item 6); use --device cpu");
  }
  // A communicator at world_size 1 is kept (TP=1 through NCCL in tests).
  if ((plan_.world_size > 1 || plan_.comm) &&
      (plan_.comm == nullptr || plan_.comm->world_size() != plan_.world_size ||
       plan_.comm->rank() != plan_.rank)) {
    throw std::invalid_argument("LlamaModel: a tensor-parallel plan needs its rank's communicator");
  }
  const std::vector<float> inv_freq = config_.RopeInvFreq();
  inv_freq_ = kernels::BackendBuffer(backend_, inv_freq.size() * sizeof(float));
  backend_->CopyToDevice(inv_freq_.data(), inv_freq.data(), inv_freq.size() * sizeof(float));
}

LlamaModel::~LlamaModel() = default;

void LlamaModel::EnableDecodeGraphs(int32_t max_batch, int32_t max_blocks_per_seq,
                                    bool eager_fallback) {
  graphs_.reset();
  if (max_batch <= 0) return;
  graphs_ =
      std::make_unique<DecodeGraphRunner>(backend_, max_batch, max_blocks_per_seq, eager_fallback);
}

const float* LlamaModel::ObservedCopy(const float* x, size_t n) {
  observed_.resize(n);
  backend_->CopyToHost(observed_.data(), x, n * sizeof(float));
  return observed_.data();
}

void LlamaModel::ObserveLinearInput(int32_t layer, LinearInput input, const float* x, int32_t rows,
                                    int32_t cols) {
  if (observer_ == nullptr || !observer_->on_linear_input) return;
  observer_->on_linear_input(layer, input, ObservedCopy(x, size_t{1} * rows * cols), rows, cols);
}

void LlamaModel::ObserveKeys(int32_t layer, int32_t num_tokens) {
  if (observer_ == nullptr || !observer_->on_keys) return;
  const size_t n = size_t{1} * num_tokens * plan_.num_kv_heads * config_.head_dim;
  observer_->on_keys(layer, ObservedCopy(k_.as<float>(), n), num_tokens);
}

void LlamaModel::EnsureWorkspace(int32_t num_tokens, int32_t num_logits) {
  const ModelConfig& c = config_;
  const TpPlan& p = plan_;
  if (num_tokens > capacity_tokens_) {
    const size_t n = num_tokens;
    auto alloc = [&](size_t elems) { return kernels::BackendBuffer(backend_, elems * 4); };
    ids_ = alloc(n);
    positions_ = alloc(n);
    token_seq_ = alloc(n);
    slots_ = alloc(n);
    hidden_ = alloc(n * c.hidden_size);
    normed_ = alloc(n * c.hidden_size);
    q_ = alloc(n * p.num_heads * c.head_dim);
    k_ = alloc(n * p.num_kv_heads * c.head_dim);
    v_ = alloc(n * p.num_kv_heads * c.head_dim);
    attn_ = alloc(n * p.num_heads * c.head_dim);
    gate_ = alloc(n * p.intermediate);
    up_ = alloc(n * p.intermediate);
    if (c.moe.enabled()) moe_out_ = alloc(n * c.hidden_size);
    capacity_tokens_ = num_tokens;
    ++workspace_epoch_;
  }
  if (num_logits > capacity_logits_) {
    last_hidden_ = kernels::BackendBuffer(backend_, size_t{4} * num_logits * c.hidden_size);
    const size_t shard = size_t{4} * num_logits * p.vocab_shard;
    logits_ = kernels::BackendBuffer(backend_, shard);
    if (p.comm) gathered_logits_ = kernels::BackendBuffer(backend_, shard * p.world_size);
    capacity_logits_ = num_logits;
    ++workspace_epoch_;
  }
}

void LlamaModel::Forward(const ForwardBatch& batch, PagedKvCache& cache,
                         std::vector<float>* logits) {
  CheckBatch(batch, config_, cache.layout());
  if (cache.layout().num_kv_heads != plan_.num_kv_heads) {
    throw std::invalid_argument(
        "LlamaModel::Forward: the KV cache holds " + std::to_string(cache.layout().num_kv_heads) +
        " KV heads; this rank's model has " + std::to_string(plan_.num_kv_heads));
  }
  // Every path below writes all of it (a 128K vocabulary is 0.5 MB per row:
  // no zero fill first).
  if (logits) logits->resize(batch.logit_indices.size() * static_cast<size_t>(config_.vocab_size));
  if (batch.num_tokens() == 0) return;
  if (graphs_ && plan_.comm == nullptr && observer_ == nullptr &&
      graphs_->TryForward(*this, batch, cache, logits)) {
    return;
  }

  EnsureWorkspace(batch.num_tokens(), static_cast<int32_t>(batch.logit_indices.size()));
  ForwardOps(UploadInputs(batch), batch.logit_indices, cache);
  ReturnLogits(static_cast<int32_t>(batch.logit_indices.size()), logits);
}

LlamaModel::StepInputs LlamaModel::UploadInputs(const ForwardBatch& batch) {
  auto upload = [&](kernels::BackendBuffer& dst, const std::vector<int32_t>& src) {
    backend_->CopyToDevice(dst.data(), src.data(), src.size() * sizeof(int32_t));
  };
  upload(ids_, batch.token_ids);
  upload(positions_, batch.positions);
  upload(token_seq_, batch.token_seq);
  upload(slots_, batch.slot_mapping);
  const size_t table_bytes = batch.block_tables.size() * sizeof(int32_t);
  if (table_bytes > block_tables_.bytes())
    block_tables_ = kernels::BackendBuffer(backend_, table_bytes);
  backend_->CopyToDevice(block_tables_.data(), batch.block_tables.data(), table_bytes);

  StepInputs in;
  in.ids = ids_.as<int32_t>();
  in.positions = positions_.as<int32_t>();
  in.token_seq = token_seq_.as<int32_t>();
  in.host_token_seq = batch.token_seq.data();
  in.slots = slots_.as<int32_t>();
  in.block_tables = block_tables_.as<int32_t>();
  in.num_tokens = batch.num_tokens();
  in.max_blocks_per_seq = batch.max_blocks_per_seq;
  return in;
}

void LlamaModel::ReturnLogits(int32_t num_logits, std::vector<float>* logits) {
  const ModelConfig& c = config_;
  const int32_t shard = plan_.vocab_shard;
  if (!plan_.comm) {
    if (logits)
      backend_->CopyToHost(logits->data(), logits_.data(), logits->size() * sizeof(float));
    return;
  }
  // [rank][row][shard] -> [row][vocab], dropping the last shard's padding.
  const size_t per_rank = static_cast<size_t>(num_logits) * shard;
  plan_.comm->AllGather(logits_.data(), gathered_logits_.data(), per_rank, CommDtype::kF32);
  if (!logits) return;
  gathered_host_.resize(per_rank * plan_.world_size);
  backend_->CopyToHost(gathered_host_.data(), gathered_logits_.data(),
                       gathered_host_.size() * sizeof(float));
  for (int r = 0; r < plan_.world_size; ++r) {
    const int32_t first = shard * r;
    const int32_t rows = std::max(0, std::min(shard, c.vocab_size - first));
    for (int32_t i = 0; i < num_logits; ++i) {
      const float* src = gathered_host_.data() + r * per_rank + static_cast<size_t>(i) * shard;
      std::copy(src, src + rows, logits->data() + static_cast<size_t>(i) * c.vocab_size + first);
    }
  }
}

void LlamaModel::AllReduceHidden(int32_t num_tokens) {
  if (!plan_.comm) return;
  plan_.comm->AllReduceSum(hidden_.data(), static_cast<size_t>(num_tokens) * config_.hidden_size,
                           CommDtype::kF32);
}

void LlamaModel::ForwardOps(const StepInputs& in, const std::vector<int32_t>& logit_indices,
                            PagedKvCache& cache) {
  const ModelConfig& c = config_;
  const int32_t n = in.num_tokens;
  const auto num_logits = static_cast<int32_t>(logit_indices.size());
  const kernels::WeightView table = weights_.embed_tokens.View();
  backend_->Embedding({in.ids, table.data, hidden_.as<float>(), n, c.vocab_size, c.hidden_size,
                       table.dtype, table.scales, table.zeros, table.group_size});
  for (int32_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LlamaLayerWeights& w = weights_.layers[layer];
    backend_->RmsNorm({hidden_.as<float>(), w.input_layernorm.as<float>(), normed_.as<float>(), n,
                       c.hidden_size, static_cast<float>(c.rms_norm_eps)});
    Attention(layer, in, cache);
    backend_->RmsNorm({hidden_.as<float>(), w.post_attention_layernorm.as<float>(),
                       normed_.as<float>(), n, c.hidden_size, static_cast<float>(c.rms_norm_eps)});
    if (w.moe.empty()) {
      Mlp(layer, n);
    } else {
      SparseMoe(layer, n);
    }
  }

  // Final norm and lm_head only for the rows whose logits are wanted: one
  // RmsNorm over a contiguous run of rows (every decode step), else per row.
  float* last = last_hidden_.as<float>();
  int32_t i = 0;
  while (i < num_logits) {
    int32_t run = 1;
    while (i + run < num_logits && logit_indices[i + run] == logit_indices[i] + run) ++run;
    backend_->RmsNorm({hidden_.as<float>() + static_cast<size_t>(logit_indices[i]) * c.hidden_size,
                       weights_.norm.as<float>(), last + static_cast<size_t>(i) * c.hidden_size,
                       run, c.hidden_size, static_cast<float>(c.rms_norm_eps)});
    i += run;
  }
  backend_->MatMul(
      {last, weights_.LmHeadView(plan_.vocab_shard), logits_.as<float>(), num_logits, false});
}

void LlamaModel::Attention(int32_t layer, const StepInputs& in, PagedKvCache& cache) {
  const ModelConfig& c = config_;
  const LlamaLayerWeights& w = weights_.layers[layer];
  const int32_t n = in.num_tokens;
  const float* x = normed_.as<float>();
  ObserveLinearInput(layer, LinearInput::kAttnIn, x, n, c.hidden_size);

  backend_->MatMul({x, w.q_proj.View(), q_.as<float>(), n, false, w.q_bias.as<float>()});
  backend_->MatMul({x, w.k_proj.View(), k_.as<float>(), n, false, w.k_bias.as<float>()});
  backend_->MatMul({x, w.v_proj.View(), v_.as<float>(), n, false, w.v_bias.as<float>()});
  if (c.qk_norm) {  // Qwen3: RMSNorm of each head's vector, rows [tokens * heads, head_dim]
    const auto eps = static_cast<float>(c.rms_norm_eps);
    backend_->RmsNorm({q_.as<float>(), w.q_norm.as<float>(), q_.as<float>(), n * plan_.num_heads,
                       c.head_dim, eps});
    backend_->RmsNorm({k_.as<float>(), w.k_norm.as<float>(), k_.as<float>(), n * plan_.num_kv_heads,
                       c.head_dim, eps});
  }
  // The keys as the cache stores them before RoPE (after k_norm).
  ObserveKeys(layer, n);
  backend_->Rope(
      {q_.as<float>(), in.positions, inv_freq_.as<float>(), n, plan_.num_heads, c.head_dim, 1.0f});
  // tq formats store keys before RoPE and rotate them inside attention.
  if (!kernels::KvStoresPreRopeKeys(cache.layout().dtype)) {
    backend_->Rope({k_.as<float>(), in.positions, inv_freq_.as<float>(), n, plan_.num_kv_heads,
                    c.head_dim, 1.0f});
  }

  const kernels::KvLayerView view = cache.Layer(layer);
  backend_->KvWrite({k_.as<float>(), v_.as<float>(), in.slots, n, view, in.positions});
  kernels::PagedAttentionParams p;
  p.q = q_.as<float>();
  p.out = attn_.as<float>();
  p.token_seq = in.token_seq;
  p.token_pos = in.positions;
  p.host_token_seq = in.host_token_seq;
  p.block_tables = in.block_tables;
  p.num_tokens = n;
  p.num_heads = plan_.num_heads;
  p.max_blocks_per_seq = in.max_blocks_per_seq;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.cache = view;
  backend_->PagedAttention(p);
  ObserveLinearInput(layer, LinearInput::kAttnOut, attn_.as<float>(), n,
                     plan_.num_heads * c.head_dim);
  // Residual add fused into o_proj. Under TP rank 0 adds its partial sum to
  // the residual and the others overwrite their copy of it with theirs, so the
  // all-reduce yields residual + o_proj(attn) with no extra buffer.
  backend_->MatMul({attn_.as<float>(), w.o_proj.View(), hidden_.as<float>(), n, plan_.rank == 0});
  AllReduceHidden(n);
}

void LlamaModel::Mlp(int32_t layer, int32_t n) {
  const ModelConfig& c = config_;
  const LlamaLayerWeights& w = weights_.layers[layer];
  const float* x = normed_.as<float>();
  const int32_t inter = plan_.intermediate;
  ObserveLinearInput(layer, LinearInput::kMlpIn, x, n, c.hidden_size);
  backend_->MatMul({x, w.gate_proj.View(), gate_.as<float>(), n, false});
  backend_->MatMul({x, w.up_proj.View(), up_.as<float>(), n, false});
  backend_->SiluMul({gate_.as<float>(), up_.as<float>(), gate_.as<float>(), n, inter});
  ObserveLinearInput(layer, LinearInput::kMlpDown, gate_.as<float>(), n, inter);
  // Residual as in Attention (rank 0 accumulates, the all-reduce sums).
  backend_->MatMul(
      {gate_.as<float>(), w.down_proj.View(), hidden_.as<float>(), n, plan_.rank == 0});
  AllReduceHidden(n);
}

void LlamaModel::SparseMoe(int32_t layer, int32_t n) {
  const ModelConfig& c = config_;
  const float* x = normed_.as<float>();
  ObserveLinearInput(layer, LinearInput::kMlpIn, x, n, c.hidden_size);
  float* out = moe_out_.as<float>();
  moe_.Forward(c.moe, weights_.layers[layer].moe, x, n, c.hidden_size, out);
  // Residual as in Mlp: rank 0 adds its partial output to the residual, the
  // others replace their copy with theirs, and the all-reduce sums. (Host
  // memory: MoE layers run on host-memory backends only.)
  float* h = hidden_.as<float>();
  const size_t total = static_cast<size_t>(n) * c.hidden_size;
  if (plan_.rank == 0) {
    for (size_t i = 0; i < total; ++i) h[i] += out[i];
  } else {
    std::copy(out, out + total, h);
  }
  AllReduceHidden(n);
}

std::string WeightsSummary(const LlamaModel& model) {
  const std::string summary = model.weights().MemorySummary();
  const int world = model.tp_plan().world_size;
  return world > 1 ? "rank 0 of " + std::to_string(world) + ": " + summary : summary;
}

}  // namespace tq
