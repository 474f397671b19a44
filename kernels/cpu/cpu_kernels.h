// CPU kernel entry points shared by the CPU backend's translation units.
#pragma once

#include "kernels/cpu/thread_pool.h"
#include "kernels/op_params.h"

namespace tq::kernels::cpu {

/// out = x · Wᵀ, register-blocked and split over output features.
void MatMul(const MatMulParams& p, ThreadPool& pool);

/// Paged causal GQA attention; split over (token, KV head) pairs.
void PagedAttention(const PagedAttentionParams& p, ThreadPool& pool);

/// Writes K/V rows into their slots, converting to the pool's dtype.
void KvWrite(const KvWriteParams& p);

}  // namespace tq::kernels::cpu
