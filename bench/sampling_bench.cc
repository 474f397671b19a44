// Host cost of sampling one row at Llama 3's vocabulary (128,256), per
// sampling setting: the full-row Sampler (what the host path runs on every
// copied row) against sampling from LogitsTopK candidates (what the runner
// runs after the device op; the CPU LogitsTopK itself is timed too, as the
// cost of the forced candidate path on the CPU backend). Logits are
// N(0, sigma) per row, sigma = 2 by default (peaked like a trained model's).
// Usage: tq_bench_sampling [--rows N] [--k K] [--sigma S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_util.h"
#include "engine/sampling/sampler.h"
#include "kernels/cpu/cpu_topk.h"

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int main(int argc, char** argv) {
  int rows = 200, k = 256;
  float sigma = 2.0f;
  CLI::App app("Host cost of sampling one row of a 128,256-entry vocabulary.", "tq_bench_sampling");
  app.add_option("--rows", rows, "Rows timed per setting")->capture_default_str();
  app.add_option("--k", k, "LogitsTopK candidates")->capture_default_str();
  app.add_option("--sigma", sigma, "Standard deviation of the logits")->capture_default_str();
  tq::bench::ParseOrExit(app, argc, argv);
  constexpr int32_t kVocab = 128256;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<std::vector<float>> data(static_cast<size_t>(rows), std::vector<float>(kVocab));
  for (auto& row : data) {
    for (float& l : row) l = normal(rng);
  }
  struct Setting {
    const char* name;
    double temperature, top_p;
    int32_t top_k;
  };
  const Setting settings[] = {{"greedy", 0.0, 1.0, 0},
                              {"temperature 1", 1.0, 1.0, 0},
                              {"temperature 0.8 top_p 0.9", 0.8, 0.9, 0},
                              {"temperature 0.7 top_k 50", 0.7, 1.0, 50}};
  std::printf("vocab %d, %d rows, N(0, %.1f) logits, k %d; median per row\n", kVocab, rows, sigma,
              k);
  std::printf("%-28s %12s %12s %12s %10s %9s\n", "setting", "full row us", "cand us", "cpu topk us",
              "x faster", "fallback");
  std::vector<float> work(kVocab);
  std::vector<int32_t> ids(static_cast<size_t>(k));
  std::vector<float> scratch;
  std::vector<float> values(static_cast<size_t>(k));
  for (const Setting& s : settings) {
    tq::SamplingParams p;
    p.temperature = s.temperature;
    p.top_p = s.top_p;
    p.top_k = s.top_k;
    p.seed = 5;
    tq::Sampler full(p), cand(p);
    std::vector<double> full_us, cand_us, topk_us;
    int fallbacks = 0;
    for (const auto& row : data) {
      work = row;  // Sample modifies its row (the host path samples a copy too)
      auto t0 = Clock::now();
      const tq::SampledToken want = full.Sample(work, {}, {});
      full_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());

      tq::LogitCandidates c;
      c.vocab = kVocab;
      t0 = Clock::now();
      tq::kernels::cpu::LogitsTopKRow(row.data(), kVocab, k, cand.inverse_temperature(), ids.data(),
                                      values.data(), &c.sum_exp, &c.sum_exp_scaled, &scratch);
      topk_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      c.ids = ids;
      c.values = values;
      t0 = Clock::now();
      std::optional<tq::SampledToken> got = cand.SampleCandidates(c);
      cand_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      if (!got) {
        ++fallbacks;
        work = row;
        got = cand.Sample(work, {}, {});
      }
      if (got->token != want.token) {
        std::fprintf(stderr, "tq_bench_sampling: paths disagree (%d vs %d)\n", got->token,
                     want.token);
        return 1;
      }
    }
    const double f = tq::bench::UpperMedian(full_us), c = tq::bench::UpperMedian(cand_us);
    std::printf("%-28s %12.1f %12.2f %12.1f %9.0fx %8.1f%%\n", s.name, f, c,
                tq::bench::UpperMedian(topk_us), f / c, 100.0 * fallbacks / rows);
  }
  return 0;
}
