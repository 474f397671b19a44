// Lloyd–Max codebooks for the sphere-coordinate density, checked against values that do not come
// from the code's own integration: Max's 1960 Gaussian table (the d → ∞ limit), the exact-density
// values quoted in issue 3, closed forms (d = 3 is the uniform density; K = 2 has centroids
// ±E|t|), and Monte Carlo samples of random unit vectors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <stdexcept>
#include <vector>

#include "engine/kv/lloyd_max.h"

namespace tq {
namespace {

// J. Max, "Quantizing for minimum distortion" (1960), Table I: optimum N(0, 1) quantizer,
// positive output levels and the mean squared error.
constexpr double kMax8[] = {0.2451, 0.7560, 1.3440, 2.1520};
constexpr double kMax8Mse = 0.03454;
constexpr double kMax16[] = {0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326};
constexpr double kMax16Mse = 0.009497;
// Issue 3: Lloyd–Max levels for the exact sphere-coordinate density at d = 128 (times √d).
constexpr double kSphere128x8[] = {0.2445, 0.7535, 1.3368, 2.1316};

// Draws a uniform point on S^{d-1} (Gaussian, normalized) into *u.
void RandomUnitVector(std::mt19937_64& rng, int32_t d, std::vector<double>* u) {
  std::normal_distribution<double> normal(0.0, 1.0);
  u->resize(d);
  double norm2 = 0;
  for (double& x : *u) {
    x = normal(rng);
    norm2 += x * x;
  }
  const double inv = 1 / std::sqrt(norm2);
  for (double& x : *u) x *= inv;
}

// The positive centroids times √d, ascending, must match `expected` to a relative tolerance.
template <size_t N>
void ExpectScaledPositiveCentroids(const ScalarCodebook& cb, int32_t d, const double (&expected)[N],
                                   double rel_tol) {
  ASSERT_EQ(cb.centroids.size(), 2 * N);
  const double s = std::sqrt(static_cast<double>(d));
  for (size_t j = 0; j < N; ++j) {
    const double got = cb.centroids[N + j] * s;
    EXPECT_NEAR(got, expected[j], rel_tol * expected[j]) << "level " << j << " d=" << d;
    const double got_neg = -cb.centroids[N - 1 - j] * s;
    EXPECT_NEAR(got_neg, expected[j], rel_tol * expected[j]) << "level -" << j << " d=" << d;
  }
}

TEST(LloydMaxTest, Head128MatchesGaussianTableAndExactDensityValues) {
  const ScalarCodebook cb = SphereCoordinateCodebook(128, 8);
  ExpectScaledPositiveCentroids(cb, 128, kMax8, 0.015);
  ExpectScaledPositiveCentroids(cb, 128, kSphere128x8, 0.002);
}

TEST(LloydMaxTest, SortedSymmetricWithMidpointBoundaries) {
  for (int32_t d : {2, 3, 5, 8, 64, 96, 128, 256, 4096}) {
    for (int32_t k : {2, 3, 4, 5, 8, 16, 64, 256}) {
      SCOPED_TRACE(testing::Message() << "d=" << d << " K=" << k);
      const ScalarCodebook cb = SphereCoordinateCodebook(d, k);
      ASSERT_EQ(cb.centroids.size(), static_cast<size_t>(k));
      ASSERT_EQ(cb.boundaries.size(), static_cast<size_t>(k - 1));
      EXPECT_GT(cb.centroids.front(), -1.0f);
      EXPECT_LT(cb.centroids.back(), 1.0f);
      for (int32_t i = 0; i < k; ++i) {
        EXPECT_EQ(cb.centroids[i], -cb.centroids[k - 1 - i]) << i;
        if (i + 1 < k) {
          EXPECT_LT(cb.centroids[i], cb.boundaries[i]) << i;
          EXPECT_LT(cb.boundaries[i], cb.centroids[i + 1]) << i;
          const float mid = 0.5f * (cb.centroids[i] + cb.centroids[i + 1]);
          EXPECT_NEAR(cb.boundaries[i], mid, 1e-7f * std::abs(cb.centroids[i + 1])) << i;
        }
      }
      if (k % 2 == 1) {
        EXPECT_EQ(cb.centroids[k / 2], 0.0f);
      }
      // 0 < mse < variance of one coordinate (1/d), decreasing with more levels.
      EXPECT_GT(cb.mse, 0);
      EXPECT_LT(cb.mse, 1.0 / d);
    }
  }
}

TEST(LloydMaxTest, MoreLevelsLowerError) {
  for (int32_t d : {2, 8, 128}) {
    double prev = 1.0 / d;
    for (int32_t k = 2; k <= 32; ++k) {
      const double mse = SphereCoordinateCodebook(d, k).mse;
      EXPECT_LT(mse, prev) << "d=" << d << " K=" << k;
      prev = mse;
    }
  }
}

// d = 3: the coordinate is uniform on [−1, 1] (Archimedes), whose Lloyd–Max quantizer is the
// uniform one: centroids −1 + (2i+1)/K, mse = (2/K)² / 12.
TEST(LloydMaxTest, Dim3IsTheUniformQuantizer) {
  for (int32_t k : {2, 3, 8, 16, 255}) {
    const ScalarCodebook cb = SphereCoordinateCodebook(3, k);
    for (int32_t i = 0; i < k; ++i) {
      EXPECT_NEAR(cb.centroids[i], -1.0 + (2.0 * i + 1) / k, 1e-6) << "K=" << k << " i=" << i;
    }
    EXPECT_NEAR(cb.mse, 1.0 / (3.0 * k * k), 1e-9 / k) << "K=" << k;
  }
}

// K = 2: the cells are the half-lines, so the centroids are ±E|t| with
// E|t| = Γ(d/2) / (√π Γ((d+1)/2)), and mse = E[t²] − E|t|² = 1/d − E|t|².
TEST(LloydMaxTest, TwoLevelsAreTheMeanAbsoluteValue) {
  for (int32_t d : {2, 3, 4, 8, 64, 128, 1000}) {
    const double mean_abs =
        std::exp(std::lgamma(d / 2.0) - std::lgamma((d + 1) / 2.0)) / std::sqrt(std::numbers::pi);
    const ScalarCodebook cb = SphereCoordinateCodebook(d, 2);
    EXPECT_NEAR(cb.centroids[1], mean_abs, 1e-6 * mean_abs) << "d=" << d;
    EXPECT_EQ(cb.boundaries[0], 0.0f);
    EXPECT_NEAR(cb.mse, 1.0 / d - mean_abs * mean_abs, 1e-9) << "d=" << d;
  }
  // d = 2, the arcsine density: E|t| = 2/π.
  EXPECT_NEAR(SphereCoordinateCodebook(2, 2).centroids[1], 2 / std::numbers::pi, 1e-7);
}

// For large d the coordinate is nearly N(0, 1/d), so √d × centroids approach Max's table.
TEST(LloydMaxTest, LargeDimensionApproachesGaussianTable) {
  const int32_t d = 4096;
  const ScalarCodebook cb8 = SphereCoordinateCodebook(d, 8);
  ExpectScaledPositiveCentroids(cb8, d, kMax8, 0.005);
  EXPECT_NEAR(d * cb8.mse, kMax8Mse, 0.01 * kMax8Mse);
  const ScalarCodebook cb16 = SphereCoordinateCodebook(d, 16);
  ExpectScaledPositiveCentroids(cb16, d, kMax16, 0.01);
  EXPECT_NEAR(d * cb16.mse, kMax16Mse, 0.01 * kMax16Mse);
}

// Issue 3 acceptance: random unit vectors at d = 128, each coordinate replaced by its nearest of
// 8 centroids: mean |x − x̂|² <= 0.035, and the codebook's own d·mse agrees with the sample.
TEST(LloydMaxTest, MonteCarloVectorErrorAtHead128) {
  const int32_t d = 128;
  const ScalarCodebook cb = SphereCoordinateCodebook(d, 8);
  std::mt19937_64 rng(20250128);
  std::vector<double> u;
  const int kVectors = 20000;
  double sum = 0;
  for (int v = 0; v < kVectors; ++v) {
    RandomUnitVector(rng, d, &u);
    double err = 0;
    for (double x : u) {
      const double q = cb.centroids[NearestCentroid(cb, static_cast<float>(x))];
      err += (x - q) * (x - q);
    }
    sum += err;
  }
  const double mean = sum / kVectors;
  EXPECT_LE(mean, 0.035);
  EXPECT_NEAR(mean, d * cb.mse, 0.03 * d * cb.mse);
  EXPECT_NEAR(d * cb.mse, 0.034, 0.001);
}

// The Lloyd conditions, checked on samples instead of integrals: every centroid is the mean of
// the sampled coordinates that fall in its cell (within 5 standard errors), and the per-coordinate
// squared error matches cb.mse. d = 8 is stories260K's head_dim; d = 2 has the arcsine density,
// singular at ±1.
void ExpectLloydConditionsOnSamples(int32_t d, int32_t k, int vectors, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "d=" << d << " K=" << k);
  const ScalarCodebook cb = SphereCoordinateCodebook(d, k);
  for (int32_t i = 0; i + 1 < k; ++i) {
    EXPECT_FLOAT_EQ(cb.boundaries[i], 0.5f * (cb.centroids[i] + cb.centroids[i + 1]));
  }
  std::vector<double> n(k, 0), s1(k, 0), s2(k, 0);
  double sq_err = 0;
  std::mt19937_64 rng(seed);
  std::vector<double> u;
  for (int v = 0; v < vectors; ++v) {
    RandomUnitVector(rng, d, &u);
    for (double x : u) {
      const uint8_t idx = NearestCentroid(cb, static_cast<float>(x));
      n[idx] += 1;
      s1[idx] += x;
      s2[idx] += x * x;
      sq_err += (x - cb.centroids[idx]) * (x - cb.centroids[idx]);
    }
  }
  for (int32_t i = 0; i < k; ++i) {
    ASSERT_GT(n[i], 1000) << i;
    const double mean = s1[i] / n[i];
    const double var = s2[i] / n[i] - mean * mean;
    const double se = std::sqrt(var / n[i]);
    EXPECT_NEAR(cb.centroids[i], mean, 5 * se + 1e-7) << "cell " << i << " n=" << n[i];
    EXPECT_GT(cb.centroids[i], -1.0f);
    EXPECT_LT(cb.centroids[i], 1.0f);
  }
  const double samples = static_cast<double>(vectors) * d;
  EXPECT_NEAR(sq_err / samples, cb.mse, 0.01 * cb.mse);
}

TEST(LloydMaxTest, MonteCarloLloydConditionsSmallDims) {
  ExpectLloydConditionsOnSamples(8, 8, 250000, 8);
  ExpectLloydConditionsOnSamples(8, 16, 250000, 816);
  ExpectLloydConditionsOnSamples(2, 8, 1000000, 2);
}

// The samples are sensitive enough to tell the d = 8 codebook from its neighbours' (so the test
// above would catch an off-by-one in the density's exponent).
TEST(LloydMaxTest, NeighbouringDimensionsDiffer) {
  const ScalarCodebook c7 = SphereCoordinateCodebook(7, 8);
  const ScalarCodebook c8 = SphereCoordinateCodebook(8, 8);
  const ScalarCodebook c9 = SphereCoordinateCodebook(9, 8);
  EXPECT_GT(c7.centroids[7] / c8.centroids[7], 1.03);
  EXPECT_LT(c9.centroids[7] / c8.centroids[7], 0.97);
}

TEST(LloydMaxTest, NearestCentroidIsTheNearest) {
  for (int32_t k : {2, 3, 8, 16, 256}) {
    const ScalarCodebook cb = SphereCoordinateCodebook(128, k);
    std::mt19937_64 rng(k);
    std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
    for (int trial = 0; trial < 20000; ++trial) {
      const float x = trial < 2 ? (trial == 0 ? -2.0f : 2.0f) : uniform(rng);
      const int idx = NearestCentroid(cb, x);
      ASSERT_GE(idx, 0);
      ASSERT_LT(idx, k);
      float best = std::numeric_limits<float>::infinity();
      for (float c : cb.centroids) best = std::min(best, std::abs(x - c));
      ASSERT_LE(std::abs(x - cb.centroids[idx]), best) << "x=" << x << " K=" << k;
    }
    for (int32_t i = 0; i < k; ++i) EXPECT_EQ(NearestCentroid(cb, cb.centroids[i]), i);
    // A value exactly on a boundary goes to the upper cell.
    for (int32_t i = 0; i + 1 < k; ++i) EXPECT_EQ(NearestCentroid(cb, cb.boundaries[i]), i + 1);
  }
}

TEST(LloydMaxTest, DeterministicAndFast) {
  const ScalarCodebook a = SphereCoordinateCodebook(128, 16);
  double best_ms = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    const ScalarCodebook b = SphereCoordinateCodebook(128, 16);
    const auto t1 = std::chrono::steady_clock::now();
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
    EXPECT_EQ(a.centroids, b.centroids);
    EXPECT_EQ(a.boundaries, b.boundaries);
    EXPECT_EQ(a.mse, b.mse);
  }
  // Start-up budget: 5 ms (measured ~0.05 ms in Release; sanitizers and Debug slow it down).
  EXPECT_LT(best_ms, 5.0);
}

TEST(LloydMaxTest, RejectsInvalidArguments) {
  EXPECT_THROW(SphereCoordinateCodebook(1, 8), std::invalid_argument);
  EXPECT_THROW(SphereCoordinateCodebook(0, 8), std::invalid_argument);
  EXPECT_THROW(SphereCoordinateCodebook(-4, 8), std::invalid_argument);
  EXPECT_THROW(SphereCoordinateCodebook(128, 1), std::invalid_argument);
  EXPECT_THROW(SphereCoordinateCodebook(128, 257), std::invalid_argument);
  EXPECT_NO_THROW(SphereCoordinateCodebook(2, 256));
}

}  // namespace
}  // namespace tq
