// LaunchLogitsTopK (kernels/cuda/topk.cu) emulated on the CPU against the
// CPU reference (kernels/cpu/cpu_topk.h): ids and values equal, sums within
// 1e-12 relative. Rows with ties, -inf, NaN and -0.0; odd vocabularies; k
// from 1 to 1024. Built and run by tests/cuda/emulate/topk_run.sh.
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_topk.h"
#include "kernels/cuda/cuda_kernels.h"

int main() {
  struct Case {
    int rows, vocab, k;
  };
  const Case cases[] = {{1, 1, 1},       {2, 7, 7},       {2, 1000, 1},
                        {1, 1000, 1000}, {2, 2049, 64},   {1, 4099, 257},
                        {1, 3000, 1024}, {1, 20000, 100}, {1, 128256, 1024}};
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<int> kind(0, 99), level(-20, 20);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  int failures = 0;
  for (const Case& c : cases) {
    std::vector<float> x(static_cast<size_t>(c.rows) * c.vocab);
    for (float& l : x) {
      const int t = kind(rng);
      l = t == 0   ? -INFINITY
          : t == 1 ? std::numeric_limits<float>::quiet_NaN()
          : t == 2 ? -0.0f
          : t < 40 ? 0.5f * static_cast<float>(level(rng))
                   : normal(rng);
    }
    std::vector<float> inv_t(static_cast<size_t>(c.rows));
    for (int r = 0; r < c.rows; ++r) inv_t[r] = 1.0f / (0.6f + 0.5f * r);
    const size_t n = static_cast<size_t>(c.rows) * c.k;
    std::vector<int32_t> ids(n, -1);
    std::vector<float> values(n, std::nanf(""));
    std::vector<double> sums(2 * static_cast<size_t>(c.rows), std::nan(""));
    tq::kernels::LogitsTopKParams p;
    p.logits = x.data();
    p.inv_temperature = inv_t.data();
    p.ids = ids.data();
    p.values = values.data();
    p.sum_exp = sums.data();
    p.sum_exp_scaled = sums.data() + c.rows;
    p.rows = c.rows;
    p.vocab = c.vocab;
    p.k = c.k;
    tq::kernels::cuda::LaunchLogitsTopK(p, nullptr);
    for (int r = 0; r < c.rows; ++r) {
      std::vector<int32_t> want_ids(static_cast<size_t>(c.k));
      std::vector<float> want_values(static_cast<size_t>(c.k));
      double se = 0, ses = 0;
      tq::kernels::cpu::LogitsTopKRow(x.data() + static_cast<size_t>(r) * c.vocab, c.vocab, c.k,
                                      inv_t[r], want_ids.data(), want_values.data(), &se, &ses,
                                      nullptr);
      int bad = 0;
      for (int j = 0; j < c.k; ++j) {
        const size_t at = static_cast<size_t>(r) * c.k + j;
        if (ids[at] != want_ids[j] || !(values[at] == want_values[j])) {
          if (bad++ < 3) {
            std::printf("rows %d vocab %d k %d row %d rank %d: id %d value %g, want %d %g\n",
                        c.rows, c.vocab, c.k, r, j, ids[at], values[at], want_ids[j],
                        want_values[j]);
          }
        }
      }
      const bool sums_ok =
          std::fabs(sums[r] - se) <= 1e-12 * se && std::fabs(sums[c.rows + r] - ses) <= 1e-12 * ses;
      if (!sums_ok) {
        std::printf("vocab %d k %d row %d: sums %.17g %.17g, want %.17g %.17g\n", c.vocab, c.k, r,
                    sums[r], sums[c.rows + r], se, ses);
      }
      failures += bad > 0 || !sums_ok;
    }
    std::printf("rows %d vocab %d k %d: %s\n", c.rows, c.vocab, c.k,
                failures ? "FAIL (so far)" : "ok");
  }
  std::printf("%s\n", failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
