// Weight-only quantized GEMM on CUDA (issue 7): fp16 activations times int8 or
// int4 group-wise weights, fp32 accumulation, fp16 output, in the packing of
// kernels/op_params.h (WeightView) that the CPU backend reads, so one
// checkpoint serves both. Params struct + stream, as TensorRT-LLM's
// weight-only GEMM plugins (cutlass_kernels/fpA_intB_gemm) are called.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/op_params.h"

namespace tq::kernels::cuda {

/// out[m, n] = a[m, k] · Wᵀ (+ out when accumulate), W [n, k] dequantized as
///   W[o, i] = scale[o, g] * (code[o, i] - zero[o, g]),  g = i / group_size,
/// zero = 2^(bits-1) when zeros is null (symmetric). All pointers are device
/// memory; fp16 values are IEEE binary16 bits. Row-major everywhere.
struct QuantGemmParams {
  const uint16_t* a = nullptr;      // fp16 activations [m, k]
  const uint8_t* weight = nullptr;  // kInt8: [n, k] bytes; kInt4: [n, k / 2], element 2j low nibble
  const uint16_t* scales = nullptr;        // fp16 [n, k / group_size]
  const uint16_t* zeros = nullptr;         // fp16 integral codes, same shape; null = symmetric
  uint16_t* out = nullptr;                 // fp16 [m, n]
  int32_t m = 0;                           // rows of a (tokens)
  int32_t n = 0;                           // out_features
  int32_t k = 0;                           // in_features
  int32_t group_size = 0;                  // divides k; even for kInt4
  WeightDtype dtype = WeightDtype::kInt4;  // kInt8 or kInt4
  bool accumulate = false;                 // out += a · Wᵀ (fp32 sum, one fp16 rounding)
};

/// Throws std::invalid_argument naming the field when p is malformed (null
/// pointers, non-positive sizes, group_size not dividing k, odd int4 group,
/// a dtype other than kInt8/kInt4). Host only; needs no GPU.
void ValidateQuantGemm(const QuantGemmParams& p);

/// Validates p, then enqueues the kernel on `stream`: a warp-per-output GEMV
/// for m <= 8 (decode, memory-bound: each weight byte read once per 8 rows)
/// and a shared-memory tiled GEMM (64 x 64 tiles, weights dequantized into
/// shared memory) above. Returns the launch status (cudaGetLastError); the
/// result is ready when the stream is.
cudaError_t QuantGemm(const QuantGemmParams& p, cudaStream_t stream);

}  // namespace tq::kernels::cuda
