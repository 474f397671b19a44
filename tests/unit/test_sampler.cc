// Sampler and SamplingParams: values computed by hand in the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "engine/sampling/sampler.h"
#include "kernels/cpu/cpu_topk.h"

namespace tq {
namespace {

using Ids = std::vector<int32_t>;
using Logits = std::vector<float>;

SamplingParams Params(double temperature, uint64_t seed = 7) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

// log softmax(logits / t)[i], in double.
double LogSoftmax(const Logits& logits, size_t i, double t = 1.0) {
  double m = -INFINITY;
  for (float l : logits) m = std::max(m, l / t);
  double z = 0.0;
  for (float l : logits) z += std::exp(l / t - m);
  return logits[i] / t - m - std::log(z);
}

// Logits whose softmax is exactly `probs` (up to float rounding).
Logits FromProbs(const std::vector<double>& probs) {
  Logits l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

SampledToken Draw(Sampler& s, const Logits& logits, const Ids& prompt = {},
                  const Ids& output = {}) {
  Logits copy = logits;
  return s.Sample(copy, prompt, output);
}

// Draws n tokens; returns counts per id and checks each logprob against
// log(probs[id]) where probs is the expected final distribution.
std::map<int32_t, int> Histogram(Sampler& s, const Logits& logits, int n,
                                 const std::map<int32_t, double>& expected) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) {
    const SampledToken t = Draw(s, logits);
    ++counts[t.token];
    auto it = expected.find(t.token);
    if (it == expected.end()) {
      ADD_FAILURE() << "token " << t.token << " should have been excluded";
      continue;
    }
    EXPECT_NEAR(t.logprob, std::log(it->second), 1e-5) << "token " << t.token;
  }
  return counts;
}

// Pearson chi-square of observed counts against expected probabilities.
double ChiSquare(const std::map<int32_t, int>& counts, const std::map<int32_t, double>& expected,
                 int n) {
  double chi2 = 0.0;
  for (const auto& [id, p] : expected) {
    const auto it = counts.find(id);
    const double obs = it == counts.end() ? 0.0 : it->second;
    const double e = p * n;
    chi2 += (obs - e) * (obs - e) / e;
  }
  return chi2;
}

std::map<int32_t, double> Renormalized(const std::vector<double>& probs, const Ids& keep) {
  double z = 0.0;
  for (int32_t id : keep) z += probs[id];
  std::map<int32_t, double> m;
  for (int32_t id : keep) m[id] = probs[id] / z;
  return m;
}

TEST(Sampler, GreedyPicksArgmaxWithLowestIdOnTies) {
  Sampler s(Params(0.0));
  const Logits logits = {0.1f, 2.5f, -1.0f, 2.5f, 1.0f};
  const SampledToken t = Draw(s, logits);
  EXPECT_EQ(t.token, 1);
  EXPECT_EQ(t.logprob, 0.0f);  // greedy's processed distribution: all mass on the argmax
  Sampler tiny(Params(1e-6));  // below 1e-5 is greedy too
  EXPECT_EQ(Draw(tiny, {3.0f, 1.0f, 4.0f, 1.0f, 5.0f, -9.0f}).token, 4);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedsDiffer) {
  const Logits logits = {0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
  Sampler a(Params(1.0, 42)), b(Params(1.0, 42)), c(Params(1.0, 43));
  Ids sa, sb, sc;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(Draw(a, logits).token);
    sb.push_back(Draw(b, logits).token);
    sc.push_back(Draw(c, logits).token);
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Sampler, TopKOneEqualsGreedy) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int trial = 0; trial < 50; ++trial) {
    Logits logits(100);
    for (auto& l : logits) l = normal(gen);
    SamplingParams p = Params(1.3, trial);
    p.top_k = 1;
    Sampler topk(p), greedy(Params(0.0));
    const SampledToken t = Draw(topk, logits);
    EXPECT_EQ(t.token, Draw(greedy, logits).token);
    EXPECT_FLOAT_EQ(t.logprob, 0.0f);  // the only candidate
  }
}

