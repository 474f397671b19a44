// The executor layer (vLLM v1's Executor -> Worker): one Worker per
// tensor-parallel rank, run together for each forward step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/llama_model.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/rank_executor.h"
#include "kernels/backend.h"

namespace tq {

/// One rank's pieces, owned together: its backend (the CPU, or CUDA device
/// r), its model shard (weights of the rank's heads and columns: TpPlan) and
/// the KV cache of its KV heads (null until the executor's cache is set).
/// Members are declared so that destruction runs cache, model, backend (each
/// lives in the backend's memory).
struct Worker {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<PagedKvCache> cache;
};

/// Every rank's KV cache for one purpose, rank order ([world_size]); all the
/// same layout, so one block table serves every rank.
using RankCaches = std::vector<std::unique_ptr<PagedKvCache>>;

/// Runs each forward step on every rank: owns the workers, the communicators
/// that join their shards (all-reduce of o_proj/down_proj, all-gather of the
/// lm_head shards: docs/parallelism.md) and the rank threads (rank 0 is the
/// calling thread; RankExecutor). Tensor parallelism 1 is the same code with
/// one worker and no communicator. The engine (LlamaModelRunner) talks to
/// this class only, never to a rank's model.
///
/// Thread ownership: one thread (the engine thread, or the loading thread
/// before it) calls everything; each rank's backend, model and communicator
/// are driven only from that rank's thread inside Forward.
class ModelExecutor {
 public:
  /// `workers` (at least one, each with backend and model; rank r's model
  /// planned for rank r of workers.size()) and their communicators
  /// (`comms[r]` is rank r's; empty for one rank, or one for TP=1 through
  /// NCCL in tests). Throws std::invalid_argument when they disagree.
  ModelExecutor(std::vector<Worker> workers, std::vector<std::unique_ptr<Communicator>> comms = {});
  ~ModelExecutor();
  ModelExecutor(const ModelExecutor&) = delete;
  ModelExecutor& operator=(const ModelExecutor&) = delete;

  int world_size() const { return static_cast<int>(workers_.size()); }
  Worker& worker(int rank) { return workers_.at(static_cast<size_t>(rank)); }
  const Worker& worker(int rank) const { return workers_.at(static_cast<size_t>(rank)); }

  /// Rank 0's model, backend and cache: where the full logits land, and what
  /// describes the whole model (config, vocabulary, KV layout; every rank's
  /// cache has the same layout). cache() throws std::logic_error before
  /// SetCaches.
  LlamaModel& model() const { return *workers_.front().model; }
  kernels::Backend& backend() const { return *workers_.front().backend; }
  bool has_cache() const { return workers_.front().cache != nullptr; }
  PagedKvCache& cache() const;

  /// New caches of `layout` (the rank's KV heads), one per rank on its
  /// backend; tq[r] is rank r's codec state (empty for non-tq dtypes). Throws
  /// std::bad_alloc when a backend is out of memory.
  RankCaches MakeCaches(const kernels::KvLayout& layout,
                        const std::vector<std::shared_ptr<const TqCodecState>>& tq,
                        int32_t sink_tokens) const;
  /// Gives each worker its cache (caches[r] to rank r). Throws
  /// std::invalid_argument unless there is one per rank, all one layout.
  void SetCaches(RankCaches caches);

  /// Runs `batch` on every rank with the workers' caches and returns the
  /// logits of batch.logit_indices as LlamaModel::Forward does (rank 0's,
  /// gathered; logits == nullptr leaves them in backend memory:
  /// device_logits()). A rank's failure aborts the others' collectives and
  /// is rethrown here.
  void Forward(const ForwardBatch& batch, std::vector<float>* logits);
  /// The same with `caches` (MakeCaches) instead of the workers' own: the
  /// loader's calibration and --kv-cache-dtype auto scoring.
  void Forward(const ForwardBatch& batch, const RankCaches& caches, std::vector<float>* logits);

  /// LlamaModel::device_logits of rank 0 (nullptr under tensor parallelism).
  const float* device_logits() const { return model().device_logits(); }

 private:
  // Runs `batch` on every rank (rank 0 on the calling thread) with
  // cache_of(rank) as that rank's cache; only rank 0 returns logits.
  void RunRanks(const ForwardBatch& batch, std::vector<float>* logits,
                const std::function<PagedKvCache&(size_t rank)>& cache_of);

  // Declared so that destruction runs rank threads, workers, communicators:
  // NCCL communicators enqueue on the workers' streams, and the threads drive
  // both.
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<Worker> workers_;
  std::unique_ptr<RankExecutor> rank_threads_;  // null for one rank
};

/// One forward step as PrefillSequence drives it: the batch in, its logits
/// out (host memory).
using ForwardStep = std::function<void(const ForwardBatch& batch, std::vector<float>* logits)>;

/// Runs tokens[begin, end) of one sequence (positions before `begin` already
/// cached, table covering all of `tokens`) in chunks of `chunk` tokens
/// through `forward`. With all_logits, *logits gets [end - begin, vocab];
/// else the last token's row.
void PrefillSequence(const ForwardStep& forward, const BlockTable& table,
                     std::span<const int32_t> tokens, int32_t begin, int32_t chunk, bool all_logits,
                     std::vector<float>* logits);
/// Receives one chunk's logits from the PrefillSequence overload below:
/// positions [first, first + rows) of the sequence, `logits` [rows, vocab]
/// row-major, valid only during the call.
using ChunkLogitsFn = std::function<void(int32_t first, int32_t rows, const float* logits)>;
/// PrefillSequence with every position's logits handed to `on_chunk` chunk
/// by chunk instead of gathered: scoring a sequence then holds
/// [chunk, vocab] floats, not [tokens, vocab] (at a 152K vocabulary that is
/// 0.6 MB per token).
void PrefillSequence(const ForwardStep& forward, const BlockTable& table,
                     std::span<const int32_t> tokens, int32_t begin, int32_t chunk,
                     const ChunkLogitsFn& on_chunk);
/// PrefillSequence on every rank of `executor`, with its workers' caches.
void PrefillSequence(ModelExecutor& executor, const BlockTable& table,
                     std::span<const int32_t> tokens, int32_t begin, int32_t chunk, bool all_logits,
                     std::vector<float>* logits);

}  // namespace tq
