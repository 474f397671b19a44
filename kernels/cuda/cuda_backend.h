// The CUDA backend (issue 6): every Backend op on one NVIDIA GPU.
#pragma once

#include <memory>

#include "kernels/backend.h"

namespace tq::kernels {

/// Creates the CUDA backend on device `device` (cudaMalloc'd memory, one
/// stream, one cuBLAS handle). Ops are enqueued on the stream; copies to and
/// from the host wait for it, so the backend is synchronous from the caller's
/// view. Any thread may drive it, one at a time (each call selects the
/// device). Throws std::runtime_error when the device or cuBLAS cannot be
/// initialized (no GPU, no driver).
///
/// Weights: kF32 (cuBLAS fp32 GEMM, no TF32), kF16 and kBF16 (activations
/// rounded to 16 bits in a workspace, cublasGemmEx with fp32 output and
/// compute); kInt8/kInt4 through the weight-only GEMM of quant_gemm.h (fp16
/// activations and output, widened to fp32). KV: every
/// KvDtype, head_dim <= 256; the tq formats need a power-of-two head_dim (the
/// randomized Hadamard rotation) — others throw std::invalid_argument.
std::unique_ptr<Backend> CreateCudaBackend(int device);

/// The cudaStream_t a CUDA backend enqueues its ops on (as void*, so this
/// header needs no CUDA include), for event timing in benchmarks; nullptr
/// for any other backend.
void* CudaBackendStream(Backend& backend);

/// The device index of a CUDA backend; -1 for any other backend.
int CudaBackendDevice(const Backend& backend);

}  // namespace tq::kernels
