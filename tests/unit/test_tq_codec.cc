// tq3/tq4 KV cache format primitives: the fixed random rotation
// (kernels/tq/rotation.h) against explicit Sylvester Hadamard / dense matrices in
// double, orthogonality, determinism and the coordinate statistics that motivate
// it; the bit-plane packing (kernels/tq/bitplanes.h) against hand-computed sizes
// and bytes, exhaustive round trips and guard bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/tq/bitplanes.h"
#include "kernels/tq/rotation.h"

namespace tq::kernels {
namespace {

// Sylvester Hadamard matrix by its recursive definition, row-major n x n.
std::vector<double> Sylvester(int32_t n) {
  std::vector<double> h = {1.0};
  for (int32_t m = 1; m < n; m *= 2) {
    std::vector<double> next(static_cast<size_t>(4) * m * m);
    for (int32_t i = 0; i < m; ++i)
      for (int32_t j = 0; j < m; ++j) {
        const double v = h[static_cast<size_t>(i) * m + j];
        next[static_cast<size_t>(i) * 2 * m + j] = v;
        next[static_cast<size_t>(i) * 2 * m + j + m] = v;
        next[static_cast<size_t>(i + m) * 2 * m + j] = v;
        next[static_cast<size_t>(i + m) * 2 * m + j + m] = -v;
      }
    h.swap(next);
  }
  return h;
}

std::vector<float> RandomVector(int32_t d, std::mt19937_64* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(d);
  for (float& x : v) x = normal(*rng);
  return v;
}

double Norm(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

// Column j of R: Forward(e_j).
std::vector<float> Column(const Rotation& r, int32_t j) {
  std::vector<float> e(r.head_dim(), 0.0f), y(r.head_dim());
  e[j] = 1.0f;
  r.Forward(e.data(), y.data());
  return y;
}

const int32_t kDims[] = {8, 64, 128, 96, 80, 3, 1, 2};

TEST(FastWalshHadamard, MatchesSylvesterMatrix) {
  std::mt19937_64 rng(1);
  for (int32_t n = 1; n <= 256; n *= 2) {
    const std::vector<double> h = Sylvester(n);
    std::vector<float> x = RandomVector(n, &rng);
    std::vector<float> y = x;
    FastWalshHadamard(y.data(), n);
    for (int32_t i = 0; i < n; ++i) {
      double ref = 0.0;
      for (int32_t j = 0; j < n; ++j) ref += h[static_cast<size_t>(i) * n + j] * x[j];
      EXPECT_NEAR(y[i], ref, 1e-5 * std::sqrt(static_cast<double>(n)) * 4)
          << "n=" << n << " i=" << i;
    }
  }
}

TEST(FastWalshHadamard, AppliedTwiceIsNTimesIdentity) {
  std::mt19937_64 rng(2);
  const std::vector<float> x = RandomVector(64, &rng);
  std::vector<float> y = x;
  FastWalshHadamard(y.data(), 64);
  FastWalshHadamard(y.data(), 64);
  for (int32_t i = 0; i < 64; ++i) EXPECT_NEAR(y[i], 64.0f * x[i], 1e-4);
}

TEST(Rotation, HadamardPathExactlyForPowersOfTwo) {
  std::vector<int32_t> dims;
  for (int32_t d = 1; d <= 130; ++d) dims.push_back(d);
  for (int32_t d : {255, 256, 257, 512}) dims.push_back(d);
  for (int32_t d : dims) {
    const bool pow2 = (d & (d - 1)) == 0;
    const Rotation r(d, 7);
    EXPECT_EQ(r.is_hadamard(), pow2) << "d=" << d;
    EXPECT_EQ(r.head_dim(), d);
    EXPECT_EQ(r.signs().size(), pow2 ? static_cast<size_t>(d) : 0u);
    EXPECT_EQ(r.dense().size(), pow2 ? 0u : static_cast<size_t>(d) * d);
    for (float s : r.signs()) EXPECT_TRUE(s == 1.0f || s == -1.0f);
  }
}

TEST(Rotation, RejectsNonPositiveHeadDim) {
  EXPECT_THROW(Rotation(0, 1), std::invalid_argument);
  EXPECT_THROW(Rotation(-8, 1), std::invalid_argument);
}

TEST(Rotation, IsOrthogonal) {
  for (int32_t d : kDims) {
    const Rotation r(d, 0x5eed);
    std::vector<std::vector<float>> cols;
    for (int32_t j = 0; j < d; ++j) cols.push_back(Column(r, j));
    for (int32_t a = 0; a < d; ++a)
      for (int32_t b = 0; b < d; ++b) {
        double dot = 0.0;
        for (int32_t i = 0; i < d; ++i) dot += static_cast<double>(cols[a][i]) * cols[b][i];
        ASSERT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5)
            << "d=" << d << " (R^T R)[" << a << "][" << b << "]";
      }
  }
}

TEST(Rotation, ForwardThenInverseIsIdentityAndPreservesNorm) {
  std::mt19937_64 rng(3);
  for (int32_t d : kDims) {
    const Rotation r(d, 11);
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<float> x = RandomVector(d, &rng);
      const double nx = Norm(x);
      std::vector<float> y(d), back(d);
      r.Forward(x.data(), y.data());
      EXPECT_NEAR(Norm(y), nx, 1e-5 * nx) << "d=" << d;
      r.Inverse(y.data(), back.data());
      for (int32_t i = 0; i < d; ++i) EXPECT_NEAR(back[i], x[i], 1e-5 * nx) << "d=" << d;
      // In place (aliased in/out) gives the same results.
      std::vector<float> z = x;
      r.Forward(z.data(), z.data());
      for (int32_t i = 0; i < d; ++i) EXPECT_EQ(z[i], y[i]) << "d=" << d;
      r.Inverse(z.data(), z.data());
      for (int32_t i = 0; i < d; ++i) EXPECT_EQ(z[i], back[i]) << "d=" << d;
    }
  }
}

TEST(Rotation, InverseIsTranspose) {
  // <R x, y> == <x, R^T y> for random x, y.
  std::mt19937_64 rng(4);
  for (int32_t d : kDims) {
    const Rotation r(d, 99);
    const std::vector<float> x = RandomVector(d, &rng), y = RandomVector(d, &rng);
    std::vector<float> rx(d), rty(d);
    r.Forward(x.data(), rx.data());
    r.Inverse(y.data(), rty.data());
    double a = 0.0, b = 0.0;
    for (int32_t i = 0; i < d; ++i) {
      a += static_cast<double>(rx[i]) * y[i];
      b += static_cast<double>(x[i]) * rty[i];
    }
    EXPECT_NEAR(a, b, 1e-4 * Norm(x) * Norm(y)) << "d=" << d;
  }
}

TEST(Rotation, ForwardEqualsExplicitHadamardTimesSigns) {
  std::mt19937_64 rng(5);
  for (int32_t d = 1; d <= 256; d *= 2) {
    const Rotation r(d, 0xabcdef);
    const std::vector<double> h = Sylvester(d);
    const std::vector<float>& s = r.signs();
    const std::vector<float> x = RandomVector(d, &rng);
    std::vector<float> y(d);
    r.Forward(x.data(), y.data());
    for (int32_t i = 0; i < d; ++i) {
      double ref = 0.0;
      for (int32_t j = 0; j < d; ++j) ref += h[static_cast<size_t>(i) * d + j] * s[j] * x[j];
      ref /= std::sqrt(static_cast<double>(d));
      EXPECT_NEAR(y[i], ref, 1e-5) << "d=" << d << " i=" << i;
    }
  }
}

TEST(Rotation, ForwardEqualsDenseMatrix) {
  std::mt19937_64 rng(6);
  for (int32_t d : {3, 80, 96}) {
    const Rotation r(d, 17);
    const std::vector<float>& m = r.dense();
    const std::vector<float> x = RandomVector(d, &rng);
    std::vector<float> y(d);
    r.Forward(x.data(), y.data());
    for (int32_t i = 0; i < d; ++i) {
      double ref = 0.0;
      for (int32_t j = 0; j < d; ++j)
        ref += static_cast<double>(m[static_cast<size_t>(i) * d + j]) * x[j];
      EXPECT_NEAR(y[i], ref, 1e-5) << "d=" << d;
    }
  }
}

TEST(Rotation, DeterministicFromSeed) {
  for (int32_t d : {8, 64, 128, 96, 80, 3}) {
    const Rotation a(d, 42), b(d, 42), c(d, 43);
    EXPECT_EQ(a.signs(), b.signs()) << "d=" << d;
    EXPECT_EQ(a.dense(), b.dense()) << "d=" << d;
    if (a.is_hadamard())
      EXPECT_NE(a.signs(), c.signs()) << "d=" << d;
    else
      EXPECT_NE(a.dense(), c.dense()) << "d=" << d;
  }
  // The signs are not degenerate: roughly half are negative at d = 128.
  const Rotation r(128, 42);
  const auto neg = std::count(r.signs().begin(), r.signs().end(), -1.0f);
  EXPECT_GT(neg, 40);
  EXPECT_LT(neg, 88);
}

TEST(Rotation, RandomUnitVectorsGiveSphereCoordinateMoments) {
  // Each coordinate of a uniform point on S^{d-1}: mean 0, variance 1/d.
  const int32_t d = 128;
  const int32_t n = 4000;
  const Rotation r(d, 2024);
  std::mt19937_64 rng(7);
  std::vector<double> sum(d, 0.0), sum2(d, 0.0);
  std::vector<float> y(d);
  for (int32_t t = 0; t < n; ++t) {
    std::vector<float> x = RandomVector(d, &rng);
    const double nx = Norm(x);
    for (float& v : x) v = static_cast<float>(v / nx);
    r.Forward(x.data(), y.data());
    for (int32_t i = 0; i < d; ++i) {
      sum[i] += y[i];
      sum2[i] += static_cast<double>(y[i]) * y[i];
    }
  }
  double all_mean = 0.0, all_var = 0.0;
  for (int32_t i = 0; i < d; ++i) {
    const double mean = sum[i] / n, var = sum2[i] / n - mean * mean;
    // Per coordinate: sd of the mean is 1/sqrt(n d) ~ 1.4e-3; of the variance ~ sqrt(2/n)/d.
    EXPECT_NEAR(mean, 0.0, 6.0 / std::sqrt(static_cast<double>(n) * d)) << "i=" << i;
    EXPECT_NEAR(var * d, 1.0, 6.0 * std::sqrt(2.0 / n)) << "i=" << i;
    all_mean += mean / d;
    all_var += var / d;
  }
  EXPECT_NEAR(all_mean, 0.0, 5.0 / (d * std::sqrt(static_cast<double>(n))));
  EXPECT_NEAR(all_var * d, 1.0, 0.02);
}

TEST(Rotation, AnisotropicInputGetsEqualCoordinateVariance) {
  // Inputs with a few large channels (as keys have): after a randomized Hadamard
  // rotation every coordinate carries the average energy, E[y_i^2] = E|x|^2 / d.
  const int32_t d = 128;
  const int32_t n = 6000;
  const Rotation r(d, 31337);
  std::mt19937_64 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> scale(d, 1.0f);
  scale[3] = 20.0f;
  scale[77] = 12.0f;
  double energy = 0.0;
  for (float s : scale) energy += static_cast<double>(s) * s;
  std::vector<double> sum2(d, 0.0);
  std::vector<float> x(d), y(d);
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t i = 0; i < d; ++i) x[i] = scale[i] * normal(rng);
    r.Forward(x.data(), y.data());
    for (int32_t i = 0; i < d; ++i) sum2[i] += static_cast<double>(y[i]) * y[i];
  }
  for (int32_t i = 0; i < d; ++i) EXPECT_NEAR(sum2[i] / n / (energy / d), 1.0, 0.15) << "i=" << i;
}

