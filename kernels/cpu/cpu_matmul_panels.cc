// Matmul over weights packed into column panels (WeightDtype::kF32Panels,
// kF16Panels, kBF16Panels), an outer-product micro-kernel in the style of
// GotoBLAS/BLIS: each step of k loads one row of a panel (kPanelCols = 64
// output features, four 16-wide vectors; 16-bit elements widened to fp32 in
// registers by vcvtph2ps or a shift, no fp32 copy of the weights) and
// broadcasts one x value per row, so a tile of kPanelRowTile rows x 64
// outputs needs 4 + kPanelRowTile loads for 4 x kPanelRowTile FMAs and no
// horizontal sums. That is what makes prefill (many rows) fast; one row
// streams the panel once, as the dot-product GEMV streams the rows.
// Every output is one accumulator summed over k in order with MulAdd (one
// rounding per step, whatever the compiler contracts), whatever the tile, the
// number of rows or threads, so batched and single-sequence results agree bit
// for bit, and a 16-bit panel gives the bits of the fp32 panel of its widened
// (exact) values.
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/cpu_kernels.h"

// This level's part of the file (isa_begin.h): everything above is baseline code.
#include "kernels/cpu/isa_begin.h"
#include "kernels/cpu/matmul_tile.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {
namespace {

#if TQ_ISA_AVX512F
constexpr int kPanelRowTile = 6;  // 6 x 4 accumulators + 4 panel vectors of 32 registers
#else
constexpr int kPanelRowTile = 1;  // 8 accumulators + 8 panel vectors of 16 AVX2 registers
#endif
constexpr int kVecsPerPanel = kPanelCols / kLanes;
static_assert(kPanelCols % kLanes == 0, "a panel is a whole number of vectors");

// Element type and widening load of each panel format (D: the logical dtype).
template <WeightDtype D>
struct Panel {
  using Element = uint16_t;
  static Vec Load(const uint16_t* p) { return LoadWide<D>(p, 0); }
};
template <>
struct Panel<WeightDtype::kF32> {
  using Element = float;
  static Vec Load(const float* p) { return LoadVec(p); }
};

// out[r][0, 64) (+)= sum_i x[r][i] * panel[i][0, 64) for R rows.
template <WeightDtype D, int R>
void PanelTile(const float* const* x, const typename Panel<D>::Element* panel, int64_t k,
               float* const* out, bool accumulate) {
  Vec acc[R][kVecsPerPanel];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < kVecsPerPanel; ++c) acc[r][c] = Vec{};
  for (int64_t i = 0; i < k; ++i) {
    const auto* row = panel + i * kPanelCols;
    Vec w[kVecsPerPanel];
    for (int c = 0; c < kVecsPerPanel; ++c) w[c] = Panel<D>::Load(row + c * kLanes);
    for (int r = 0; r < R; ++r) {
      const Vec xs = Splat<Vec>(x[r][i]);
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

template <WeightDtype D, int R>
void RowTile(const MatMulParams& p, const typename Panel<D>::Element* panel, int64_t row,
             int64_t col) {
  const int64_t k = p.w.in_features;
  const float* x[R];
  float* out[R];
  for (int r = 0; r < R; ++r) {
    x[r] = p.x + (row + r) * k;
    out[r] = p.out + (row + r) * p.w.out_features + col;
  }
  PanelTile<D, R>(x, panel, k, out, p.accumulate);
}

// The rows left after whole tiles, with a tile of exactly that many rows.
template <WeightDtype D, int R>
void TailRows(const MatMulParams& p, const typename Panel<D>::Element* panel, int64_t row,
              int64_t col) {
  if constexpr (R > 0) {
    if (p.rows - row == R) return RowTile<D, R>(p, panel, row, col);
    TailRows<D, R - 1>(p, panel, row, col);
  }
}

template <WeightDtype D>
void MatMulPanelsOf(const MatMulParams& p, ThreadPool& pool) {
  const int64_t k = p.w.in_features;
  const auto* packed = static_cast<const typename Panel<D>::Element*>(p.w.data);
  // Threads split the panels: each streams its share of W once, and a panel
  // (64 x k elements, 512 KB of fp32 at k = 2048) stays in L2 across the row
  // tiles.
  pool.ParallelFor(p.w.out_features / kPanelCols, 1, [&](int64_t begin, int64_t end) {
    for (int64_t pi = begin; pi < end; ++pi) {
      const auto* panel = packed + pi * kPanelCols * k;
      const int64_t col = pi * kPanelCols;
      int64_t row = 0;
      for (; row + kPanelRowTile <= p.rows; row += kPanelRowTile) {
        RowTile<D, kPanelRowTile>(p, panel, row, col);
      }
      TailRows<D, kPanelRowTile - 1>(p, panel, row, col);
    }
  });
}

size_t ElementBytes(const WeightView& w) {
  return LogicalWeightDtype(w.dtype) == WeightDtype::kF32 ? sizeof(float) : sizeof(uint16_t);
}

}  // namespace

WeightDtype PanelDtype(const WeightView& w) {
  if (w.out_features <= 0 || w.out_features % kPanelCols != 0) return w.dtype;
  switch (w.dtype) {
    case WeightDtype::kF32:
      return WeightDtype::kF32Panels;
    case WeightDtype::kF16:
      return WeightDtype::kF16Panels;
    case WeightDtype::kBF16:
      return WeightDtype::kBF16Panels;
    default:
      return w.dtype;
  }
}

size_t DenseWeightBytes(const WeightView& w) {
  return ElementBytes(w) * static_cast<size_t>(w.out_features) * static_cast<size_t>(w.in_features);
}

void PackPanels(const WeightView& w, void* packed) {
  const int64_t k = w.in_features;
  const size_t size = ElementBytes(w);
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* dst = static_cast<uint8_t*>(packed);
  for (int64_t o = 0; o < w.out_features; ++o) {
    uint8_t* panel = dst + o / kPanelCols * kPanelCols * k * size;
    for (int64_t i = 0; i < k; ++i) {
      std::memcpy(panel + (i * kPanelCols + o % kPanelCols) * size, src + (o * k + i) * size, size);
    }
  }
}

void MatMulPanels(const MatMulParams& p, ThreadPool& pool) {
  switch (LogicalWeightDtype(p.w.dtype)) {
    case WeightDtype::kF32:
      return MatMulPanelsOf<WeightDtype::kF32>(p, pool);
    case WeightDtype::kF16:
      return MatMulPanelsOf<WeightDtype::kF16>(p, pool);
    case WeightDtype::kBF16:
      return MatMulPanelsOf<WeightDtype::kBF16>(p, pool);
    default:
      throw std::invalid_argument("cpu MatMulPanels: " + WeightDtypeName(p.w.dtype) +
                                  " is not a panel layout");
  }
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