TEST(Sampler, FrequenciesMatchSoftmaxOverTemperature) {
  const Logits logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f};
  const double t = 0.7;
  std::map<int32_t, double> expected;
  for (size_t i = 0; i < logits.size(); ++i) expected[i] = std::exp(LogSoftmax(logits, i, t));
  Sampler s(Params(t, 2024));
  const int n = 20000;
  const auto counts = Histogram(s, logits, n, expected);
  // 5 degrees of freedom: P(chi2 > 30) ~ 1.5e-5.
  EXPECT_LT(ChiSquare(counts, expected, n), 30.0);
  // And every token within 4 sigma.
  for (const auto& [id, p] : expected) {
    const double sigma = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(counts.count(id) ? counts.at(id) : 0, n * p, 4 * sigma) << "token " << id;
  }
}

TEST(Sampler, TopKKeepsTheKLargestRenormalized) {
  const std::vector<double> probs = {0.05, 0.3, 0.1, 0.25, 0.2, 0.1};
  SamplingParams p = Params(1.0, 3);
  p.top_k = 3;  // ids 1, 3, 4
  Sampler s(p);
  const auto expected = Renormalized(probs, {1, 3, 4});
  const int n = 20000;
  const auto counts = Histogram(s, FromProbs(probs), n, expected);
  EXPECT_LT(ChiSquare(counts, expected, n), 25.0);  // 2 dof
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  const std::vector<double> probs = {0.15, 0.5, 0.05, 0.2, 0.1};
  // Sorted: 1 (0.5), 3 (0.2), 0 (0.15), 4 (0.1), 2 (0.05); cumulative 0.5,
  // 0.7, 0.85, 0.95, 1.0.
  const std::vector<std::pair<double, Ids>> cases = {
      {0.45, {1}}, {0.69, {1, 3}}, {0.71, {1, 3, 0}}, {0.8, {1, 3, 0}}, {0.9, {1, 3, 0, 4}}};
  for (const auto& [top_p, keep] : cases) {
    SCOPED_TRACE("top_p " + std::to_string(top_p));
    SamplingParams p = Params(1.0, 11);
    p.top_p = top_p;
    Sampler s(p);
    const auto expected = Renormalized(probs, keep);
    const auto counts = Histogram(s, FromProbs(probs), 4000, expected);
    EXPECT_EQ(counts.size(), keep.size());  // every kept token occurs
  }
}

TEST(Sampler, TopPOnAFlatLargeVocabularySortsBeyondTheFirstBlock) {
  // 3000 equal logits: top_p 0.9 keeps ~2700 tokens (ties broken by lower id),
  // more than the first partial sort covers.
  const Logits logits(3000, 0.25f);
  SamplingParams p = Params(1.0, 8);
  p.top_p = 0.9;
  Sampler s(p);
  int32_t max_seen = 0;
  for (int i = 0; i < 600; ++i) {
    const SampledToken t = Draw(s, logits);
    max_seen = std::max(max_seen, t.token);
    EXPECT_NEAR(t.logprob, -std::log(2700.0), 1e-3);
  }
  EXPECT_LE(max_seen, 2700);
  EXPECT_GT(max_seen, 2500);  // the tail of the kept set is reached
}

TEST(Sampler, MinPDropsTokensBelowFractionOfTheMax) {
  const std::vector<double> probs = {0.06, 0.4, 0.2, 0.3, 0.04};
  SamplingParams p = Params(1.0, 13);
  p.min_p = 0.2;  // threshold 0.08: ids 0 and 4 go
  Sampler s(p);
  const auto expected = Renormalized(probs, {1, 2, 3});
  const int n = 20000;
  const auto counts = Histogram(s, FromProbs(probs), n, expected);
  EXPECT_LT(ChiSquare(counts, expected, n), 25.0);
}

TEST(Sampler, TopKThenTopPThenMinP) {
  const std::vector<double> probs = {0.3, 0.25, 0.2, 0.15, 0.1};
  SamplingParams p = Params(1.0, 17);
  p.top_k = 4;     // {0,1,2,3}, renormalized by 0.9: .333 .278 .222 .167
  p.top_p = 0.85;  // cumulative .333 .611 .833 1.0 -> {0,1,2,3}
  p.min_p = 0.6;   // threshold .6*.333 = .2 of the renormalized max -> {0,1,2}
  Sampler s(p);
  const auto expected = Renormalized(probs, {0, 1, 2});
  const auto counts = Histogram(s, FromProbs(probs), 4000, expected);
  EXPECT_EQ(counts.size(), 3u);
}

