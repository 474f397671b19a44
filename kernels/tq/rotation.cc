#include "kernels/tq/rotation.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <stdexcept>
#include <string>

namespace tq::kernels {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in (0, 1]: 53 random bits, never 0 (log is taken).
double UniformOpen0(uint64_t* state) {
  return (static_cast<double>(SplitMix64(state) >> 11) + 1.0) * 0x1.0p-53;
}

bool IsPowerOfTwo(int32_t n) {
  return n > 0 && (n & (n - 1)) == 0;
}

// Small inputs avoid the heap for the aliased dense case.
constexpr int32_t kStackDim = 256;

// The input of a dense product out = M in over d floats: `in` itself, or a
// copy of it (in `stack` when d <= kStackDim, else in `heap`) when it is `out`.
const float* Unaliased(const float* in, const float* out, int32_t d, float* stack,
                       std::vector<float>& heap) {
  if (in != out) return in;
  float* copy = stack;
  if (d > kStackDim) {
    heap.resize(d);
    copy = heap.data();
  }
  std::memcpy(copy, in, sizeof(float) * d);
  return copy;
}

}  // namespace

Rotation::Rotation(int32_t head_dim, uint64_t seed)
    : head_dim_(head_dim), hadamard_(IsPowerOfTwo(head_dim)) {
  if (head_dim < 1)
    throw std::invalid_argument("Rotation: head_dim must be >= 1, got " + std::to_string(head_dim));
  const int32_t d = head_dim;
  uint64_t state = seed;
  if (hadamard_) {
    scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    signs_.resize(d);
    uint64_t bits = 0;
    for (int32_t i = 0; i < d; ++i) {
      if (i % 64 == 0) bits = SplitMix64(&state);
      signs_[i] = ((bits >> (i % 64)) & 1u) ? -1.0f : 1.0f;
    }
    return;
  }
  // Gaussian matrix G (columns g_j), Box–Muller pairs in row-major order.
  const size_t n = static_cast<size_t>(d) * d;
  std::vector<double> g(n);
  for (size_t k = 0; k < n; k += 2) {
    const double r = std::sqrt(-2.0 * std::log(UniformOpen0(&state)));
    const double theta = 2.0 * std::numbers::pi * UniformOpen0(&state);
    g[k] = r * std::cos(theta);
    if (k + 1 < n) g[k + 1] = r * std::sin(theta);
  }
  // Modified Gram–Schmidt on the columns of G, two passes ("twice is enough"):
  // G = Q R with diag(R) > 0, which makes Q Haar-distributed (no sign fix needed,
  // unlike Householder QR). q[j] holds column j of Q contiguously.
  std::vector<double> q(n);
  for (int32_t j = 0; j < d; ++j) {
    double* v = &q[static_cast<size_t>(j) * d];
    for (int32_t i = 0; i < d; ++i) v[i] = g[static_cast<size_t>(i) * d + j];
    for (int pass = 0; pass < 2; ++pass) {
      for (int32_t k = 0; k < j; ++k) {
        const double* u = &q[static_cast<size_t>(k) * d];
        double dot = 0.0;
        for (int32_t i = 0; i < d; ++i) dot += u[i] * v[i];
        for (int32_t i = 0; i < d; ++i) v[i] -= dot * u[i];
      }
    }
    double norm = 0.0;
    for (int32_t i = 0; i < d; ++i) norm += v[i] * v[i];
    norm = std::sqrt(norm);
    for (int32_t i = 0; i < d; ++i) v[i] /= norm;
  }
  dense_.resize(n);
  for (int32_t i = 0; i < d; ++i)
    for (int32_t j = 0; j < d; ++j)
      dense_[static_cast<size_t>(i) * d + j] =
          static_cast<float>(q[static_cast<size_t>(j) * d + i]);
}

void Rotation::Forward(const float* x, float* y) const {
  const int32_t d = head_dim_;
  if (hadamard_) {
    for (int32_t i = 0; i < d; ++i) y[i] = x[i] * signs_[i];
    FastWalshHadamard(y, d);
    for (int32_t i = 0; i < d; ++i) y[i] *= scale_;
    return;
  }
  float stack[kStackDim];
  std::vector<float> heap;
  const float* in = Unaliased(x, y, d, stack, heap);
  for (int32_t i = 0; i < d; ++i) {
    const float* row = &dense_[static_cast<size_t>(i) * d];
    double acc = 0.0;
    for (int32_t j = 0; j < d; ++j) acc += static_cast<double>(row[j]) * in[j];
    y[i] = static_cast<float>(acc);
  }
}

void Rotation::Inverse(const float* y, float* x) const {
  const int32_t d = head_dim_;
  if (hadamard_) {
    if (x != y) std::memcpy(x, y, sizeof(float) * d);
    FastWalshHadamard(x, d);
    for (int32_t i = 0; i < d; ++i) x[i] *= scale_ * signs_[i];
    return;
  }
  float stack[kStackDim];
  std::vector<float> heap;
  const float* in = Unaliased(y, x, d, stack, heap);
  // x = R^T y: accumulate rows of R scaled by y_i (column access of R^T).
  for (int32_t j = 0; j < d; ++j) x[j] = 0.0f;
  for (int32_t i = 0; i < d; ++i) {
    const float* row = &dense_[static_cast<size_t>(i) * d];
    const float yi = in[i];
    for (int32_t j = 0; j < d; ++j) x[j] += row[j] * yi;
  }
}

}  // namespace tq::kernels
