// Embedding, RMSNorm, RoPE, SwiGLU and MatMul on the CUDA backend against the
// CPU backend and float64 references computed here from the definitions, on
// fresh random inputs of several sizes (odd ones included), with outputs
// poisoned with NaN so that an element never written fails.
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/half.h"
#include "tests/cuda/cuda_test_util.h"

namespace tq::cudatest {
namespace {

using kernels::WeightDtype;

class CudaOps : public CudaVsCpu {};

TEST_F(CudaOps, EmbeddingGathersEveryDtype) {
  for (const WeightDtype dtype : {WeightDtype::kF32, WeightDtype::kF16, WeightDtype::kBF16}) {
    for (const auto& [vocab, hidden, tokens] :
         {std::tuple{7, 5, 3}, {512, 64, 33}, {1000, 257, 70}}) {
      const std::vector<float> table = RandomFloats(static_cast<size_t>(vocab) * hidden, 11);
      std::vector<uint16_t> table16(table.size());
      std::vector<float> widened(table.size());  // the table as the dtype stores it
      for (size_t i = 0; i < table.size(); ++i) {
        table16[i] = dtype == WeightDtype::kBF16 ? kernels::FloatToBf16(table[i])
                                                 : kernels::FloatToHalf(table[i]);
        widened[i] = dtype == WeightDtype::kF32    ? table[i]
                     : dtype == WeightDtype::kBF16 ? kernels::Bf16ToFloat(table16[i])
                                                   : kernels::HalfToFloat(table16[i]);
      }
      std::vector<int32_t> ids(tokens);
      for (int32_t t = 0; t < tokens; ++t) ids[t] = (t * 7919 + 3) % vocab;
      kernels::BackendBuffer d_table = dtype == WeightDtype::kF32 ? Upload(table) : Upload(table16);
      kernels::BackendBuffer d_ids = Upload(ids);
      kernels::BackendBuffer d_out = Poisoned(static_cast<size_t>(tokens) * hidden);
      cuda_->Embedding(
          {d_ids.as<int32_t>(), d_table.data(), d_out.as<float>(), tokens, vocab, hidden, dtype});
      std::vector<float> expected(static_cast<size_t>(tokens) * hidden);
      for (int32_t t = 0; t < tokens; ++t) {
        for (int32_t i = 0; i < hidden; ++i) {
          expected[static_cast<size_t>(t) * hidden + i] =
              widened[static_cast<size_t>(ids[t]) * hidden + i];
        }
      }
      ExpectClose(Download<float>(d_out, expected.size()), expected, 0.0, 0.0,
                  "embedding hidden " + std::to_string(hidden));
    }
  }
}

TEST_F(CudaOps, RmsNormMatchesDefinitionAndCpu) {
  for (const auto& [rows, dim] : {std::pair{1, 1}, {3, 64}, {17, 255}, {5, 4096}}) {
    const std::vector<float> x = RandomFloats(static_cast<size_t>(rows) * dim, 21, -3.0f, 3.0f);
    const std::vector<float> w = RandomFloats(dim, 22, 0.5f, 1.5f);
    const float eps = 1e-5f;
    std::vector<float> expected(x.size());
    for (int32_t r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int32_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + eps);
      for (int32_t i = 0; i < dim; ++i) expected[r * dim + i] = x[r * dim + i] * inv * w[i];
    }
    kernels::BackendBuffer dx = Upload(x), dw = Upload(w), dout = Poisoned(x.size());
    cuda_->RmsNorm({dx.as<float>(), dw.as<float>(), dout.as<float>(), rows, dim, eps});
    const std::vector<float> got = Download<float>(dout, x.size());
    ExpectClose(got, expected, 1e-5, 1e-6, "rmsnorm vs float64, dim " + std::to_string(dim));
    std::vector<float> cpu(x.size());
    cpu_->RmsNorm({x.data(), w.data(), cpu.data(), rows, dim, eps});
    ExpectClose(got, cpu, 1e-6, 1e-7, "rmsnorm vs cpu, dim " + std::to_string(dim));
    // In place (out aliases x), as the model may call it.
    cuda_->RmsNorm({dx.as<float>(), dw.as<float>(), dx.as<float>(), rows, dim, eps});
    ExpectClose(Download<float>(dx, x.size()), expected, 1e-5, 1e-6, "rmsnorm in place");
  }
}

TEST_F(CudaOps, RopeMatchesDefinitionAndCpu) {
  for (const auto& [tokens, heads, hd] : {std::tuple{1, 1, 2}, {9, 3, 8}, {40, 8, 128}}) {
    const std::vector<float> x = RandomFloats(static_cast<size_t>(tokens) * heads * hd, 31);
    std::vector<int32_t> pos(tokens);
    for (int32_t t = 0; t < tokens; ++t) pos[t] = t * 997 % 70000;  // long contexts too
    std::vector<float> inv_freq(hd / 2);
    for (int32_t i = 0; i < hd / 2; ++i) {
      inv_freq[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / hd));
    }
    const float scaling = 1.25f;
    std::vector<float> expected = x;
    for (int32_t t = 0; t < tokens; ++t) {
      for (int32_t h = 0; h < heads; ++h) {
        for (int32_t i = 0; i < hd / 2; ++i) {
          const double a = static_cast<double>(pos[t]) * inv_freq[i];
          const double c = std::cos(a) * scaling, s = std::sin(a) * scaling;
          const size_t base = (static_cast<size_t>(t) * heads + h) * hd;
          const double x1 = x[base + i], x2 = x[base + i + hd / 2];
          expected[base + i] = static_cast<float>(x1 * c - x2 * s);
          expected[base + i + hd / 2] = static_cast<float>(x2 * c + x1 * s);
        }
      }
    }
    kernels::BackendBuffer dx = Upload(x), dpos = Upload(pos), dfreq = Upload(inv_freq);
    cuda_->Rope(
        {dx.as<float>(), dpos.as<int32_t>(), dfreq.as<float>(), tokens, heads, hd, scaling});
    const std::vector<float> got = Download<float>(dx, x.size());
    ExpectClose(got, expected, 1e-5, 1e-5, "rope vs float64, head_dim " + std::to_string(hd));
    std::vector<float> cpu = x;
    cpu_->Rope({cpu.data(), pos.data(), inv_freq.data(), tokens, heads, hd, scaling});
    ExpectClose(got, cpu, 1e-6, 1e-6, "rope vs cpu");
  }
}