TEST(Sampler, TemperatureScalesTheReturnedLogprob) {
  const Logits logits = {1.0f, 3.0f, 2.0f};
  SamplingParams p = Params(2.0, 21);
  Sampler s(p);
  for (int i = 0; i < 50; ++i) {
    const SampledToken t = Draw(s, logits);
    EXPECT_NEAR(t.logprob, LogSoftmax(logits, t.token, 2.0), 1e-5);
  }
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p = Params(0.0);
  p.repetition_penalty = 2.0;
  Sampler s(p);
  Logits logits = {2.0f, 1.5f, -1.0f, 0.5f};
  // Token 0 in the prompt, 2 in the output (twice: penalized once), 99 out of range.
  const SampledToken t = s.Sample(logits, Ids{0, 99}, Ids{2, 2});
  const Logits want = {1.0f, 1.5f, -2.0f, 0.5f};
  EXPECT_EQ(logits, want);
  EXPECT_EQ(t.token, 1);  // flipped from 0
  // Penalty < 1 rewards repeats.
  SamplingParams q = Params(0.0);
  q.repetition_penalty = 0.5;
  Sampler r(q);
  EXPECT_EQ(Draw(r, {2.0f, 1.5f, -1.0f, 0.5f}, Ids{1}, Ids{}).token, 1);  // 1.5 -> 3.0
}