TEST(Rotation, SpikyInputIsSpread) {
  for (int32_t d : {8, 64, 128, 96, 80}) {
    const Rotation r(d, 0x7a11);
    for (int32_t k : {0, d / 2, d - 1}) {
      const std::vector<float> y = Column(r, k);
      float peak = 0.0f;
      for (float v : y) peak = std::max(peak, std::fabs(v));
      EXPECT_LE(peak, 4.0 / std::sqrt(static_cast<double>(d))) << "d=" << d << " k=" << k;
      if (r.is_hadamard()) {
        for (float v : y) EXPECT_NEAR(std::fabs(v), 1.0 / std::sqrt(static_cast<double>(d)), 1e-6);
      }
    }
  }
}

TEST(Rotation, ConcurrentConstUseIsSafe) {
  // Const methods share no scratch state: threads rotating in place concurrently
  // get the serial results.
  for (int32_t d : {96, 128}) {
    const Rotation r(d, 5);
    std::mt19937_64 rng(9);
    std::vector<std::vector<float>> in, expect;
    for (int t = 0; t < 4; ++t) {
      in.push_back(RandomVector(d, &rng));
      expect.emplace_back(d);
      r.Forward(in.back().data(), expect.back().data());
    }
    std::vector<int> bad(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int k = 0; k < 200; ++k) {
          std::vector<float> y = in[t];
          r.Forward(y.data(), y.data());
          if (y != expect[t]) ++bad[t];
        }
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "d=" << d;
  }
}

