#include "engine/runtime/kv_dtype_auto.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "engine/common/error.h"
#include "engine/kv/block_pool.h"
#include "engine/runtime/perplexity.h"

namespace tq {
namespace {

using kernels::KvDtype;

// Most logits one scoring chunk holds (16 MiB of floats).
constexpr int32_t kScoringLogitFloats = 4 << 20;

// Perplexity of `tokens` (positions 1.. scored) through a fresh cache of `dtype`.
double ScorePerplexity(ModelExecutor& executor, std::span<const int32_t> tokens, KvDtype dtype,
                       int32_t block_size, int32_t chunk, const ScoringCacheFactory& make_cache) {
  const auto n = static_cast<int32_t>(tokens.size());
  const int32_t blocks = (n + block_size - 1) / block_size;
  const RankCaches caches = make_cache(dtype, blocks);
  BlockPool pool(blocks);
  BlockTable table(block_size);
  table.EnsureCapacity(pool, n);
  // Chunks of at most kScoringLogitFloats logits: the whole [n, vocab] at a
  // 152K vocabulary was 155 MB per candidate, and allocating it cost more
  // start-up time than the forward passes on small models.
  const int32_t vocab = executor.model().config().vocab_size;
  const int32_t rows = std::clamp(kScoringLogitFloats / vocab, 1, chunk);
  double nll = 0.0;
  PrefillSequence(
      [&](const ForwardBatch& b, std::vector<float>* l) { executor.Forward(b, caches, l); }, table,
      tokens, 0, rows,
      [&](int32_t first, int32_t count, const float* logits) {
        // Row q predicts token q + 1.
        for (int32_t q = first; q < first + count && q + 1 < n; ++q) {
          nll += NegLogProb(logits + static_cast<size_t>(q - first) * vocab, vocab, tokens[q + 1]);
        }
      });
  table.Release(pool);
  const double ppl = std::exp(nll / (n - 1));
  if (!std::isfinite(ppl)) {
    throw Error("--kv-cache-dtype auto: the perplexity with a " +
                std::string(kernels::KvDtypeName(dtype)) +
                " cache is not finite (NaN or Inf in the model's logits)");
  }
  return ppl;
}

}  // namespace

int32_t HeldOutTokenCount(int32_t n) {
  return std::min(kMaxHeldOutTokens, std::max(n, 0) / 3);
}

std::vector<KvDtype> AutoKvCandidates(int32_t head_dim, std::span<const KvDtype> extra) {
  std::vector<KvDtype> out;
  out.reserve(3 + extra.size());
  for (KvDtype d : {KvDtype::kTq3, KvDtype::kTq4, KvDtype::kInt8}) out.push_back(d);
  for (KvDtype d : extra) out.push_back(d);
  std::stable_sort(out.begin(), out.end(), [head_dim](KvDtype a, KvDtype b) {
    return kernels::KvBitsPerElement(a, head_dim) < kernels::KvBitsPerElement(b, head_dim);
  });
  return out;
}

KvDtype PickKvDtype(std::span<const KvQualityScore> scores, double budget) {
  const KvQualityScore* best = nullptr;
  for (const KvQualityScore& s : scores) {
    if (s.ratio <= budget && (best == nullptr || s.bits_per_element < best->bits_per_element)) {
      best = &s;
    }
  }
  return best ? best->dtype : KvDtype::kF16;
}

KvDtypeChoice ChooseKvDtype(ModelExecutor& executor, std::span<const int32_t> held_out,
                            std::span<const KvDtype> candidates, double budget, int32_t block_size,
                            int32_t chunk, const ScoringCacheFactory& make_cache) {
  if (held_out.size() < 2) {
    throw Error("--kv-cache-dtype auto: the held-out calibration text has " +
                std::to_string(held_out.size()) + " tokens; at least 2 are needed");
  }
  const auto start = std::chrono::steady_clock::now();
  KvDtypeChoice c;
  c.automatic = true;
  c.budget = budget;
  c.scored_tokens = static_cast<int64_t>(held_out.size()) - 1;
  c.reference_perplexity =
      ScorePerplexity(executor, held_out, KvDtype::kF32, block_size, chunk, make_cache);
  const int32_t head_dim = executor.model().config().head_dim;
  for (KvDtype dtype : candidates) {
    KvQualityScore s;
    s.dtype = dtype;
    s.bits_per_element = kernels::KvBitsPerElement(dtype, head_dim);
    s.perplexity = ScorePerplexity(executor, held_out, dtype, block_size, chunk, make_cache);
    s.ratio = s.perplexity / c.reference_perplexity;
    c.scores.push_back(s);
  }
  std::stable_sort(c.scores.begin(), c.scores.end(), [](const auto& a, const auto& b) {
    return a.bits_per_element < b.bits_per_element;
  });
  c.dtype = PickKvDtype(c.scores, budget);
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c;
}

std::string KvDtypeChoice::Describe() const {
  if (!automatic) return "";
  std::string out = "auto: " + std::string(kernels::KvDtypeName(dtype)) +
                    " (ppl ratio vs fp32 on " + std::to_string(scored_tokens) + " held-out tokens:";
  char buf[64];
  for (size_t i = 0; i < scores.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s %s %.4f", i == 0 ? "" : ",",
                  std::string(kernels::KvDtypeName(scores[i].dtype)).c_str(), scores[i].ratio);
    out += buf;
  }
  std::snprintf(buf, sizeof(buf), "; budget %.4g; %.2f s)", budget, seconds);
  out += buf;
  if (std::none_of(scores.begin(), scores.end(),
                   [&](const KvQualityScore& s) { return s.ratio <= budget; })) {
    out += "; none within the budget, so fp16";
  }
  return out;
}

}  // namespace tq
