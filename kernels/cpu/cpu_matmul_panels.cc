// fp32 matmul over weights packed into column panels (WeightDtype::kF32Panels),
// an outer-product micro-kernel in the style of GotoBLAS/BLIS: each step of k
// loads one row of a panel (kF32PanelCols = 64 output features, four 16-wide
// vectors) and broadcasts one x value per row, so a tile of kPanelRowTile rows
// x 64 outputs needs 4 + kPanelRowTile loads for 4 x kPanelRowTile FMAs and
// no horizontal sums. On the Zen 5 build machines it runs batched (16-row)
// matmuls 2-3x faster than the dot-product kernel over [out, in] rows, and
// single rows 1.1-1.4x (bench/matmul_bench.cc, docs/PERFORMANCE.md).
// Every output is one accumulator summed over k in order with MulAdd (one
// rounding per step, whatever the compiler contracts), whatever the tile, the
// number of rows or threads, so batched and single-sequence results agree bit
// for bit.
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul_tile.h"

namespace tq::kernels::cpu {
namespace {

#ifdef __AVX512F__
constexpr int kPanelRowTile = 6;  // 6 x 4 accumulators + 4 panel vectors of 32 registers
#else
constexpr int kPanelRowTile = 1;  // 8 accumulators + 8 panel vectors of 16 AVX2 registers
#endif
constexpr int kVecsPerPanel = kF32PanelCols / kLanes;
static_assert(kF32PanelCols % kLanes == 0, "a panel is a whole number of vectors");

// out[r][0, 64) (+)= sum_i x[r][i] * panel[i][0, 64) for R rows.
template <int R>
void PanelTile(const float* const* x, const float* panel, int64_t k, float* const* out,
               bool accumulate) {
  Vec acc[R][kVecsPerPanel];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < kVecsPerPanel; ++c) acc[r][c] = Vec{};
  for (int64_t i = 0; i < k; ++i) {
    const float* row = panel + i * kF32PanelCols;
    Vec w[kVecsPerPanel];
    for (int c = 0; c < kVecsPerPanel; ++c) w[c] = LoadVec(row + c * kLanes);
    for (int r = 0; r < R; ++r) {
      const Vec xs = Vec{} + x[r][i];  // broadcast
      for (int c = 0; c < kVecsPerPanel; ++c) acc[r][c] = MulAdd(xs, w[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < kVecsPerPanel; ++c) {
      float* dst = out[r] + c * kLanes;
      // out + the full sum when accumulating, as the dot-product kernels do.
      const Vec v = accumulate ? LoadVec(dst) + acc[r][c] : acc[r][c];
      std::memcpy(dst, &v, sizeof(Vec));
    }
  }
}

template <int R>
void RowTile(const MatMulParams& p, const float* panel, int64_t row, int64_t col) {
  const int64_t k = p.w.in_features;
  const float* x[R];
  float* out[R];
  for (int r = 0; r < R; ++r) {
    x[r] = p.x + (row + r) * k;
    out[r] = p.out + (row + r) * p.w.out_features + col;
  }
  PanelTile<R>(x, panel, k, out, p.accumulate);
}

// The rows left after whole tiles, with a tile of exactly that many rows.
template <int R>
void TailRows(const MatMulParams& p, const float* panel, int64_t row, int64_t col) {
  if constexpr (R > 0) {
    if (p.rows - row == R) return RowTile<R>(p, panel, row, col);
    TailRows<R - 1>(p, panel, row, col);
  }
}

}  // namespace

bool CanPackF32Panels(int32_t out_features) {
  return out_features > 0 && out_features % kF32PanelCols == 0;
}

void PackF32Panels(const float* w, int32_t out_features, int32_t in_features, float* packed) {
  const int64_t k = in_features;
  for (int64_t o = 0; o < out_features; ++o) {
    float* panel = packed + o / kF32PanelCols * kF32PanelCols * k;
    const float* src = w + o * k;
    for (int64_t i = 0; i < k; ++i) panel[i * kF32PanelCols + o % kF32PanelCols] = src[i];
  }
}

void MatMulF32Panels(const MatMulParams& p, ThreadPool& pool) {
  const int64_t k = p.w.in_features;
  const float* packed = static_cast<const float*>(p.w.data);
  // Threads split the panels: each streams its share of W once, and a panel
  // (64 x k floats, 512 KB at k = 2048) stays in L2 across the row tiles.
  pool.ParallelFor(p.w.out_features / kF32PanelCols, 1, [&](int64_t begin, int64_t end) {
    for (int64_t pi = begin; pi < end; ++pi) {
      const float* panel = packed + pi * kF32PanelCols * k;
      const int64_t col = pi * kF32PanelCols;
      int64_t row = 0;
      for (; row + kPanelRowTile <= p.rows; row += kPanelRowTile) {
        RowTile<kPanelRowTile>(p, panel, row, col);
      }
      TailRows<kPanelRowTile - 1>(p, panel, row, col);
    }
  });
}

}  // namespace tq::kernels::cpu