// ---------------------------------------------------------------------------
// Bit-planes

TEST(BitPlanes, PlaneBytesByHand) {
  // 4*bits per run of 32, bits*ceil(r/8) for a tail of r coordinates.
  EXPECT_EQ(PlaneBytes(8, 3), 3u);
  EXPECT_EQ(PlaneBytes(16, 3), 6u);
  EXPECT_EQ(PlaneBytes(24, 3), 9u);
  EXPECT_EQ(PlaneBytes(32, 3), 12u);
  EXPECT_EQ(PlaneBytes(64, 3), 24u);
  EXPECT_EQ(PlaneBytes(80, 3), 30u);  // 2 runs (24) + tail 16 -> 2 bytes x 3 planes
  EXPECT_EQ(PlaneBytes(96, 3), 36u);
  EXPECT_EQ(PlaneBytes(128, 3), 48u);
  EXPECT_EQ(PlaneBytes(3, 3), 3u);    // 3-bit planes rounded up to a byte each
  EXPECT_EQ(PlaneBytes(40, 3), 15u);  // 12 + 3 x 1
  EXPECT_EQ(PlaneBytes(33, 3), 15u);
  EXPECT_EQ(PlaneBytes(8, 4), 4u);
  EXPECT_EQ(PlaneBytes(80, 4), 40u);
  EXPECT_EQ(PlaneBytes(128, 4), 64u);
  // 3 bits per element at d = 128 (+16 bits of norm: 3.125 bits per element).
  EXPECT_EQ(PlaneBytes(128, 3) * 8, 3u * 128u);
}

