// The CPU backend's row-wise ops: RMSNorm, RoPE and SiLU·up (op_params.h),
// compiled per ISA level (isa_begin.h) so the compiler vectorizes their
// element loops for the level; each level does the same arithmetic per
// element (sum of squares in double, in order), so they agree bit for bit
// except where the compiler contracts a multiply-add (tests/unit/test_cpu_isa.cc).
#include "kernels/cpu/isa_begin.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {

void RmsNorm(const RmsNormParams& p, ThreadPool& pool) {
  pool.ParallelFor(p.rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = p.x + r * p.dim;
      float* out = p.out + r * p.dim;
      double sum_sq = 0.0;
      for (int32_t i = 0; i < p.dim; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
      const float inv = 1.0f / std::sqrt(static_cast<float>(sum_sq / p.dim) + p.eps);
      for (int32_t i = 0; i < p.dim; ++i) out[i] = x[i] * inv * p.weight[i];
    }
  });
}

void Rope(const RopeParams& p, ThreadPool& pool) {
  const int32_t half = p.head_dim / 2;
  pool.ParallelFor(p.num_tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float pos = static_cast<float>(p.positions[t]);
      for (int32_t i = 0; i < half; ++i) {
        // Angles in double: pos * inv_freq reaches 1e5 rad at long contexts,
        // where float loses the fractional part that sin/cos need.
        const double angle = static_cast<double>(pos) * p.inv_freq[i];
        const float c = static_cast<float>(std::cos(angle)) * p.attention_scaling;
        const float s = static_cast<float>(std::sin(angle)) * p.attention_scaling;
        for (int32_t h = 0; h < p.num_heads; ++h) {
          float* head = p.x + (t * p.num_heads + h) * p.head_dim;
          const float x1 = head[i];
          const float x2 = head[i + half];
          head[i] = x1 * c - x2 * s;
          head[i + half] = x2 * c + x1 * s;
        }
      }
    }
  });
}

void SiluMul(const SiluMulParams& p, ThreadPool& pool) {
  const int64_t n = static_cast<int64_t>(p.rows) * p.dim;
  pool.ParallelFor(n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = p.gate[i];
      p.out[i] = g / (1.0f + std::exp(-g)) * p.up[i];
    }
  });
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
