// Embedding lookup for fp32, f16 and bf16 tables (16-bit tables are what
// mixed-precision checkpoints keep for embeddings, issue 7) and int8/int4
// ones (gather-dequantize rows, issue 22), row-major or in the layout (int
// tiles, column panels) that a tied table shares with lm_head.
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/weight_decode.h"
#include "kernels/op_checks.h"

// This level's part of the file (isa_begin.h): everything above is baseline code.
#include "kernels/cpu/isa_begin.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {

void Embedding(const EmbeddingParams& p, ThreadPool& pool) {
  const WeightDtype d = p.table_dtype;
  // A table tied to lm_head is in lm_head's layout (column panels, int
  // tiles); DecodeWeightRow reads a row of any of them in place.
  const WeightDtype logical = LogicalWeightDtype(d);
  const bool integer = logical == WeightDtype::kInt8 || logical == WeightDtype::kInt4;
  if (logical != WeightDtype::kF32 && logical != WeightDtype::kF16 &&
      logical != WeightDtype::kBF16 && !integer) {
    throw std::invalid_argument("cpu Embedding: table dtype " + WeightDtypeName(d) +
                                " is not supported (fp32, fp16, bf16, int8 or int4)");
  }
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    if (p.ids[t] < 0 || p.ids[t] >= p.vocab) {
      throw std::invalid_argument("cpu Embedding: token id " + std::to_string(p.ids[t]) +
                                  " at position " + std::to_string(t) + " is outside [0, " +
                                  std::to_string(p.vocab) + ")");
    }
  }
  // A table row is a one-row weight of the same dtype: reuse the row decoder.
  WeightView table;
  table.data = p.table;
  table.dtype = p.table_dtype;
  table.out_features = p.vocab;
  table.in_features = p.hidden;
  if (integer) {
    table.scales = p.scales;
    table.zeros = p.zeros;
    table.group_size = p.group_size;
    CheckWeightView("cpu", "Embedding", table);  // scales, groups, whole tiles
  }
  pool.ParallelFor(p.num_tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      DecodeWeightRow(table, p.ids[t], p.out + t * static_cast<int64_t>(p.hidden));
    }
  });
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
