// The CPU kernels compiled once per instruction-set level (cpu_isa.h): their
// list, the table of one level's entry points, and the per-level namespaces.
// Each kernel source defines its functions in tq::kernels::cpu::TQ_CPU_ISA_NS
// (isa_begin.h); the dispatchers of the same names in tq::kernels::cpu
// (cpu_dispatch.cc) call the active level's table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_topk.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/cpu/plain_attention.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_decode.h"
#include "kernels/op_params.h"

/// X(return type, name, (parameters), (arguments)) for every dispatched kernel.
#define TQ_CPU_KERNELS(X)                                                                       \
  X(void, MatMul, (const MatMulParams& p, ThreadPool& pool), (p, pool))                         \
  X(WeightDtype, PanelDtype, (const WeightView& w), (w))                                        \
  X(size_t, DenseWeightBytes, (const WeightView& w), (w))                                       \
  X(void, PackPanels, (const WeightView& w, void* packed), (w, packed))                         \
  X(void, MatMulPanels, (const MatMulParams& p, ThreadPool& pool), (p, pool))                   \
  X(void, MatMulPacked, (const MatMulParams& p, ThreadPool& pool), (p, pool))                   \
  X(bool, GemvSupported, (const MatMulParams& p), (p))                                          \
  X(void, Gemv, (const MatMulParams& p, ThreadPool& pool), (p, pool))                           \
  X(void, DecodeWeightRow, (const WeightView& w, int64_t o, float* dst), (w, o, dst))           \
  X(void, Embedding, (const EmbeddingParams& p, ThreadPool& pool), (p, pool))                   \
  X(void, RmsNorm, (const RmsNormParams& p, ThreadPool& pool), (p, pool))                       \
  X(void, Rope, (const RopeParams& p, ThreadPool& pool), (p, pool))                             \
  X(void, SiluMul, (const SiluMulParams& p, ThreadPool& pool), (p, pool))                       \
  X(void, Softmax, (float* s, int32_t n), (s, n))                                               \
  X(void, PagedAttention, (const PagedAttentionParams& p, ThreadPool& pool), (p, pool))         \
  X(std::vector<AttentionRowBlock>, PlanRowBlocks,                                              \
    (const int32_t* token_seq, const int32_t* token_pos, int32_t num_tokens),                   \
    (token_seq, token_pos, num_tokens))                                                         \
  X(void, PlainPagedAttention, (const PagedAttentionParams& p, ThreadPool& pool), (p, pool))    \
  X(void, KvWrite, (const KvWriteParams& p), (p))                                               \
  X(void, EncodeRecord,                                                                         \
    (const float* x, const KvLayout& layout, const TqLayerCodec* tq, KvSide side, int32_t head, \
     uint8_t* code, uint8_t* param, float* scratch),                                            \
    (x, layout, tq, side, head, code, param, scratch))                                          \
  X(void, DecodeRecord,                                                                         \
    (const uint8_t* code, const uint8_t* param, const KvLayout& layout, const TqLayerCodec* tq, \
     KvSide side, int32_t head, float* out),                                                    \
    (code, param, layout, tq, side, head, out))                                                 \
  X(void, LogitsTopKRow,                                                                        \
    (const float* logits, int32_t vocab, int32_t k, float inv_temperature, int32_t* ids,        \
     float* values, double* sum_exp, double* sum_exp_scaled, std::vector<float>* scratch),      \
    (logits, vocab, k, inv_temperature, ids, values, sum_exp, sum_exp_scaled, scratch))         \
  X(void, LogitsTopK, (const LogitsTopKParams& p, ThreadPool& pool), (p, pool))

#define TQ_CPU_KERNEL_DECLARE(ret, name, params, args) ret name params;
#define TQ_CPU_KERNEL_POINTER(ret, name, params, args) ret(*name) params;

namespace tq::kernels::cpu {

/// One level's entry points (function pointers into its namespace).
struct CpuKernelTable {
  TQ_CPU_KERNELS(TQ_CPU_KERNEL_POINTER)
};

// The levels' namespaces (which exist depends on the build: see
// kernels/CMakeLists.txt). Each defines every kernel and KernelTable().
#define TQ_CPU_LEVEL_NAMESPACE(ns)      \
  namespace ns {                        \
  TQ_CPU_KERNELS(TQ_CPU_KERNEL_DECLARE) \
  const CpuKernelTable& KernelTable();  \
  }
TQ_CPU_LEVEL_NAMESPACE(isa_baseline)
TQ_CPU_LEVEL_NAMESPACE(isa_avx2)
TQ_CPU_LEVEL_NAMESPACE(isa_avx512)
TQ_CPU_LEVEL_NAMESPACE(isa_native)
#undef TQ_CPU_LEVEL_NAMESPACE

}  // namespace tq::kernels::cpu
