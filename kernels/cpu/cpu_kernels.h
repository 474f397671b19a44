// CPU kernel entry points shared by the CPU backend's translation units.
// Those listed in isa_kernels.h run the copy of the active ISA level
// (cpu_isa.h); the integer matmul chooses its ISA itself (IntIsa).
#pragma once

#include <cstddef>

#include "kernels/cpu/thread_pool.h"
#include "kernels/op_params.h"

namespace tq::kernels::cpu {

/// out = x · Wᵀ, register-blocked and split over output features.
void MatMul(const MatMulParams& p, ThreadPool& pool);

/// The panel layout of a weight (kF32 -> kF32Panels, kF16 -> kF16Panels,
/// kBF16 -> kBF16Panels), or the weight's own dtype when it has none: other
/// formats, or out_features not whole panels of kPanelCols (packing then
/// would add bytes).
WeightDtype PanelDtype(const WeightView& w);

/// Bytes of a dense (fp32, fp16 or bf16) weight: the same before and after
/// packing into panels.
size_t DenseWeightBytes(const WeightView& w);

/// Packs w [out_features, in_features] (fp32, fp16 or bf16, row-major) into
/// PanelDtype(w)'s layout (op_params.h); `packed` holds DenseWeightBytes(w).
/// Needs PanelDtype(w) != w.dtype.
void PackPanels(const WeightView& w, void* packed);

/// out = x · Wᵀ for a kF32Panels, kF16Panels or kBF16Panels weight
/// (outer-product micro-kernel; 16-bit elements widened in registers).
void MatMulPanels(const MatMulParams& p, ThreadPool& pool);

/// out = x · Wᵀ for f16, bf16, int8 and int4 weights (validated by the
/// caller): decodes a cache-sized block of W rows per thread at a time and
/// gives the same bits as MatMul on the dequantized weights.
void MatMulPacked(const MatMulParams& p, ThreadPool& pool);

/// Whether Gemv handles p: one row of x and f16/bf16 weights, or int8/int4
/// weights whose groups are whole SIMD chunks (group_size a multiple of 16 at
/// the AVX-512 levels, of 8 otherwise: the active level's SIMD width).
bool GemvSupported(const MatMulParams& p);

/// The decode GEMV for packed weights, decoding into registers; same bits as
/// MatMulPacked. Requires GemvSupported(p).
void Gemv(const MatMulParams& p, ThreadPool& pool);

/// Whether an int8/int4 weight has a kInt8Tiles/kInt4Tiles layout: out_features
/// whole tiles of kIntTileRows, group_size <= kIntTileMaxGroup and a multiple
/// of 4 (int8) or 8 (int4) inputs.
bool CanTileInt(const WeightView& w);

/// Bytes of the tiled copy of w (codes + scales + zeros: the same as w's).
size_t TiledIntBytes(const WeightView& w);

/// Repacks int8/int4 w (CanTileInt) into `storage` (TiledIntBytes(w) bytes,
/// 64-byte aligned for the fastest loads): the codes in tiles, then the
/// scales and zeros [tiles, groups, 16]. Returns the view of the copy, whose
/// scales/zeros point into `storage`.
WeightView TileInt(const WeightView& w, void* storage);

/// dst[i] = w[o, i] as fp32 for a kInt8Tiles/kInt4Tiles weight, computed as
/// DecodeWeightRow computes the row-major formats.
void DecodeTiledIntRow(const WeightView& w, int64_t o, float* dst);

/// Instruction sets of the integer matmul, detected at run time.
enum class IntIsa { kScalar, kAvx2, kAvx512Vnni };
bool IntIsaSupported(IntIsa isa);
/// The fastest supported one.
IntIsa BestIntIsa();
/// "scalar", "avx2", "avx512-vnni".
const char* IntIsaName(IntIsa isa);

/// out = x · Wᵀ for a kInt8Tiles/kInt4Tiles weight on integer units, with x
/// quantized to int8 per group (cpu_int_matmul.cc gives the exact rule). Every
/// ISA gives the same bits; each output depends only on its row of x and of W.
/// isa must be supported. Called from one thread at a time (the pool's).
void IntMatMul(const MatMulParams& p, ThreadPool& pool, IntIsa isa);

/// out[t] = table[ids[t]] widened to fp32, for f32, f16 and bf16 tables;
/// throws std::invalid_argument for an id outside [0, vocab) or another dtype.
void Embedding(const EmbeddingParams& p, ThreadPool& pool);

/// Paged causal GQA attention; split over (token, KV head) pairs.
void PagedAttention(const PagedAttentionParams& p, ThreadPool& pool);

/// Writes K/V rows into their slots, converting to the pool's dtype.
void KvWrite(const KvWriteParams& p);

/// The row-wise ops of the CPU backend (op_params.h), rows split over the pool.
void RmsNorm(const RmsNormParams& p, ThreadPool& pool);
void Rope(const RopeParams& p, ThreadPool& pool);
void SiluMul(const SiluMulParams& p, ThreadPool& pool);

}  // namespace tq::kernels::cpu
