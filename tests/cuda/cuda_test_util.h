// Helpers of the CUDA tests: a CUDA backend next to the CPU reference (the
// test skips when no GPU is present), device buffers filled from host
// vectors, NaN poisoning of outputs, and seeded random inputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"

namespace tq::cudatest {

/// Fixture: cuda_ (device 0) and cpu_ (the reference), or GTEST_SKIP.
class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (kernels::cuda::DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
    cuda_ = kernels::CreateCudaBackend(0);
    cpu_ = kernels::CreateCpuBackend(0);
  }

  /// A device buffer holding `host` (bytes of any trivially copyable type).
  template <typename T>
  kernels::BackendBuffer Upload(const std::vector<T>& host) {
    kernels::BackendBuffer b(cuda_.get(), std::max<size_t>(host.size() * sizeof(T), 1));
    cuda_->CopyToDevice(b.data(), host.data(), host.size() * sizeof(T));
    return b;
  }
  /// A device buffer of n floats, every one NaN (an output never written stays NaN).
  kernels::BackendBuffer Poisoned(size_t n) {
    return Upload(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
  }
  template <typename T>
  std::vector<T> Download(const kernels::BackendBuffer& b, size_t n) {
    std::vector<T> host(n);
    cuda_->CopyToHost(host.data(), b.data(), n * sizeof(T));
    return host;
  }

  std::unique_ptr<kernels::Backend> cuda_;
  std::unique_ptr<kernels::Backend> cpu_;
};

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// Every element finite and within atol + rtol·|expected|; reports the worst.
inline void ExpectClose(const std::vector<float>& actual, const std::vector<float>& expected,
                        double rtol, double atol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_excess = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    const double allowed = atol + rtol * std::fabs(static_cast<double>(expected[i]));
    if (!std::isfinite(actual[i]) || err > allowed) {
      if (bad == 0 || !std::isfinite(actual[i]) || err - allowed > worst_excess) {
        worst = i;
        worst_excess = std::isfinite(actual[i]) ? err - allowed : 1e30;
      }
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << actual.size() << " elements off; worst at "
                     << worst << ": " << actual[worst] << " vs " << expected[worst];
}

}  // namespace tq::cudatest