TEST_F(CudaOps, SiluMulMatchesDefinition) {
  for (const auto& [rows, dim] : {std::pair{1, 1}, {7, 172}, {33, 14336}}) {
    const size_t n = static_cast<size_t>(rows) * dim;
    const std::vector<float> gate = RandomFloats(n, 41, -8.0f, 8.0f);
    const std::vector<float> up = RandomFloats(n, 42, -2.0f, 2.0f);
    std::vector<float> expected(n);
    for (size_t i = 0; i < n; ++i) {
      const double g = gate[i];
      expected[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
    }
    kernels::BackendBuffer dg = Upload(gate), du = Upload(up), dout = Poisoned(n);
    cuda_->SiluMul({dg.as<float>(), du.as<float>(), dout.as<float>(), rows, dim});
    ExpectClose(Download<float>(dout, n), expected, 1e-5, 1e-6, "silu*mul");
    // out aliases gate, as the model calls it.
    cuda_->SiluMul({dg.as<float>(), du.as<float>(), dg.as<float>(), rows, dim});
    ExpectClose(Download<float>(dg, n), expected, 1e-5, 1e-6, "silu*mul in place");
  }
}

// y = x·Wᵀ (+ y) in float64 from the weights as stored (16-bit weights
// widened, activations rounded to the same 16-bit format as the kernel does).
std::vector<float> MatMulReference(const std::vector<float>& x, const std::vector<float>& w,
                                   const std::vector<float>& init, int32_t rows, int32_t out,
                                   int32_t in) {
  std::vector<float> y(static_cast<size_t>(rows) * out);
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t o = 0; o < out; ++o) {
      double acc = init.empty() ? 0.0 : init[static_cast<size_t>(r) * out + o];
      for (int32_t i = 0; i < in; ++i) {
        acc += static_cast<double>(x[static_cast<size_t>(r) * in + i]) *
               w[static_cast<size_t>(o) * in + i];
      }
      y[static_cast<size_t>(r) * out + o] = static_cast<float>(acc);
    }
  }
  return y;
}

