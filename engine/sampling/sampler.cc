// Token selection from logits (see sampler.h).
//
// Cost: penalties are O(prompt + output) after an O(V) NaN scrub; greedy is one
// O(V) pass. Sampling is O(V) for the softmax plus, with top-k, an
// nth_element over the vocabulary and a sort of only k entries; top-p without
// top-k first sorts the 1024 most likely tokens and sorts the rest only when
// those do not reach top_p (flat distributions), so a 128K vocabulary is not
// fully sorted in the common case.
#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tq {
namespace {

constexpr double kGreedyBelow = 1e-5;   // temperature below this is greedy
constexpr size_t kTopPFirstTry = 1024;  // candidates sorted before falling back to all
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
    for (int32_t t : prompt) {
      if (in_range(t)) seen.push_back(t);
    }
    for (int32_t t : output) {
      if (in_range(t)) seen.push_back(t);
    }
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
    for (int32_t t : output) {
      if (in_range(t)) out.push_back(t);
    }
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

// Argmax (lowest id on ties) and its log-softmax over all logits.
SampledToken Greedy(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  const double m = logits[best];
  if (!std::isfinite(m)) return {best, m > 0 ? 0.0f : kNegInf};
  double z = 0.0;
  for (float l : logits) z += std::exp(static_cast<double>(l) - m);
  return {best, static_cast<float>(-std::log(z))};
}

}  // namespace

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(SeedFrom(params)) {}

SampledToken Sampler::Sample(std::span<float> logits, std::span<const int32_t> prompt,
                             std::span<const int32_t> output) {
  if (logits.empty()) return {};
  for (float& l : logits) {
    if (std::isnan(l)) l = kNegInf;  // keeps the orderings below well defined
  }
  ApplyPenalties(logits, params_, prompt, output);
  if (params_.temperature < kGreedyBelow) return Greedy(logits);

  const auto inv_t = static_cast<float>(1.0 / params_.temperature);
  for (float& l : logits) l *= inv_t;
  const size_t vocab = logits.size();

  // Candidates, descending by logit (ties: lower id first) once `sorted`.
  auto desc = [&logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::vector<int32_t> cand(vocab);
  for (size_t i = 0; i < vocab; ++i) cand[i] = static_cast<int32_t>(i);
  bool sorted = false;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < vocab) {
    const auto k = static_cast<size_t>(params_.top_k);
    std::nth_element(cand.begin(), cand.begin() + k - 1, cand.end(), desc);
    cand.resize(k);
    std::sort(cand.begin(), cand.end(), desc);
    sorted = true;
  }

  double m = kNegInf;
  for (int32_t t : cand) m = std::max(m, static_cast<double>(logits[t]));
  if (!std::isfinite(m)) return Greedy(logits);  // all -inf, or an +inf logit
  auto weight = [&](int32_t t) { return std::exp(static_cast<double>(logits[t]) - m); };
  double z = 0.0;
  for (int32_t t : cand) z += weight(t);

  // top-p: the smallest descending prefix whose probability reaches top_p.
  if (params_.top_p < 1.0) {
    if (!sorted) {
      const size_t first = std::min(kTopPFirstTry, cand.size());
      std::partial_sort(cand.begin(), cand.begin() + first, cand.end(), desc);
      double head = 0.0;
      for (size_t i = 0; i < first; ++i) head += weight(cand[i]);
      if (head / z < params_.top_p) std::sort(cand.begin() + first, cand.end(), desc);
      sorted = true;
    }
    double cum = 0.0;
    size_t keep = 0;
    while (keep < cand.size()) {
      cum += weight(cand[keep]) / z;
      ++keep;
      if (cum >= params_.top_p) break;
    }
    cand.resize(keep);
  }

  // min-p: drop p < min_p * p_max, i.e. weight < min_p (the top weight is 1).
  if (params_.min_p > 0.0) {
    std::erase_if(cand, [&](int32_t t) { return weight(t) < params_.min_p; });
  }

  z = 0.0;
  for (int32_t t : cand) z += weight(t);
  const double u = Uniform01(rng_) * z;
  double cum = 0.0;
  int32_t chosen = cand.back();
  for (int32_t t : cand) {
    cum += weight(t);
    if (u < cum) {
      chosen = t;
      break;
    }
  }
  return {chosen, static_cast<float>(std::log(weight(chosen) / z))};
}

}  // namespace tq
