// CUDA graphs for decode steps (issue 6 item 4; docs/cuda.md "CUDA graphs").
// A decode step of a small model is launch-bound (~10 kernels per layer), so
// as vLLM and TensorRT-LLM do, decode-only batches are padded to a fixed
// bucket size and replayed from a graph captured once per bucket.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace tq {

class LlamaModel;
class PagedKvCache;
struct ForwardBatch;

/// Batch sizes a graph is captured for, ascending: 1, 2, 4, then multiples
/// of 8 up to max_batch, and max_batch itself when it is none of those (the
/// sizes of vLLM's cudagraph_capture_sizes). Empty for max_batch <= 0.
std::vector<int32_t> DecodeGraphBuckets(int32_t max_batch);

/// The smallest bucket >= num_seqs, or -1 when num_seqs exceeds them all
/// (or is < 1): that batch runs eagerly.
int32_t PickDecodeBucket(const std::vector<int32_t>& buckets, int32_t num_seqs);

/// Whether `b` is a decode batch a graph can run: every sequence has exactly
/// one token, in sequence order (token_seq[t] == t), the logits of every
/// token are wanted in order (logit_indices[t] == t), and its block tables
/// are at most max_blocks_per_seq wide. Prefill and mixed batches are not.
bool IsGraphDecodeBatch(const ForwardBatch& b, int32_t max_blocks_per_seq);

/// The int32 inputs of one bucket-sized graph step, packed into one buffer
/// so that a step costs one host-to-device copy:
///   [ids | positions | token_seq | slots]  each [bucket]
///   [block_tables]                         [bucket, max_blocks_per_seq]
struct DecodeGraphLayout {
  int32_t bucket = 0;
  int32_t max_blocks_per_seq = 0;

  size_t ids() const { return 0; }
  size_t positions() const { return static_cast<size_t>(bucket); }
  size_t token_seq() const { return 2 * static_cast<size_t>(bucket); }
  size_t slots() const { return 3 * static_cast<size_t>(bucket); }
  size_t block_tables() const { return 4 * static_cast<size_t>(bucket); }
  size_t size() const { return block_tables() + static_cast<size_t>(bucket) * max_blocks_per_seq; }
};

/// Writes `b` (IsGraphDecodeBatch) padded to layout.bucket rows into *packed
/// (resized to layout.size()). Row r < num_seqs is sequence r, its block
/// table widened with -1; padding rows are harmless: token id 0, position -1
/// (PagedAttention reads nothing and outputs zeros), slot -1 (KvWrite skips
/// it), token_seq r and a block table of -1. Throws std::invalid_argument
/// when b has more sequences than the bucket or wider block tables.
void PadDecodeBatch(const ForwardBatch& b, const DecodeGraphLayout& layout,
                    std::vector<int32_t>* packed);

/// Runs decode batches of one LlamaModel through per-bucket graphs. Thread
/// ownership: the model's (the engine thread). Memory: one packed input
/// buffer of the largest bucket, plus what the backend keeps per graph.
///
/// The first eligible step prepares every bucket, largest first: one eager
/// run of an all-padding batch (which writes no KV: it sizes the backend's
/// scratch buffers, uploads the tq codec mirrors and loads the kernels, none
/// of which a capture may do), then the capture. When the model's
/// activation buffers or the backend's scratch grow later (a longer prefill
/// chunk) or another KV cache is passed, the graphs are stale and are
/// prepared again at the next step. A capture that fails turns graphs off
/// (disabled_reason) rather than failing the step.
class DecodeGraphRunner {
 public:
  /// max_blocks_per_seq: the fixed block-table width every graph reads
  /// (⌈max_model_len / block_size⌉); it also fixes the split-K count of the
  /// decode attention at its maximum context. With eager_fallback, a backend
  /// without graphs (the CPU) runs the padded bucket steps eagerly, so the
  /// padding is testable without a GPU; without it such a backend leaves
  /// every step to the model's eager path.
  DecodeGraphRunner(kernels::Backend* backend, int32_t max_batch, int32_t max_blocks_per_seq,
                    bool eager_fallback = false);

  /// Runs `batch` from the graph of its bucket and writes the logits of its
  /// tokens into *logits ([num_tokens, vocab]; null: left in the model's
  /// device_logits()) when IsGraphDecodeBatch holds
  /// and a bucket fits; returns false, having run nothing, otherwise (the
  /// caller runs the batch eagerly). The caller has checked the batch.
  bool TryForward(LlamaModel& model, const ForwardBatch& batch, PagedKvCache& cache,
                  std::vector<float>* logits);

  const std::vector<int32_t>& buckets() const { return buckets_; }
  /// Steps run through a graph (or its eager fallback), per bucket.
  const std::map<int32_t, int64_t>& steps_per_bucket() const { return steps_; }
  /// How many times the graphs were (re)captured.
  int32_t num_prepares() const { return num_prepares_; }
  /// Why graphs are off for good ("" while they are not): a capture failed
  /// (the error, also printed once to stderr) and every step runs eagerly.
  const std::string& disabled_reason() const { return disabled_reason_; }

 private:
  void Prepare(LlamaModel& model, PagedKvCache& cache);
  void RunBucket(LlamaModel& model, PagedKvCache& cache, int32_t bucket);

  kernels::Backend* backend_;
  std::vector<int32_t> buckets_;
  int32_t max_blocks_per_seq_;
  bool eager_fallback_;
  bool unsupported_ = false;       // the backend has no graphs and no fallback is wanted
  kernels::BackendBuffer inputs_;  // packed, the largest bucket's size
  std::vector<int32_t> packed_;    // host image of inputs_
  std::vector<int32_t> identity_;  // logit rows 0..bucket-1
  std::map<int32_t, std::unique_ptr<kernels::BackendGraph>> graphs_;
  uint64_t model_epoch_ = 0;          // the model's workspace epoch at the last Prepare
  const void* cache_pool_ = nullptr;  // the KV pool the graphs write (layer 0's K)
  std::string disabled_reason_;
  bool prepared_ = false;
  std::map<int32_t, int64_t> steps_;
  int32_t num_prepares_ = 0;
};

}  // namespace tq