TEST(BitPlanes, HandBuiltD8) {
  const uint8_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  uint8_t out[3] = {0, 0, 0};
  PackPlanes(idx, 8, 3, out);
  EXPECT_EQ(out[0], 0b10101010);
  EXPECT_EQ(out[1], 0b11001100);
  EXPECT_EQ(out[2], 0b11110000);
}

TEST(BitPlanes, HandBuiltD32WordsAreLittleEndian) {
  uint8_t idx[32];
  for (int i = 0; i < 32; ++i) idx[i] = static_cast<uint8_t>(i & 7);
  idx[31] = 0;  // bit 31 of every word clear
  uint8_t out[12];
  PackPlanes(idx, 32, 3, out);
  const uint8_t expect[12] = {0xAA, 0xAA, 0xAA, 0x2A, 0xCC, 0xCC,
                              0xCC, 0x4C, 0xF0, 0xF0, 0xF0, 0x70};
  for (int k = 0; k < 12; ++k) EXPECT_EQ(out[k], expect[k]) << "byte " << k;
}

TEST(BitPlanes, HandBuiltTailD40) {
  // d = 40: one run of 32 (12 bytes) then a tail of 8 coordinates, one byte per plane.
  uint8_t idx[40] = {};
  idx[32] = 5;  // tail j = 0: planes 0 and 2
  idx[39] = 6;  // tail j = 7: planes 1 and 2
  uint8_t out[15];
  PackPlanes(idx, 40, 3, out);
  for (int k = 0; k < 12; ++k) EXPECT_EQ(out[k], 0) << k;
  EXPECT_EQ(out[12], 0x01);
  EXPECT_EQ(out[13], 0x80);
  EXPECT_EQ(out[14], 0x81);
}

