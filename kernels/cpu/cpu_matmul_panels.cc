// fp32 matmul over weights packed into column panels (WeightDtype::kF32Panels),
// an outer-product micro-kernel in the style of GotoBLAS/BLIS: each step of k
// loads one row of a panel (kF32PanelCols output features, three 16-wide
// vectors) and broadcasts one x value per row, so a tile of kPanelRowTile rows x 48
// outputs needs 3 + kPanelRowTile loads for 3 x kPanelRowTile FMAs and no horizontal
// sums (MulAdd: one rounding per step, whatever the compiler contracts). On the Zen 5 build
// machines it runs batched (16-row) matmuls 2-5x faster than the dot-product kernel over [out, in]
// rows (docs/PERFORMANCE.md). Every output is one accumulator summed over k in order, whatever the
// tile, the number of rows or threads, so batched and single-sequence results agree bit for bit.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul_tile.h"

namespace tq::kernels::cpu {
namespace {

#ifdef __AVX512F__
constexpr int kPanelRowTile = 8;  // 8 x 3 accumulators + 3 panel vectors of 32 registers
#else
constexpr int kPanelRowTile = 2;  // 2 x 6 accumulators of 16 AVX2 registers
#endif
constexpr int kVecsPerPanel = kF32PanelCols / kLanes;
static_assert(kF32PanelCols % kLanes == 0, "a panel is a whole number of vectors");

// out[r][0, cols) (+)= sum_i x[r][i] * panel[i][0, cols) for R rows.
template <int R>
void PanelTile(const float* const* x, const float* panel, int64_t k, float* const* out, int cols,
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
    float tile[kF32PanelCols];
    std::memcpy(tile, acc[r], sizeof(tile));
    float* dst = out[r];
    if (accumulate) {
      for (int j = 0; j < cols; ++j) dst[j] += tile[j];
    } else {
      std::memcpy(dst, tile, sizeof(float) * cols);
    }
  }
}

template <int R>
void RowTile(const MatMulParams& p, const float* panel, int64_t row, int64_t col, int cols) {
  const int64_t k = p.w.in_features;
  const float* x[R];
  float* out[R];
  for (int r = 0; r < R; ++r) {
    x[r] = p.x + (row + r) * k;
    out[r] = p.out + (row + r) * p.w.out_features + col;
  }
  PanelTile<R>(x, panel, k, out, cols, p.accumulate);
}

// The rows left after whole tiles, with a tile of exactly that many rows.
template <int R>
void TailRows(const MatMulParams& p, const float* panel, int64_t row, int64_t col, int cols) {
  if constexpr (R > 0) {
    if (p.rows - row == R) return RowTile<R>(p, panel, row, col, cols);
    TailRows<R - 1>(p, panel, row, col, cols);
  }
}

}  // namespace

size_t F32PanelsBytes(int32_t out_features, int32_t in_features) {
  const size_t panels = (static_cast<size_t>(out_features) + kF32PanelCols - 1) / kF32PanelCols;
  return panels * kF32PanelCols * static_cast<size_t>(in_features) * sizeof(float);
}

void PackF32Panels(const float* w, int32_t out_features, int32_t in_features, float* packed) {
  const int64_t k = in_features;
  const int64_t panels = (static_cast<int64_t>(out_features) + kF32PanelCols - 1) / kF32PanelCols;
  std::memset(packed, 0, F32PanelsBytes(out_features, in_features));
  for (int64_t p = 0; p < panels; ++p) {
    float* panel = packed + p * kF32PanelCols * k;
    const int64_t cols = std::min<int64_t>(kF32PanelCols, out_features - p * kF32PanelCols);
    for (int64_t j = 0; j < cols; ++j) {
      const float* src = w + (p * kF32PanelCols + j) * k;
      for (int64_t i = 0; i < k; ++i) panel[i * kF32PanelCols + j] = src[i];
    }
  }
}

void MatMulF32Panels(const MatMulParams& p, ThreadPool& pool) {
  const int64_t n = p.w.out_features;
  const int64_t k = p.w.in_features;
  const float* packed = static_cast<const float*>(p.w.data);
  const int64_t panels = (n + kF32PanelCols - 1) / kF32PanelCols;
  // Threads split the panels: each streams its share of W once, and a panel
  // (48 x k floats, <= 400 KB for k <= 2048) stays in L2 across the row tiles.
  pool.ParallelFor(panels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t pi = begin; pi < end; ++pi) {
      const float* panel = packed + pi * kF32PanelCols * k;
      const int64_t col = pi * kF32PanelCols;
      const int cols = static_cast<int>(std::min<int64_t>(kF32PanelCols, n - col));
      int64_t row = 0;
      for (; row + kPanelRowTile <= p.rows; row += kPanelRowTile) {
        RowTile<kPanelRowTile>(p, panel, row, col, cols);
      }
      TailRows<kPanelRowTile - 1>(p, panel, row, col, cols);
    }
  });
}

}  // namespace tq::kernels::cpu
