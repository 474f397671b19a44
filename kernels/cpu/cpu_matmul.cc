// fp32 matmul out[rows, n] = x[rows, k] · W[n, k]ᵀ for Hugging Face [out, in]
// weights. Both operands are contiguous along k, so each output is a dot
// product; a register tile of kRowTile x kColTile dot products shares every
// load of x and W (kernels/cpu/matmul_tile.h). Each output's summation order
// depends only on k, never on the number of rows or threads, so batched and
// single-sequence results agree bit for bit.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

// This level's part of the file (isa_begin.h): everything above is baseline code.
#include "kernels/cpu/isa_begin.h"
#include "kernels/cpu/matmul_tile.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {

void MatMul(const MatMulParams& p, ThreadPool& pool) {
  const int64_t n = p.w.out_features;
  const int64_t k = p.w.in_features;
  const float* weights = static_cast<const float*>(p.w.data);
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
      for (; row + kRowTile <= p.rows; row += kRowTile) {
        RowBlock<kRowTile>(p, row, weights + cb * k, cb, ce - cb);
      }
      for (; row < p.rows; ++row) RowBlock<1>(p, row, weights + cb * k, cb, ce - cb);
    }
  });
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
