// Token selection from logits (see sampler.h).
//
// Cost: penalties are O(prompt + output) after an O(V) NaN scrub; greedy is an
// argmax pass and one exp pass. Sampling is an nth_element selecting the
// max(top_k, 1024) largest logits, a sort of those and one exp pass; the
// whole row is sorted only when those candidates cannot decide (flat
// distributions under top-p, a draw in the far tail), so a 128K vocabulary
// is not fully sorted in the common case.
#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_topk.h"

namespace tq {
namespace {

constexpr double kGreedyBelow = 1e-5;       // temperature below this is greedy
constexpr int32_t kFirstCandidates = 1024;  // sorted before falling back to the whole row
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Uniform double in [0, 1) from the top 53 bits (portable, unlike
// std::uniform_real_distribution whose mapping is library-specific).
double Uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

uint64_t SeedFrom(const SamplingParams& params) {
  if (params.seed) return *params.seed;
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// HF/CTRL repetition penalty on each distinct prompt+output token, then the
// OpenAI presence/frequency penalties on output tokens:
//   logit -= frequency_penalty * count + presence_penalty * (count > 0).
void ApplyPenalties(std::span<float> logits, const SamplingParams& p,
                    std::span<const int32_t> prompt, std::span<const int32_t> output) {
  const auto vocab = static_cast<int32_t>(logits.size());
  auto in_range = [vocab](int32_t t) { return t >= 0 && t < vocab; };
  if (p.repetition_penalty != 1.0) {
    std::vector<int32_t> seen;
    seen.reserve(prompt.size() + output.size());
    std::ranges::copy_if(prompt, std::back_inserter(seen), in_range);
    std::ranges::copy_if(output, std::back_inserter(seen), in_range);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    const auto rp = static_cast<float>(p.repetition_penalty);
    for (int32_t t : seen) {
      float& l = logits[t];
      l = l > 0.0f ? l / rp : l * rp;
    }
  }
  if (p.presence_penalty != 0.0 || p.frequency_penalty != 0.0) {
    std::vector<int32_t> out;
    out.reserve(output.size());
    std::ranges::copy_if(output, std::back_inserter(out), in_range);
    std::sort(out.begin(), out.end());
    for (size_t i = 0; i < out.size();) {
      size_t j = i;
      while (j < out.size() && out[j] == out[i]) ++j;
      const double count = static_cast<double>(j - i);
      logits[out[i]] -= static_cast<float>(p.frequency_penalty * count + p.presence_penalty);
      i = j;
    }
  }
}

}  // namespace

size_t OrderCandidates(std::span<const float> keys, std::span<const int32_t> ids, size_t vocab,
                       std::vector<int32_t>* perm) {
  const size_t k = keys.size();
  perm->resize(k);
  for (size_t i = 0; i < k; ++i) (*perm)[i] = static_cast<int32_t>(i);
  for (size_t i = 0; i < k;) {
    size_t j = i + 1;
    while (j < k && keys[j] == keys[i]) ++j;
    if (j - i > 1) {
      std::sort(perm->begin() + static_cast<ptrdiff_t>(i),
                perm->begin() + static_cast<ptrdiff_t>(j),
                [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
    }
    i = j;
  }
  if (k >= vocab) return k;
  size_t exact = 0;
  while (exact < k && keys[exact] > keys[k - 1]) ++exact;
  return exact;
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params),
      inv_t_(params.temperature < kGreedyBelow ? 1.0f
                                               : static_cast<float>(1.0 / params.temperature)),
      rng_(SeedFrom(params)) {}

bool Sampler::greedy() const {
  return params_.temperature < kGreedyBelow;
}

bool Sampler::has_penalties() const {
  return params_.repetition_penalty != 1.0 || params_.presence_penalty != 0.0 ||
         params_.frequency_penalty != 0.0;
}

int32_t Sampler::FirstCandidates(int32_t vocab) const {
  if (greedy()) return std::min(vocab, 1);
  return std::min(vocab, std::max(params_.top_k, kFirstCandidates));
}

SampledToken Sampler::Sample(std::span<float> logits, std::span<const int32_t> prompt,
                             std::span<const int32_t> output) {
  if (logits.empty()) return {};
  for (float& l : logits) {
    if (std::isnan(l)) l = kNegInf;  // keeps the orderings below well defined
  }
  ApplyPenalties(logits, params_, prompt, output);
  const auto vocab = static_cast<int32_t>(logits.size());
  LogitCandidates c;
  c.vocab = vocab;
  // The sum a draw needs (temperature-scaled); greedy needs none.
  double* scaled_sum = greedy() ? nullptr : &c.sum_exp_scaled;
  for (int32_t k = FirstCandidates(vocab);; k = vocab) {
    ids_.resize(static_cast<size_t>(k));
    values_.resize(static_cast<size_t>(k));
    kernels::cpu::LogitsTopKRow(logits.data(), vocab, k, inv_t_, ids_.data(), values_.data(),
                                nullptr, scaled_sum, &keys_);
    scaled_sum = nullptr;  // the sum does not depend on k
    c.ids = ids_;
    c.values = values_;
    if (std::optional<SampledToken> t = Decide(c, logits)) return *t;
    if (k == vocab) throw std::logic_error("Sampler: the whole row left the draw undecided");
  }
}

std::optional<SampledToken> Sampler::SampleCandidates(const LogitCandidates& c) {
  if (c.ids.empty() || c.ids.size() != c.values.size() ||
      c.ids.size() > static_cast<size_t>(c.vocab)) {
    throw std::invalid_argument("Sampler: candidates need 1..vocab ids with one value each");
  }
  return Decide(c, {});
}

// The decision on candidates, exact or nullopt (docs/engine.md "Sampling
// from candidates"). Only the first `exact` candidates in temperature-scaled
// order are certain: the scaled values of tokens outside the set are <= the
// last candidate's, so candidates tied with it may be preceded (lower id) by
// outsiders.
std::optional<SampledToken> Sampler::Decide(const LogitCandidates& c, std::span<const float> row) {
  const size_t k = c.ids.size();
  const auto vocab = static_cast<size_t>(c.vocab);
  if (greedy()) {  // the first candidate is the argmax with the lowest id
    return SampledToken{c.ids[0], c.values[0] == kNegInf ? kNegInf : 0.0f};
  }

  // Scaling can merge distinct logits into one float: OrderCandidates
  // re-sorts those ties by id.
  scaled_.resize(k);
  for (size_t i = 0; i < k; ++i) scaled_[i] = c.values[i] * inv_t_;
  const size_t exact = OrderCandidates(scaled_, c.ids, vocab, &perm_);
  auto id = [&](size_t j) { return c.ids[perm_[j]]; };

  const double m = scaled_[0];
  if (!std::isfinite(m)) {  // all -inf, or an +inf: argmax of the scaled row
    if (exact == 0) return std::nullopt;
    return SampledToken{id(0), m > 0 ? 0.0f : kNegInf};
  }
  auto weight = [&](size_t j) { return std::exp(static_cast<double>(scaled_[perm_[j]]) - m); };

  // The kept tokens are a descending prefix [0, limit); `whole` while that is
  // the entire row, whose z is the backend's full-row sum.
  size_t limit = vocab;
  bool whole = true;
  double z = c.sum_exp_scaled;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < vocab) {
    limit = static_cast<size_t>(params_.top_k);
    if (limit > exact) return std::nullopt;
    whole = false;
    z = 0.0;
    for (size_t j = 0; j < limit; ++j) z += weight(j);
  }
  // top-p: the smallest descending prefix whose probability reaches top_p.
  if (params_.top_p < 1.0) {
    double cum = 0.0;
    size_t keep = 0;
    while (keep < limit) {
      if (keep >= exact) return std::nullopt;
      cum += weight(keep) / z;
      ++keep;
      if (cum >= params_.top_p) break;
    }
    limit = keep;
    whole = false;
  }
  // min-p: drop p < min_p * p_max, i.e. weight < min_p (the top weight is 1).
  // A candidate below the cut decides it: every later token weighs no more.
  if (params_.min_p > 0.0) {
    size_t keep = 0;
    while (keep < limit) {
      if (keep < k && weight(keep) < params_.min_p) break;
      if (keep >= exact) return std::nullopt;
      ++keep;
    }
    if (keep < limit) whole = false;
    limit = keep;
  }
  if (!whole) {
    z = 0.0;
    for (size_t j = 0; j < limit; ++j) z += weight(j);
  }

  if (!pending_u_) pending_u_ = Uniform01(rng_);
  const double u = *pending_u_ * z;
  // The walk: ranks [0, head) in descending order, then the other kept tokens
  // in id order (no sort of a long flat tail; the order is fixed by the
  // values alone, so every k gives the same walk).
  const size_t head = std::min(limit, static_cast<size_t>(kSortedDrawRanks));
  double cum = 0.0;
  auto pick = [&](int32_t token, double w) {
    pending_u_.reset();
    return SampledToken{token, static_cast<float>(std::log(w / z))};
  };
  for (size_t j = 0; j < head; ++j) {
    if (j >= exact) return std::nullopt;  // the draw lands beyond the candidates
    cum += weight(j);
    if (u < cum) return pick(id(j), weight(j));
  }
  // Rounding can leave u at or past the last sum: the last token walked.
  int32_t last = id(head - 1);
  double last_w = weight(head - 1);
  if (limit == head) return pick(last, last_w);
  if (limit <= exact) {  // every kept rank is a candidate (a cut prefix, or k = vocab)
    tail_.assign(perm_.begin() + static_cast<ptrdiff_t>(head),
                 perm_.begin() + static_cast<ptrdiff_t>(limit));
    std::sort(tail_.begin(), tail_.end(),
              [&](int32_t a, int32_t b) { return c.ids[a] < c.ids[b]; });
    for (int32_t i : tail_) {
      last = c.ids[i];
      last_w = std::exp(static_cast<double>(scaled_[i]) - m);
      cum += last_w;
      if (u < cum) break;
    }
    return pick(last, last_w);
  }
  if (row.empty()) return std::nullopt;  // the whole row's tail: needs the row
  // Rank head - 1 is known (exact >= head); a token is in the head iff it
  // precedes or is that entry in (scaled descending, id ascending) order.
  const float s_edge = scaled_[perm_[head - 1]];
  const int32_t id_edge = id(head - 1);
  for (size_t t = 0; t < row.size(); ++t) {
    const float s = row[t] * inv_t_;
    const auto tid = static_cast<int32_t>(t);
    if (s > s_edge || (s == s_edge && tid <= id_edge)) continue;
    last = tid;
    last_w = std::exp(static_cast<double>(s) - m);
    cum += last_w;
    if (u < cum) break;
  }
  return pick(last, last_w);
}

}  // namespace tq
