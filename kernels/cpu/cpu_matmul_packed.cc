// Matmul for the f16, bf16, int8 and int4 weight formats. Each thread decodes
// a block of output features (rows of W) into a small per-thread fp32 buffer
// (at most kDecodeBytes, cache-resident) and runs the fp32 micro-kernel of
// kernels/cpu/matmul_tile.h over it for every row of x. So the result is
// exactly the fp32 matmul with the dequantized weights, in the same summation
// order, bit-identical across thread counts and row counts, while the packed
// weights are read once per call and never expanded as a whole.
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/weight_decode.h"

// This level's part of the file (isa_begin.h): everything above is baseline code.
#include "kernels/cpu/isa_begin.h"
#include "kernels/cpu/matmul_tile.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {
namespace {

// Decoded block size: half of a Zen 4/5 L2 (1 MiB), so the block and the
// current rows of x stay in L2 while every row of x passes over it.
constexpr int64_t kDecodeBytes = 256 * 1024;

}  // namespace

void MatMulPacked(const MatMulParams& p, ThreadPool& pool) {
  const int64_t n = p.w.out_features;
  const int64_t k = p.w.in_features;
  // Output features decoded at a time: whole register tiles, within kDecodeBytes.
  const int64_t block_cols = std::max<int64_t>(
      kColTile, kDecodeBytes / (k * static_cast<int64_t>(sizeof(float))) / kColTile * kColTile);
  const int64_t num_tiles = (n + kColTile - 1) / kColTile;
  constexpr int64_t kTilesPerTask = 8;
  pool.ParallelFor(num_tiles, kTilesPerTask, [&](int64_t tile_begin, int64_t tile_end) {
    // Per-thread scratch, reused across calls: a decode block is at most
    // block_cols * k floats, never the whole matrix.
    thread_local std::vector<float> decoded;
    if (decoded.size() < static_cast<size_t>(block_cols * k)) decoded.resize(block_cols * k);
    const int64_t col_end = std::min(n, tile_end * kColTile);
    for (int64_t cb = tile_begin * kColTile; cb < col_end; cb += block_cols) {
      const int64_t cols = std::min(col_end - cb, block_cols);
      for (int64_t c = 0; c < cols; ++c) DecodeWeightRow(p.w, cb + c, decoded.data() + c * k);
      int64_t row = 0;
      for (; row + kRowTile <= p.rows; row += kRowTile) {
        RowBlock<kRowTile>(p, row, decoded.data(), cb, cols);
      }
      for (; row < p.rows; ++row) RowBlock<1>(p, row, decoded.data(), cb, cols);
    }
  });
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
