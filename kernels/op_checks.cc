#include "kernels/op_checks.h"

#include <stdexcept>
#include <string>

namespace tq::kernels {
namespace {

[[noreturn]] void Fail(std::string_view backend, std::string_view op, const std::string& what) {
  throw std::invalid_argument(std::string(backend) + " " + std::string(op) + ": " + what);
}

void Positive(std::string_view backend, std::string_view op, const char* field, int64_t v) {
  if (v <= 0) Fail(backend, op, std::string(field) + " must be positive, got " + std::to_string(v));
}
void NonNegative(std::string_view backend, std::string_view op, const char* field, int64_t v) {
  if (v < 0) Fail(backend, op, std::string(field) + " must be >= 0, got " + std::to_string(v));
}
void Present(std::string_view backend, std::string_view op, const char* field, const void* ptr) {
  if (ptr == nullptr) Fail(backend, op, std::string(field) + " is null");
}

bool Dense(WeightDtype d) {
  return d == WeightDtype::kF32 || d == WeightDtype::kF16 || d == WeightDtype::kBF16;
}

}  // namespace

void CheckEmbedding(std::string_view backend, const EmbeddingParams& p) {
  constexpr std::string_view op = "Embedding";
  NonNegative(backend, op, "num_tokens", p.num_tokens);
  Positive(backend, op, "vocab", p.vocab);
  Positive(backend, op, "hidden", p.hidden);
  if (!Dense(p.table_dtype)) Fail(backend, op, "table_dtype must be fp32, fp16 or bf16");
  if (p.num_tokens == 0) return;
  Present(backend, op, "ids", p.ids);
  Present(backend, op, "table", p.table);
  Present(backend, op, "out", p.out);
}

void CheckRmsNorm(std::string_view backend, const RmsNormParams& p) {
  constexpr std::string_view op = "RmsNorm";
  NonNegative(backend, op, "rows", p.rows);
  Positive(backend, op, "dim", p.dim);
  if (!(p.eps >= 0.0f)) Fail(backend, op, "eps must be >= 0");
  if (p.rows == 0) return;
  Present(backend, op, "x", p.x);
  Present(backend, op, "weight", p.weight);
  Present(backend, op, "out", p.out);
}

void CheckWeightView(std::string_view backend, std::string_view op, const WeightView& w) {
  const std::string where = std::string(backend) + " " + std::string(op) + ": " +
                            std::string(WeightDtypeName(w.dtype)) + " weight ";
  if (w.out_features <= 0 || w.in_features <= 0) {
    throw std::invalid_argument(where + "has shape [" + std::to_string(w.out_features) + ", " +
                                std::to_string(w.in_features) + "]; both must be positive");
  }
  if (w.data == nullptr) throw std::invalid_argument(where + "has no data");
  switch (w.dtype) {
    case WeightDtype::kF32:
    case WeightDtype::kF16:
    case WeightDtype::kBF16:
      return;
    case WeightDtype::kF32Panels:
    case WeightDtype::kF16Panels:
    case WeightDtype::kBF16Panels:
      if (w.out_features % kPanelCols != 0) {
        throw std::invalid_argument(where + "has " + std::to_string(w.out_features) +
                                    " output features, not whole panels of " +
                                    std::to_string(kPanelCols));
      }
      return;
    case WeightDtype::kInt8:
    case WeightDtype::kInt4:
      break;
    case WeightDtype::kInt8Tiles:
    case WeightDtype::kInt4Tiles:
      if (w.out_features % kIntTileRows != 0 || w.group_size > kIntTileMaxGroup ||
          w.group_size % (w.dtype == WeightDtype::kInt8Tiles ? 4 : 8) != 0) {
        throw std::invalid_argument(where + "[" + std::to_string(w.out_features) + ", " +
                                    std::to_string(w.in_features) + "] g" +
                                    std::to_string(w.group_size) +
                                    " is not whole tiles of 16 rows and chunks of 4 (int8) or 8 "
                                    "(int4) inputs, groups <= 512");
      }
      break;
    default:
      throw std::invalid_argument(where + "has an unknown dtype");
  }
  if (w.scales == nullptr) throw std::invalid_argument(where + "has no scales");
  if (w.group_size <= 0 || w.in_features % w.group_size != 0) {
    throw std::invalid_argument(where + "group_size " + std::to_string(w.group_size) +
                                " does not divide in_features " + std::to_string(w.in_features));
  }
  if (w.dtype == WeightDtype::kInt4 && w.group_size % 2 != 0) {
    throw std::invalid_argument(where + "group_size " + std::to_string(w.group_size) +
                                " is odd (two codes per byte)");
  }
}

void CheckMatMul(std::string_view backend, const MatMulParams& p) {
  constexpr std::string_view op = "MatMul";
  NonNegative(backend, op, "rows", p.rows);
  CheckWeightView(backend, op, p.w);
  if (p.rows == 0) return;
  Present(backend, op, "x", p.x);
  Present(backend, op, "out", p.out);
}

void CheckRope(std::string_view backend, const RopeParams& p) {
  constexpr std::string_view op = "Rope";
  NonNegative(backend, op, "num_tokens", p.num_tokens);
  Positive(backend, op, "num_heads", p.num_heads);
  Positive(backend, op, "head_dim", p.head_dim);
  if (p.head_dim % 2 != 0) Fail(backend, op, "head_dim must be even");
  if (p.num_tokens == 0) return;
  Present(backend, op, "x", p.x);
  Present(backend, op, "positions", p.positions);
  Present(backend, op, "inv_freq", p.inv_freq);
}

void CheckSiluMul(std::string_view backend, const SiluMulParams& p) {
  constexpr std::string_view op = "SiluMul";
  NonNegative(backend, op, "rows", p.rows);
  Positive(backend, op, "dim", p.dim);
  if (p.rows == 0) return;
  Present(backend, op, "gate", p.gate);
  Present(backend, op, "up", p.up);
  Present(backend, op, "out", p.out);
}

void CheckKvLayerView(std::string_view backend, std::string_view op, const KvLayerView& cache) {
  const KvLayout& l = cache.layout;
  Positive(backend, op, "cache.layout.num_blocks", l.num_blocks);
  Positive(backend, op, "cache.layout.block_size", l.block_size);
  Positive(backend, op, "cache.layout.num_kv_heads", l.num_kv_heads);
  Positive(backend, op, "cache.layout.head_dim", l.head_dim);
  Present(backend, op, "cache.k", cache.k);
  Present(backend, op, "cache.v", cache.v);
  const bool tq = KvStoresPreRopeKeys(l.dtype);
  if (tq && (cache.tq == nullptr || cache.tq->rotation == nullptr)) {
    Fail(backend, op, "a tq KV cache needs cache.tq with its rotation");
  }
  if (cache.sink_k != nullptr || cache.sink_tokens != 0) {
    if (!tq || cache.sink_tokens <= 0 || cache.sink_tokens > l.block_size ||
        cache.sink_k == nullptr || cache.sink_v == nullptr) {
      Fail(backend, op, "attention sink needs a tq format, sink_k/sink_v and 1..block_size tokens");
    }
  }
}

void CheckKvWrite(std::string_view backend, const KvWriteParams& p) {
  constexpr std::string_view op = "KvWrite";
  NonNegative(backend, op, "num_tokens", p.num_tokens);
  CheckKvLayerView(backend, op, p.cache);
  if (p.num_tokens == 0) return;
  Present(backend, op, "k", p.k);
  Present(backend, op, "v", p.v);
  Present(backend, op, "slot_mapping", p.slot_mapping);
  if (p.cache.sink_k != nullptr) Present(backend, op, "positions (attention sink)", p.positions);
}

void CheckPagedAttention(std::string_view backend, const PagedAttentionParams& p) {
  constexpr std::string_view op = "PagedAttention";
  NonNegative(backend, op, "num_tokens", p.num_tokens);
  Positive(backend, op, "num_heads", p.num_heads);
  Positive(backend, op, "max_blocks_per_seq", p.max_blocks_per_seq);
  CheckKvLayerView(backend, op, p.cache);
  if (p.num_heads % p.cache.layout.num_kv_heads != 0) {
    Fail(backend, op,
         "num_heads " + std::to_string(p.num_heads) + " is not a multiple of num_kv_heads " +
             std::to_string(p.cache.layout.num_kv_heads));
  }
  if (p.num_tokens == 0) return;
  Present(backend, op, "q", p.q);
  Present(backend, op, "out", p.out);
  Present(backend, op, "token_seq", p.token_seq);
  Present(backend, op, "token_pos", p.token_pos);
  Present(backend, op, "block_tables", p.block_tables);
}

void CheckLogitsTopK(std::string_view backend, const LogitsTopKParams& p) {
  constexpr std::string_view op = "LogitsTopK";
  NonNegative(backend, op, "rows", p.rows);
  Positive(backend, op, "vocab", p.vocab);
  Positive(backend, op, "k", p.k);
  if (p.k > p.vocab || p.k > kMaxLogitsTopK) {
    Fail(backend, op,
         "k must be <= min(vocab, " + std::to_string(kMaxLogitsTopK) + "), got " +
             std::to_string(p.k) + " for vocab " + std::to_string(p.vocab));
  }
  if (p.rows == 0) return;
  Present(backend, op, "logits", p.logits);
  Present(backend, op, "inv_temperature", p.inv_temperature);
  Present(backend, op, "ids", p.ids);
  Present(backend, op, "values", p.values);
  Present(backend, op, "sum_exp", p.sum_exp);
  Present(backend, op, "sum_exp_scaled", p.sum_exp_scaled);
}

}  // namespace tq::kernels
