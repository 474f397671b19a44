// fp32 matmul out[rows, n] = x[rows, k] · W[n, k]ᵀ for Hugging Face [out, in]
// weights. Both operands are contiguous along k, so each output is a dot
// product; a register tile of kRowTile x kColTile dot products shares every
// load of x and W. GCC vector extensions give 16-wide SIMD with AVX-512 (a
// 2 x 8 tile) and 8-wide on AVX2 (2 x 4, which fits 16 registers), with no
// intrinsics. Each output's summation order depends only on k, never on the
// number of rows or threads, so batched and single-sequence results agree
// bit for bit.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd.h"

namespace tq::kernels::cpu {
namespace {

#ifdef __AVX512F__
using Vec = v16f;
constexpr int kColTile = 8;
#else
using Vec = v8f;
constexpr int kColTile = 4;
#endif
constexpr int kRowTile = 2;
constexpr int kLanes = sizeof(Vec) / sizeof(float);

inline Vec LoadVec(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Computes the R x C tile out[r][c] = dot(x[r], w[c]) over k.
template <int R, int C>
inline void DotTile(const float* const* x, const float* const* w, int64_t k, float out[R][C]) {
  Vec acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = Vec{};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    Vec wv[C];
    for (int c = 0; c < C; ++c) wv[c] = LoadVec(w[c] + i);
    for (int r = 0; r < R; ++r) {
      const Vec xv = LoadVec(x[r] + i);
      for (int c = 0; c < C; ++c) acc[r][c] += xv * wv[c];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float sum = HorizontalSum(acc[r][c]);
      for (int64_t j = i; j < k; ++j) sum += x[r][j] * w[c][j];
      out[r][c] = sum;
    }
  }
}

template <int R>
void RowBlock(const MatMulParams& p, int64_t row, int64_t col_begin, int64_t col_end) {
  const int64_t k = p.w.in_features;
  const int64_t n = p.w.out_features;
  const float* weights = static_cast<const float*>(p.w.data);
  const float* x[R];
  for (int r = 0; r < R; ++r) x[r] = p.x + (row + r) * k;
  auto store = [&](int64_t col, int r, float v) {
    float& dst = p.out[(row + r) * n + col];
    dst = p.accumulate ? dst + v : v;
  };
  int64_t col = col_begin;
  for (; col + kColTile <= col_end; col += kColTile) {
    const float* w[kColTile];
    for (int c = 0; c < kColTile; ++c) w[c] = weights + (col + c) * k;
    float tile[R][kColTile];
    DotTile<R, kColTile>(x, w, k, tile);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < kColTile; ++c) store(col + c, r, tile[r][c]);
  }
  for (; col < col_end; ++col) {
    const float* w[1] = {weights + col * k};
    float tile[R][1];
    DotTile<R, 1>(x, w, k, tile);
    for (int r = 0; r < R; ++r) store(col, r, tile[r][0]);
  }
}

}  // namespace

void MatMul(const MatMulParams& p, ThreadPool& pool) {
  const int64_t n = p.w.out_features;
  // Split output features across threads in whole column tiles: each thread
  // streams its own slice of W once per row tile (what bounds decode speed),
  // and every column takes the same code path whatever the thread count, so
  // results are bit-identical across thread counts.
  constexpr int64_t kTilesPerTask = 8;
  const int64_t num_tiles = (n + kColTile - 1) / kColTile;
  pool.ParallelFor(num_tiles, kTilesPerTask, [&](int64_t tile_begin, int64_t tile_end) {
    const int64_t col_begin = tile_begin * kColTile;
    const int64_t col_end = std::min(n, tile_end * kColTile);
    // Cache-block the columns so a slab of W stays in L2 across row tiles.
    constexpr int64_t kColBlock = 64;
    for (int64_t cb = col_begin; cb < col_end; cb += kColBlock) {
      const int64_t ce = std::min(col_end, cb + kColBlock);
      int64_t row = 0;
      for (; row + kRowTile <= p.rows; row += kRowTile) RowBlock<kRowTile>(p, row, cb, ce);
      for (; row < p.rows; ++row) RowBlock<1>(p, row, cb, ce);
    }
  });
}

}  // namespace tq::kernels::cpu