TEST(Sampler, PresenceAndFrequencyPenaltiesFollowOpenAI) {
  SamplingParams p = Params(0.0);
  p.frequency_penalty = 0.5;
  p.presence_penalty = 0.4;
  Sampler s(p);
  Logits logits = {3.0f, 2.5f, 0.0f, 1.0f};
  // Output counts: token 0 x3, token 2 x1. Prompt tokens are not penalized.
  const SampledToken t = s.Sample(logits, Ids{3, 3, 1}, Ids{0, 2, 0, 0});
  const Logits want = {3.0f - 1.5f - 0.4f, 2.5f, 0.0f - 0.5f - 0.4f, 1.0f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(logits[i], want[i]);
  EXPECT_EQ(t.token, 1);  // flipped from 0

  // Negative presence encourages tokens already generated.
  SamplingParams q = Params(0.0);
  q.presence_penalty = -2.0;
  Sampler r(q);
  EXPECT_EQ(Draw(r, {3.0f, 2.5f, 0.0f}, Ids{}, Ids{1}).token, 1);
}

TEST(Sampler, PenaltiesApplyBeforeTemperatureInSampling) {
  SamplingParams p = Params(0.5, 5);
  p.frequency_penalty = 1.0;
  Sampler s(p);
  const Logits logits = {1.0f, 1.0f, 0.0f};
  const Logits penalized = {0.0f, 1.0f, 0.0f};  // token 0 generated once
  for (int i = 0; i < 50; ++i) {
    Logits copy = logits;
    const SampledToken t = s.Sample(copy, Ids{}, Ids{0});
    EXPECT_NEAR(t.logprob, LogSoftmax(penalized, t.token, 0.5), 1e-5);
  }
}

TEST(Sampler, LargeVocabularyTopK) {
  std::mt19937 gen(77);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  Logits logits(128 * 1024);
  for (auto& l : logits) l = normal(gen);
  Ids order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 40, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const std::set<int32_t> top40(order.begin(), order.begin() + 40);
  SamplingParams p = Params(1.0, 1);
  p.top_k = 40;
  p.top_p = 0.95;
  Sampler s(p);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(top40.count(Draw(s, logits).token));
}

TEST(SamplingParams, DefaultsAreValid) {
  EXPECT_EQ(SamplingParams{}.Validate(), "");
}

TEST(SamplingParams, ValidateNamesFieldAndValue) {
  auto check = [](auto mutate, const std::string& want) {
    SamplingParams p;
    mutate(p);
    EXPECT_EQ(p.Validate(), want);
  };
  check([](SamplingParams& p) { p.temperature = -0.5; },
        "temperature must be a finite number >= 0, got -0.5");
  check([](SamplingParams& p) { p.temperature = INFINITY; },
        "temperature must be a finite number >= 0, got inf");
  // Near -DBL_MAX the short roundings ("-2e+308") overflow when read back:
  // the message still shows the value (Python's repr gives the same digits).
  // Regression of tests/fuzz/corpus/grpc_request/crash_temperature_near_dbl_max.
  check([](SamplingParams& p) { p.temperature = -1.6850163752359144e+308; },
        "temperature must be a finite number >= 0, got -1.6850163752359144e+308");
  check([](SamplingParams& p) { p.presence_penalty = 1.7976931348623157e+308; },
        "presence_penalty must be in [-2, 2], got 1.7976931348623157e+308");
  check([](SamplingParams& p) { p.top_p = 2; }, "top_p must be in (0, 1], got 2");
  check([](SamplingParams& p) { p.top_p = 0; }, "top_p must be in (0, 1], got 0");
  check([](SamplingParams& p) { p.top_p = NAN; }, "top_p must be in (0, 1], got nan");
  check([](SamplingParams& p) { p.top_k = -2; },
        "top_k must be -1 or 0 (disabled) or a positive integer, got -2");
  check([](SamplingParams& p) { p.min_p = 1.5; }, "min_p must be in [0, 1], got 1.5");
  check([](SamplingParams& p) { p.repetition_penalty = 0; },
        "repetition_penalty must be a finite number > 0, got 0");
  check([](SamplingParams& p) { p.presence_penalty = 2.5; },
        "presence_penalty must be in [-2, 2], got 2.5");
  check([](SamplingParams& p) { p.frequency_penalty = -3; },
        "frequency_penalty must be in [-2, 2], got -3");
  check([](SamplingParams& p) { p.max_tokens = -1; }, "max_tokens must be >= 0, got -1");
  check(
      [](SamplingParams& p) {
        p.stop_token_ids = {2, -7};
      },
      "stop_token_ids[1] must be >= 0, got -7");
  // Boundaries that are allowed.
  check([](SamplingParams& p) { p.temperature = 0; }, "");
  check([](SamplingParams& p) { p.temperature = 5; }, "");
  check([](SamplingParams& p) { p.top_k = -1; }, "");
  check([](SamplingParams& p) { p.top_p = 1; }, "");
  check([](SamplingParams& p) { p.min_p = 1; }, "");
  check([](SamplingParams& p) { p.presence_penalty = -2; }, "");
  check([](SamplingParams& p) { p.frequency_penalty = 2; }, "");
  check([](SamplingParams& p) { p.max_tokens = 0; }, "");
}

// The draw rule, computed here from its definition: u = top 53 bits of the
// first mt19937_64(seed) output / 2^53; tokens walked in descending logit
// order (ties by lower id) for the first 256 ranks, then in id order; the
// first whose running weight passes u * z.
TEST(Sampler, DrawWalksHeadDescendingThenTailById) {
  Logits small = {0.3f, 1.2f, -0.4f, 1.2f, 0.9f, -2.0f, 0.0f};
  Logits flat(1000);  // most draws land past the first 256 ranks
  std::mt19937_64 gen(3);
  std::uniform_int_distribution<int> level(0, 300);
  for (float& l : flat) l = 0.001f * static_cast<float>(level(gen));
  int tail_draws = 0;
  for (const Logits* logits : {&small, &flat}) {
    const size_t vocab = logits->size();
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return (*logits)[a] > (*logits)[b]; });
    const size_t head = std::min<size_t>(vocab, 256);
    std::sort(order.begin() + static_cast<ptrdiff_t>(head), order.end());  // tail by id
    const double m = (*logits)[order[0]];
    double z = 0.0;
    for (float l : *logits) z += std::exp(static_cast<double>(l) - m);
    for (uint64_t seed = 1; seed <= 40; ++seed) {
      std::mt19937_64 rng(seed);
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      double cum = 0.0;
      size_t rank = vocab - 1;
      for (size_t j = 0; j < vocab; ++j) {
        cum += std::exp(static_cast<double>((*logits)[order[j]]) - m);
        if (u * z < cum) {
          rank = j;
          break;
        }
      }
      tail_draws += rank >= head;
      Sampler s(Params(1.0, seed));
      const SampledToken t = Draw(s, *logits);
      EXPECT_EQ(t.token, order[rank]) << "seed " << seed << " vocab " << vocab;
      EXPECT_NEAR(t.logprob, LogSoftmax(*logits, static_cast<size_t>(order[rank])), 1e-6);
    }
  }
  EXPECT_GT(tail_draws, 10);
}

