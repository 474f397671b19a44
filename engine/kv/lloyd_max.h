// Lloyd–Max scalar quantizer for the coordinates of a rotated unit vector (tq3/tq4 KV cache).
//
// After a random rotation, each coordinate t of a unit vector in R^d is distributed like one
// coordinate of a uniform point on the sphere S^{d-1}: density f(t) ∝ (1 − t²)^((d−3)/2) on
// [−1, 1] (the arcsine density at d = 2, uniform at d = 3, → N(0, 1/d) as d grows). tq3 stores,
// per coordinate, the index of the nearest of 8 centroids that minimize the expected squared
// error under exactly that density; tq4 uses 16.
//
// Sources: S. P. Lloyd, "Least squares quantization in PCM", IEEE Trans. Inf. Theory 28(2),
// 1982; J. Max, "Quantizing for minimum distortion", IRE Trans. Inf. Theory 6(1), 1960;
// A. Zandieh et al., "TurboQuant: Online Vector Quantization with Near-optimal Distortion
// Rate", arXiv 2504.19874 (the codebook for the sphere-coordinate density).
#pragma once

#include <cstdint>
#include <vector>

namespace tq {

/// Scalar quantizer: sorted centroids [K] and the K-1 decision boundaries between them
/// (boundaries[i] = (centroids[i] + centroids[i+1]) / 2, so NearestCentroid is exact).
struct ScalarCodebook {
  std::vector<float> centroids;
  std::vector<float> boundaries;
  /// Expected squared error per coordinate under the density (the codebook's own one, computed
  /// in double before rounding to float). For a unit vector in R^d the expected squared error of
  /// its reconstruction is d · mse.
  double mse = 0;
};

/// Lloyd–Max codebook with `levels` centroids for one coordinate of a uniform point on
/// S^{head_dim − 1}: the fixed point of Lloyd's iteration (boundaries = midpoints of centroids,
/// centroids = conditional means of their cells), solved until the last step moves no centroid by
/// more than 1e-12. Symmetric (centroids[i] = −centroids[K−1−i]), deterministic, about 0.05 ms
/// for head_dim 128 and 16 levels; meant to be called at start-up.
/// Throws std::invalid_argument unless head_dim >= 2 and 2 <= levels <= 256 (d = 1 has only
/// the two points ±1, which needs no codebook).
ScalarCodebook SphereCoordinateCodebook(int32_t head_dim, int32_t levels);

/// Index of the nearest centroid of `cb` to x (binary search of the boundaries; a value exactly
/// on a boundary goes to the upper cell, NaN to the last). For encoders.
uint8_t NearestCentroid(const ScalarCodebook& cb, float x);

}  // namespace tq
