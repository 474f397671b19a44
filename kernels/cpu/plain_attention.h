// Paged attention over the uncompressed KV formats (fp32, fp16, bf16) on the
// CPU: records read in place (fp16/bf16 widened in registers), query rows of
// one sequence attended in blocks that share the keys and values they read.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "kernels/op_params.h"

namespace tq::kernels::cpu {

/// True for the KV formats PlainPagedAttention handles: records are the
/// elements themselves (no parameters, keys stored after RoPE).
inline bool IsPlainKvDtype(KvDtype d) {
  return d == KvDtype::kF32 || d == KvDtype::kF16 || d == KvDtype::kBF16;
}

/// Query rows [first, first + rows) of a batch, attended together.
struct AttentionRowBlock {
  int32_t first = 0;
  int32_t rows = 0;
};

/// Splits a batch's query rows (token_seq/token_pos: [num_tokens], host) into
/// runs of up to 8 consecutive rows of one sequence; a padding row (position
/// < 0) is a block of its own. Depends only on the batch layout.
std::vector<AttentionRowBlock> PlanRowBlocks(const int32_t* token_seq, const int32_t* token_pos,
                                             int32_t num_tokens);

/// PagedAttention (see PagedAttentionParams) for a cache whose dtype is
/// IsPlainKvDtype; host memory, work split over (row block, KV head) pairs on
/// `pool`. Each output row equals that of the row attended alone, bit for bit,
/// whatever the batch or the thread count.
void PlainPagedAttention(const PagedAttentionParams& p, ThreadPool& pool);

}  // namespace tq::kernels::cpu