TEST(BitPlanes, EveryValueAtEveryPositionRoundTrips) {
  std::mt19937_64 rng(10);
  for (int32_t bits : {3, 4}) {
    const uint32_t levels = 1u << bits;
    for (int32_t d : {8, 16, 32, 64, 96, 128, 80, 24, 3, 40, 33}) {
      const size_t nb = PlaneBytes(d, bits);
      std::vector<uint8_t> idx(d), back(d);
      for (int32_t pos = 0; pos < d; ++pos) {
        for (uint32_t v = 0; v < levels; ++v) {
          for (auto& x : idx) x = static_cast<uint8_t>(rng() % levels);
          idx[pos] = static_cast<uint8_t>(v);
          // Guard bytes on both sides must stay untouched.
          std::vector<uint8_t> buf(nb + 32, 0xA5);
          uint8_t* planes = buf.data() + 16;
          PackPlanes(idx.data(), d, bits, planes);
          for (size_t k = 0; k < 16; ++k) ASSERT_EQ(buf[k], 0xA5) << "d=" << d;
          for (size_t k = 16 + nb; k < buf.size(); ++k) ASSERT_EQ(buf[k], 0xA5) << "d=" << d;
          ASSERT_EQ(UnpackIndex(planes, d, bits, pos), v) << "d=" << d << " bits=" << bits;
          std::fill(back.begin(), back.end(), 0xFF);
          UnpackPlanes(planes, d, bits, back.data());
          ASSERT_EQ(back, idx) << "d=" << d << " bits=" << bits << " pos=" << pos;
          for (int32_t i = 0; i < d; ++i) ASSERT_EQ(UnpackIndex(planes, d, bits, i), idx[i]);
        }
      }
    }
  }
}

TEST(BitPlanes, HighBitsOfIndicesIgnoredAndPaddingZero) {
  // Only the low `bits` bits are stored; unused tail bits are written as zero.
  std::vector<uint8_t> idx(12, 0xFF), back(12);
  uint8_t out[6];
  std::fill(out, out + 6, 0x55);
  PackPlanes(idx.data(), 12, 3, out);
  ASSERT_EQ(PlaneBytes(12, 3), 6u);
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(out[2 * p], 0xFF);
    EXPECT_EQ(out[2 * p + 1], 0x0F);
  }
  UnpackPlanes(out, 12, 3, back.data());
  for (uint8_t v : back) EXPECT_EQ(v, 7);
}

TEST(BitPlanes, UnalignedBuffers) {
  std::vector<uint8_t> idx(128), back(128);
  for (int i = 0; i < 128; ++i) idx[i] = static_cast<uint8_t>((i * 5 + 3) & 7);
  std::vector<uint8_t> buf(PlaneBytes(128, 3) + 8);
  for (int off = 1; off < 4; ++off) {
    PackPlanes(idx.data(), 128, 3, buf.data() + off);
    UnpackPlanes(buf.data() + off, 128, 3, back.data());
    EXPECT_EQ(back, idx) << "offset " << off;
  }
}

}  // namespace
}  // namespace tq::kernels
