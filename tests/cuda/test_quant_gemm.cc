// CUDA weight-only int8/int4 GEMM (kernels/cuda/quant_gemm.h) against the CPU
// backend's matmul on the same packed weights: random codes, fp16 scales and
// zero points, fp16 activations (widened exactly for the CPU), ragged shapes
// that take both the GEMV (m <= 8) and the tiled GEMM kernel, the vectorized
// and the element-wise GEMV path. The GPU sums in another order and rounds
// its output to fp16, so the tolerance is one fp16 rounding of the result
// plus 1e-4 of sum_i |a_i w_i|. Skips without a GPU; parameter checks run
// everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/quant_gemm.h"
#include "kernels/half.h"

namespace tq::kernels {
namespace {

struct Case {
  WeightDtype dtype;
  bool symmetric;
  int m, n, k, group_size;
};

std::string Describe(const Case& c) {
  return std::string(c.dtype == WeightDtype::kInt8 ? "int8" : "int4") +
         (c.symmetric ? " sym" : " asym") + " m" + std::to_string(c.m) + " n" +
         std::to_string(c.n) + " k" + std::to_string(c.k) + " g" + std::to_string(c.group_size);
}

// Device buffer holding a copy of `host`.
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(const std::vector<T>& host) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(1, host.size() * sizeof(T))), cudaSuccess);
    if (!host.empty()) {
      EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  ~DeviceArray() { cudaFree(ptr); }
  std::vector<T> Download(size_t n) const {
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
};

void RunCase(const Case& c, bool accumulate, uint32_t seed) {
  SCOPED_TRACE(Describe(c) + (accumulate ? " accumulate" : ""));
  std::mt19937 rng(seed);
  const int bits = c.dtype == WeightDtype::kInt8 ? 8 : 4;
  const int groups = c.k / c.group_size;
  std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
  std::uniform_real_distribution<float> scale(0.002f, 0.05f), act(-2.0f, 2.0f);
  std::vector<int> codes(static_cast<size_t>(c.n) * c.k);
  for (auto& v : codes) v = code(rng);
  std::vector<uint8_t> packed;
  if (bits == 8) {
    packed.assign(codes.begin(), codes.end());
  } else {
    packed.resize(codes.size() / 2);
    for (size_t j = 0; j < packed.size(); ++j) {
      packed[j] = static_cast<uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
    }
  }
  std::vector<uint16_t> scales(static_cast<size_t>(c.n) * groups), zeros;
  for (auto& s : scales) s = FloatToHalf(scale(rng));
  if (!c.symmetric) {
    zeros.resize(scales.size());
    for (auto& z : zeros) z = FloatToHalf(static_cast<float>(code(rng)));
  }
  std::vector<uint16_t> a(static_cast<size_t>(c.m) * c.k), init(static_cast<size_t>(c.m) * c.n);
  std::vector<float> a_f32(a.size()), cpu_out(init.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = FloatToHalf(act(rng));
    a_f32[i] = HalfToFloat(a[i]);
  }
  for (size_t i = 0; i < init.size(); ++i) {
    init[i] = FloatToHalf(accumulate ? act(rng) : NAN);  // NaN: every output must be written
    cpu_out[i] = accumulate ? HalfToFloat(init[i]) : 0.0f;
  }

  // CPU reference: the CPU backend's matmul on the same packed weight.
  auto cpu = CreateCpuBackend(1);
  WeightView w{packed.data(), c.dtype,       c.n,
               c.k,           scales.data(), zeros.empty() ? nullptr : zeros.data(),
               c.group_size};
  cpu->MatMul({a_f32.data(), w, cpu_out.data(), c.m, accumulate});

  DeviceArray<uint16_t> d_a(a), d_scales(scales), d_zeros(zeros), d_out(init);
  DeviceArray<uint8_t> d_w(packed);
  cuda::QuantGemmParams p;
  p.a = d_a.ptr;
  p.weight = d_w.ptr;
  p.scales = d_scales.ptr;
  p.zeros = zeros.empty() ? nullptr : d_zeros.ptr;
  p.out = d_out.ptr;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.group_size = c.group_size;
  p.dtype = c.dtype;
  p.accumulate = accumulate;
  ASSERT_EQ(cuda::QuantGemm(p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> gpu = d_out.Download(init.size());

  for (int r = 0; r < c.m; ++r) {
    for (int o = 0; o < c.n; ++o) {
      double magnitude = 0;  // sum_i |a_i w_i|, from the definition
      for (int i = 0; i < c.k; ++i) {
        const size_t q = static_cast<size_t>(o) * groups + i / c.group_size;
        const double zero = zeros.empty() ? (1 << (bits - 1)) : HalfToFloat(zeros[q]);
        magnitude += std::fabs(a_f32[static_cast<size_t>(r) * c.k + i] * HalfToFloat(scales[q]) *
                               (codes[static_cast<size_t>(o) * c.k + i] - zero));
      }
      const size_t e = static_cast<size_t>(r) * c.n + o;
      const double got = HalfToFloat(gpu[e]);
      ASSERT_TRUE(std::isfinite(got)) << "out[" << r << "," << o << "] not written";
      ASSERT_LE(std::fabs(got - cpu_out[e]),
                std::ldexp(std::fabs(cpu_out[e]), -11) + 1e-4 * magnitude)
          << "out[" << r << "," << o << "] gpu " << got << " cpu " << cpu_out[e];
    }
  }
}

bool HaveGpu(std::string* why) {
  return cuda::DeviceCount(why) > 0;
}

TEST(CudaQuantGemm, MatchesCpuBackendOnRaggedShapes) {
  std::string why;
  if (!HaveGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  uint32_t seed = 1;
  for (WeightDtype dtype : {WeightDtype::kInt8, WeightDtype::kInt4}) {
    for (bool symmetric : {true, false}) {
      // m <= 8 takes the GEMV (k % 8 == 0 and group % 8 == 0: vectorized);
      // larger m the tiled GEMM; n and k not multiples of any tile.
      for (const Case& shape :
           {Case{dtype, symmetric, 1, 37, 256, 64}, Case{dtype, symmetric, 3, 130, 512, 512},
            Case{dtype, symmetric, 8, 64, 192, 32},
            Case{dtype, symmetric, 2, 19, 172, 86},  // element-wise GEMV
            Case{dtype, symmetric, 1, 5, 36, 6}, Case{dtype, symmetric, 9, 37, 256, 128},
            Case{dtype, symmetric, 33, 70, 172, 4}, Case{dtype, symmetric, 130, 129, 1000, 200}}) {
        RunCase(shape, false, ++seed);
      }
      RunCase(Case{dtype, symmetric, 4, 33, 128, 64}, true, ++seed);
      RunCase(Case{dtype, symmetric, 40, 33, 128, 64}, true, ++seed);
    }
  }
}

TEST(CudaQuantGemm, MalformedParamsAreRejectedWithoutAGpu) {
  uint16_t h = 0;
  uint8_t b = 0;
  cuda::QuantGemmParams p;
  p.a = &h;
  p.weight = &b;
  p.scales = &h;
  p.out = &h;
  p.m = 1;
  p.n = 4;
  p.k = 64;
  p.group_size = 32;
  EXPECT_NO_THROW(cuda::ValidateQuantGemm(p));
  auto expect_error = [](cuda::QuantGemmParams bad, const std::string& needle) {
    try {
      cuda::ValidateQuantGemm(bad);
      ADD_FAILURE() << "no error, expected: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  cuda::QuantGemmParams bad = p;
  bad.group_size = 24;
  expect_error(bad, "group_size 24 does not divide k 64");
  bad = p;
  bad.k = 62;
  bad.group_size = 31;
  expect_error(bad, "odd");
  bad = p;
  bad.scales = nullptr;
  expect_error(bad, "scales is null");
  bad = p;
  bad.m = 0;
  expect_error(bad, "must be positive");
  bad = p;
  bad.dtype = WeightDtype::kF16;
  expect_error(bad, "int8 or int4");
}

}  // namespace
}  // namespace tq::kernels