TEST_F(CudaOps, MatMulEveryDenseDtypeWithAndWithoutAccumulate) {
  for (const WeightDtype dtype : {WeightDtype::kF32, WeightDtype::kF16, WeightDtype::kBF16}) {
    for (const auto& [rows, out, in] :
         {std::tuple{1, 1, 1}, {3, 17, 65}, {33, 256, 127}, {1, 1000, 512}}) {
      std::vector<float> x = RandomFloats(static_cast<size_t>(rows) * in, 51);
      std::vector<float> w = RandomFloats(static_cast<size_t>(out) * in, 52);
      std::vector<uint16_t> w16(w.size());
      if (dtype != WeightDtype::kF32) {
        const bool bf = dtype == WeightDtype::kBF16;
        for (size_t i = 0; i < w.size(); ++i) {
          w16[i] = bf ? kernels::FloatToBf16(w[i]) : kernels::FloatToHalf(w[i]);
          w[i] = bf ? kernels::Bf16ToFloat(w16[i]) : kernels::HalfToFloat(w16[i]);
        }
      }
      std::vector<float> x_as_used = x;
      if (dtype != WeightDtype::kF32) {
        const bool bf = dtype == WeightDtype::kBF16;
        for (float& v : x_as_used) {
          v = bf ? kernels::Bf16ToFloat(kernels::FloatToBf16(v))
                 : kernels::HalfToFloat(kernels::FloatToHalf(v));
        }
      }
      const std::vector<float> init = RandomFloats(static_cast<size_t>(rows) * out, 53);
      kernels::BackendBuffer dx = Upload(x);
      kernels::BackendBuffer dw = dtype == WeightDtype::kF32 ? Upload(w) : Upload(w16);
      const kernels::WeightView view{dw.data(), dtype, out, in};
      const double tol = 1e-5 * std::sqrt(static_cast<double>(in));
      kernels::BackendBuffer dy = Poisoned(static_cast<size_t>(rows) * out);
      cuda_->MatMul({dx.as<float>(), view, dy.as<float>(), rows, false});
      ExpectClose(Download<float>(dy, init.size()),
                  MatMulReference(x_as_used, w, {}, rows, out, in), tol, tol, "matmul");
      kernels::BackendBuffer dacc = Upload(init);
      cuda_->MatMul({dx.as<float>(), view, dacc.as<float>(), rows, true});
      ExpectClose(Download<float>(dacc, init.size()),
                  MatMulReference(x_as_used, w, init, rows, out, in), tol, tol,
                  "matmul accumulate");
    }
  }
}

TEST_F(CudaOps, MatMulInt8Int4MatchesCpuBackend) {
  for (const WeightDtype dtype : {WeightDtype::kInt8, WeightDtype::kInt4}) {
    for (const bool symmetric : {true, false}) {
      for (const auto& [rows, out, in, group] :
           {std::tuple{1, 33, 64, 32}, {5, 17, 128, 64}, {40, 96, 256, 128}}) {
        const int32_t bits = dtype == WeightDtype::kInt8 ? 8 : 4;
        const int32_t groups = in / group;
        std::mt19937 rng(61 + rows);
        std::vector<uint8_t> codes(static_cast<size_t>(out) * in * bits / 8);
        for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() & 0xff);
        std::vector<uint16_t> scales(static_cast<size_t>(out) * groups), zeros;
        for (uint16_t& sc : scales) {
          sc = kernels::FloatToHalf(0.001f + 0.02f * static_cast<float>(rng() % 1000) / 1000.0f);
        }
        if (!symmetric) {
          zeros.resize(scales.size());
          for (uint16_t& z : zeros)
            z = kernels::FloatToHalf(static_cast<float>(rng() % (1u << bits)));
        }
        const std::vector<float> x = RandomFloats(static_cast<size_t>(rows) * in, 62);
        const std::vector<float> init = RandomFloats(static_cast<size_t>(rows) * out, 63);
        const kernels::WeightView host{
            codes.data(), dtype, out, in, scales.data(), symmetric ? nullptr : zeros.data(), group};
        std::vector<float> expected = init;
        cpu_->MatMul({x.data(), host, expected.data(), rows, true});
        kernels::BackendBuffer dcodes = Upload(codes), dscales = Upload(scales),
                               dzeros = Upload(symmetric ? std::vector<uint16_t>{0} : zeros),
                               dx = Upload(x), dy = Upload(init);
        const kernels::WeightView dev{dcodes.data(),
                                      dtype,
                                      out,
                                      in,
                                      dscales.as<uint16_t>(),
                                      symmetric ? nullptr : dzeros.as<uint16_t>(),
                                      group};
        cuda_->MatMul({dx.as<float>(), dev, dy.as<float>(), rows, true});
        // fp16 activations and fp16 GEMM output (quant_gemm.h).
        ExpectClose(Download<float>(dy, init.size()), expected, 4e-3,
                    2e-3 * std::sqrt(static_cast<double>(in)),
                    "int" + std::to_string(bits) + " matmul, rows " + std::to_string(rows));
      }
    }
  }
}

