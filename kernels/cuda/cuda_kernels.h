// Host launchers of the CUDA kernels (kernels/cuda/*.cu). Every pointer is
// device memory; every launcher enqueues on `stream` and returns without
// waiting. The params structs are the backend's (kernels/op_params.h), already
// checked by kernels/op_checks.h; tq codecs come as the KV cache's device
// arrays (TqCodecArrays, kernels/kv_layout.h) because TqLayerCodec holds host
// pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/op_params.h"

namespace tq::kernels::cuda {

/// Largest head_dim the CUDA attention and KV write kernels handle (8 values
/// per lane of a warp).
constexpr int32_t kMaxHeadDim = 256;

void LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream);
void LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream);
void LaunchRope(const RopeParams& p, cudaStream_t stream);
void LaunchSiluMul(const SiluMulParams& p, cudaStream_t stream);
/// dst[i] = src[i] rounded to fp16 (to_bf16 false) or bf16 (true), n elements.
void LaunchToHalf(const float* src, uint16_t* dst, int64_t n, bool to_bf16, cudaStream_t stream);

/// dst[i] = fp16 src[i] widened (accumulate: dst[i] += it), n elements.
void LaunchFromHalf(const uint16_t* src, float* dst, int64_t n, bool accumulate,
                    cudaStream_t stream);

/// out[r, c] += bias[c] for r < rows, c < cols (MatMulParams::bias after the GEMM).
void LaunchAddBias(float* out, const float* bias, int32_t rows, int32_t cols, cudaStream_t stream);

/// KV write for every KvDtype; `tq` is required for kTq3/kTq4.
void LaunchKvWrite(const KvWriteParams& p, const TqCodecArrays* tq, cudaStream_t stream);

/// Tokens of one PagedAttention call grouped for the two attention kernels
/// (host side, from PagedAttentionParams::host_token_seq): every run of at
/// least kPrefillMinRun consecutive tokens of one sequence (a prefill chunk)
/// is cut into tiles of up to `tile_tokens` tokens for the query-tiled prefill
/// kernel; every other token (decode) goes to the per-token decode kernel.
/// Without host_token_seq every token decodes (tiles empty, decode empty).
struct AttentionBatchLayout {
  int32_t tile_tokens = 0;      // query tokens per tile (from the GQA group and head_dim)
  std::vector<int32_t> tiles;   // [num_tiles][2]: first token, token count
  std::vector<int32_t> decode;  // tokens of the decode kernel, in batch order (with tiles)
  int32_t num_tiles() const { return static_cast<int32_t>(tiles.size() / 2); }
};
/// Shortest run of one sequence's tokens that goes to the prefill kernel
/// (a design choice, to be tuned on the GPU: bench/cuda_kernels_bench.cc).
constexpr int32_t kPrefillMinRun = 4;
AttentionBatchLayout PlanAttentionBatch(const PagedAttentionParams& p);

/// Split-K plan of one PagedAttention call: `splits` partitions of
/// `split_len` positions each; splits > 1 needs WorkspaceFloats() floats of
/// device workspace for the partial results.
struct AttentionPlan {
  int32_t splits = 1;
  int32_t split_len = 0;
  size_t WorkspaceFloats(const PagedAttentionParams& p) const {
    return splits > 1 ? static_cast<size_t>(p.num_tokens) * p.num_heads * splits *
                            (static_cast<size_t>(p.cache.layout.head_dim) + 2)
                      : 0;
  }
};
/// Chooses the split count from the longest possible context
/// (max_blocks_per_seq · block_size, the host does not know token_pos) and
/// the number of SMs: split only when the blocks of both kernels (decode
/// tokens and prefill tiles × KV heads × group chunks) leave SMs idle. The
/// two-argument form plans for the decode kernel alone.
AttentionPlan PlanAttention(const PagedAttentionParams& p, int32_t num_sms);
AttentionPlan PlanAttention(const PagedAttentionParams& p, int32_t num_sms,
                            const AttentionBatchLayout& layout);

/// Paged attention: each token attends to its positions [0, token_pos].
/// The tokens of layout.decode (all tokens when layout has no tiles) run the
/// per-token decode kernel, the tiles the query-tiled prefill kernel;
/// `device_layout` is a device copy of layout.tiles followed by
/// layout.decode (may be null without tiles); `workspace` holds
/// plan.WorkspaceFloats(p) floats.
void LaunchPagedAttention(const PagedAttentionParams& p, const TqCodecArrays* tq,
                          const AttentionPlan& plan, float* workspace, cudaStream_t stream,
                          const AttentionBatchLayout& layout = {},
                          const int32_t* device_layout = nullptr);

/// LogitsTopK (op_params.h), one block per row; k <= kMaxLogitsTopK. Same
/// ids and values as the CPU reference; the sums differ by summation order.
void LaunchLogitsTopK(const LogitsTopKParams& p, cudaStream_t stream);

}  // namespace tq::kernels::cuda
