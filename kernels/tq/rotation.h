// Fixed random orthogonal rotation of one KV head vector for the tq3/tq4 KV cache
// (DESIGN.md "KV cache"). Rotating a unit vector by a random orthogonal R makes
// each coordinate follow the density of one coordinate of a uniform point on the
// unit sphere, whatever the input (spiky channels included), so one fixed scalar
// codebook fits every coordinate.
//
// Sources: randomized Hadamard rotation as in QuaRot (Ashkboos et al., arXiv
// 2404.00456); rotate-then-scalar-quantize as in TurboQuant (Zandieh et al., arXiv
// 2504.19874).
#pragma once

#include <cstdint>
#include <vector>

namespace tq::kernels {

/// In-place unnormalized fast Walsh–Hadamard transform of x[0..n), n a power of
/// two (n = 1 is the identity): x <- H_n x with the Sylvester Hadamard matrix
/// H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]] (entries ±1, H_n H_n = n I).
/// O(n log n) additions; shared by the kernels that un-rotate keys in registers.
inline void FastWalshHadamard(float* x, int32_t n) {
  for (int32_t h = 1; h < n; h <<= 1) {
    for (int32_t i = 0; i < n; i += 2 * h) {
      for (int32_t j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

/// A fixed orthogonal d x d matrix R, deterministic from (head_dim, seed):
///  - head_dim a power of two (1, 2, 4, ..., 128, ...): randomized Hadamard
///    R = H_d / sqrt(d) · diag(s), s in {±1}^d, s_i = -1 when bit (i % 64) of the
///    (i / 64)-th splitmix64 output of `seed` is set. Applied in O(d log d).
///  - otherwise: a dense Haar-random orthogonal matrix: d x d standard Gaussian
///    entries (splitmix64 + Box–Muller, in double), QR by modified Gram–Schmidt
///    with re-orthogonalization in double; Q with positive diag(R) is the Haar
///    factor. Stored as float, row-major [d][d]. Applied in O(d^2).
/// Forward: y = R x (rotate before quantizing). Inverse: x = R^T y.
/// Thread-safety: immutable after construction; const methods may be called
/// concurrently. x and y may be the same array (in place) or disjoint, not partly
/// overlapping; both hold head_dim floats.
class Rotation {
 public:
  /// head_dim >= 1.
  Rotation(int32_t head_dim, uint64_t seed);

  /// y = R x.
  void Forward(const float* x, float* y) const;
  /// x = R^T y.
  void Inverse(const float* y, float* x) const;

  /// True when head_dim is a power of two (randomized Hadamard path).
  bool is_hadamard() const { return hadamard_; }
  int32_t head_dim() const { return head_dim_; }
  /// Hadamard path: the d signs s (±1.0f); empty otherwise.
  const std::vector<float>& signs() const { return signs_; }
  /// Dense path: R row-major [d][d] (R[i][j] at i*d + j); empty otherwise.
  const std::vector<float>& dense() const { return dense_; }

 private:
  int32_t head_dim_;
  bool hadamard_;
  float scale_ = 1.0f;  // 1 / sqrt(d) on the Hadamard path
  std::vector<float> signs_;
  std::vector<float> dense_;
};

}  // namespace tq::kernels
