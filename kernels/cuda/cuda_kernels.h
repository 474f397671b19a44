// Host launchers of the CUDA kernels (kernels/cuda/*.cu). Every pointer is
// device memory; every launcher enqueues on `stream` and returns without
// waiting. The params structs are the backend's (kernels/op_params.h), already
// checked by kernels/op_checks.h; tq codecs come as device mirrors
// (DeviceTqCodec) because TqLayerCodec holds host pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/op_params.h"

namespace tq::kernels::cuda {

/// Device copies of a TqLayerCodec's arrays (same shapes as there) plus the
/// rotation's ±1 signs; head_dim must be a power of two (randomized Hadamard).
struct DeviceTqCodec {
  const float* signs = nullptr;         // [head_dim]
  const float* k_centroids = nullptr;   // [2^key_bits]
  const float* k_boundaries = nullptr;  // [2^key_bits - 1]
  const float* v_centroids = nullptr;   // [2^value_bits]
  const float* v_boundaries = nullptr;  // [2^value_bits - 1]
  const float* k_mean = nullptr;        // [num_kv_heads * head_dim] or null (0)
  const float* k_scale = nullptr;       // [num_kv_heads * head_dim] or null (1)
  const float* rope_cos = nullptr;      // [rope_positions][head_dim / 2]
  const float* rope_sin = nullptr;
  int32_t rope_positions = 0;
};

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

/// KV write for every KvDtype; `tq` is required for kTq3/kTq4.
void LaunchKvWrite(const KvWriteParams& p, const DeviceTqCodec* tq, cudaStream_t stream);

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
/// the number of SMs: split only when tokens × KV heads leave SMs idle.
AttentionPlan PlanAttention(const PagedAttentionParams& p, int32_t num_sms);

/// Paged attention (decode and prefill alike: each token attends to its
/// positions [0, token_pos]); `workspace` holds plan.WorkspaceFloats(p) floats.
void LaunchPagedAttention(const PagedAttentionParams& p, const DeviceTqCodec* tq,
                          const AttentionPlan& plan, float* workspace, cudaStream_t stream);

/// LogitsTopK (op_params.h), one block per row; k <= kMaxLogitsTopK. Same
/// ids and values as the CPU reference; the sums differ by summation order.
void LaunchLogitsTopK(const LogitsTopKParams& p, cudaStream_t stream);

}  // namespace tq::kernels::cuda