// Neighbouring floats lo < hi that scaling by inv_t rounds onto one value
// (exists for most temperatures); {5, 5} when none is found below 2.
std::pair<float, float> MergedByScaling(float inv_t) {
  if (inv_t == 1.0f) return {5.0f, 5.0f};
  for (float lo = 1.0f; lo < 2.0f; lo = std::nextafter(lo, 9.0f)) {
    const float hi = std::nextafter(lo, 9.0f);
    if (lo * inv_t == hi * inv_t) return {lo, hi};
  }
  return {5.0f, 5.0f};
}

// A row with many ties at the top, pairs of top logits that temperature
// scaling merges (so the scaled order differs from the raw one), -inf and
// NaN entries.
Logits TieRow(std::mt19937_64& rng, int32_t vocab, std::pair<float, float> merged) {
  const auto [lo, hi] = merged;
  Logits row(static_cast<size_t>(vocab));
  std::uniform_int_distribution<int> level(0, 39), kind(0, 49);
  for (float& l : row) {
    const int k = kind(rng);
    if (k == 0) {
      l = -INFINITY;
    } else if (k == 1) {
      l = NAN;
    } else if (k < 5) {
      l = hi;
    } else if (k < 8) {
      l = lo;
    } else {
      l = 0.1f * static_cast<float>(level(rng)) - 3.0f;  // below lo
    }
  }
  return row;
}

// Sampling from candidates (any k) + the full-row fallback gives exactly the
// tokens, logprobs and RNG stream of sampling from the full row.
TEST(Sampler, CandidatesGiveTheFullRowResult) {
  struct Case {
    double temperature, top_p, min_p;
    int32_t top_k;
  };
  const Case cases[] = {{0.0, 1.0, 0.0, 0}, {1.0, 1.0, 0.0, 0},   {0.7, 1.0, 0.0, 0},
                        {1.3, 0.9, 0.0, 0}, {0.8, 0.5, 0.0, 0},   {1.0, 1.0, 0.05, 0},
                        {1.0, 1.0, 0.0, 5}, {0.6, 0.95, 0.0, 40}, {1.0, 0.8, 0.1, 20},
                        {3.0, 1.0, 0.0, 0}, {1.0, 0.999, 0.0, 0}, {0.9, 1.0, 0.9, 0}};
  std::mt19937_64 rng(11);
  int decided = 0, undecided = 0;
  for (const Case& c : cases) {
    for (int32_t vocab : {1, 7, 300, 2053}) {
      for (int32_t k : {1, 4, 64, 1024}) {
        if (k > vocab) continue;
        SamplingParams p = Params(c.temperature, rng());
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        p.top_k = c.top_k;
        Sampler full(p), cand(p);
        const std::pair<float, float> merged = MergedByScaling(cand.inverse_temperature());
        for (int step = 0; step < 12; ++step) {
          const Logits row = TieRow(rng, vocab, merged);
          const SampledToken want = Draw(full, row);
          std::vector<int32_t> ids(static_cast<size_t>(k));
          Logits values(static_cast<size_t>(k));
          LogitCandidates lc;
          lc.vocab = vocab;
          kernels::cpu::LogitsTopKRow(row.data(), vocab, k, cand.inverse_temperature(), ids.data(),
                                      values.data(), &lc.sum_exp, &lc.sum_exp_scaled, nullptr);
          lc.ids = ids;
          lc.values = values;
          std::optional<SampledToken> got = cand.SampleCandidates(lc);
          (got ? decided : undecided)++;
          if (!got) got = Draw(cand, row);
          ASSERT_EQ(got->token, want.token) << "vocab " << vocab << " k " << k << " step " << step;
          ASSERT_EQ(got->logprob, want.logprob) << "vocab " << vocab << " k " << k;
        }
      }
    }
  }
  EXPECT_GT(decided, 500);  // both branches are exercised
  EXPECT_GT(undecided, 100);
}

}  // namespace
}  // namespace tq