// MatMulParams::bias (Qwen2's q/k/v biases): the bias kernel after the GEMM,
// dense and int8 weights, with and without accumulate, against the CPU
// backend (whose bias add tests/unit/test_cpu_ops.cc checks against float64).
TEST_F(CudaOps, MatMulBiasMatchesCpuBackend) {
  for (const WeightDtype dtype : {WeightDtype::kF32, WeightDtype::kBF16, WeightDtype::kInt8}) {
    for (const bool accumulate : {false, true}) {
      for (const auto& [rows, out, in] : {std::tuple{1, 64, 64}, {7, 896, 128}, {33, 17, 64}}) {
        const std::vector<float> x = RandomFloats(static_cast<size_t>(rows) * in, 71);
        const std::vector<float> bias = RandomFloats(static_cast<size_t>(out), 72, -2.0f, 2.0f);
        const std::vector<float> init = RandomFloats(static_cast<size_t>(rows) * out, 73);
        std::vector<float> w = RandomFloats(static_cast<size_t>(out) * in, 74);
        std::vector<uint16_t> w16(w.size()), scales(static_cast<size_t>(out));
        std::vector<uint8_t> codes(w.size());
        for (size_t i = 0; i < w.size(); ++i) {
          w16[i] = kernels::FloatToBf16(w[i]);
          codes[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
        }
        for (uint16_t& sc : scales) sc = kernels::FloatToHalf(0.01f);
        kernels::BackendBuffer dw = dtype == WeightDtype::kF32    ? Upload(w)
                                    : dtype == WeightDtype::kBF16 ? Upload(w16)
                                                                  : Upload(codes);
        kernels::BackendBuffer dscales = Upload(scales);
        kernels::WeightView host{dtype == WeightDtype::kF32 ? static_cast<const void*>(w.data())
                                 : dtype == WeightDtype::kBF16
                                     ? static_cast<const void*>(w16.data())
                                     : codes.data(),
                                 dtype, out, in};
        kernels::WeightView dev{dw.data(), dtype, out, in};
        if (dtype == WeightDtype::kInt8) {
          host.scales = scales.data();
          host.group_size = dev.group_size = in;
          dev.scales = dscales.as<uint16_t>();
        }
        std::vector<float> expected = init;
        cpu_->MatMul({x.data(), host, expected.data(), rows, accumulate, bias.data()});
        kernels::BackendBuffer dx = Upload(x), db = Upload(bias);
        kernels::BackendBuffer dy = accumulate ? Upload(init) : Poisoned(init.size());
        cuda_->MatMul({dx.as<float>(), dev, dy.as<float>(), rows, accumulate, db.as<float>()});
        // 16-bit activations (bf16 GEMM, fp16 int8 GEMM) as the tests above allow.
        const double tol = dtype == WeightDtype::kF32 ? 1e-5 * std::sqrt(static_cast<double>(in))
                                                      : 1e-2 * std::sqrt(static_cast<double>(in));
        ExpectClose(Download<float>(dy, init.size()), expected, tol, tol,
                    "bias matmul rows " + std::to_string(rows) + " out " + std::to_string(out));
      }
    }
  }
}

TEST_F(CudaOps, BadParamsThrowClearErrors) {
  kernels::BackendBuffer buf = Poisoned(64);
  EXPECT_THROW(cuda_->RmsNorm({buf.as<float>(), nullptr, buf.as<float>(), 2, 8, 1e-5f}),
               std::invalid_argument);
  EXPECT_THROW(cuda_->Rope({buf.as<float>(), nullptr, nullptr, 1, 1, 3, 1.0f}),
               std::invalid_argument);
  const kernels::WeightView int4{buf.data(), WeightDtype::kInt4, 4, 8, nullptr, nullptr, 8};
  EXPECT_THROW(cuda_->MatMul({buf.as<float>(), int4, buf.as<float>(), 1, false}),
               std::invalid_argument);
}

}  // namespace
}  // namespace tq::cudatest
