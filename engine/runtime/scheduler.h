// Continuous-batching scheduler: which sequences run each step, and how many
// tokens each (DESIGN.md "Data flow", one token-budget rule as vLLM v1).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/runtime/engine_stats.h"
#include "engine/runtime/request.h"
#include "engine/runtime/schedule_output.h"

namespace tq {

/// Limits the scheduler enforces.
struct SchedulerConfig {
  int32_t max_num_seqs = 256;            // running sequences at once
  int32_t max_num_batched_tokens = 512;  // tokens computed per step (all sequences)
  int32_t max_model_len = 0;             // prompt + output tokens of one sequence
  int32_t block_size = 16;               // tokens per KV block
  int32_t num_blocks = 0;                // KV blocks in the pool
  std::vector<int32_t> eos_token_ids;
  // Automatic prefix caching (docs/engine.md "Prefix cache"): full blocks are
  // registered under a hash chained from prefix_cache_seed (PrefixCacheSeed:
  // KV dtype + calibration fingerprint) and reused by later prompts.
  bool enable_prefix_caching = false;
  BlockHash prefix_cache_seed = 0;
};

/// What changed for one request in a step (or on abort): the output delta
/// for its stream, plus timings for the metrics.
struct RequestUpdate {
  std::string request_id;
  EngineOutput output;
  std::optional<double> ttft_seconds;  // set on the request's first token
  std::optional<double> itl_seconds;   // set on each later token
  std::optional<FinishedRequestStats> finished;
};

/// Owns every request's sequence state and the KV block pool. Each step:
/// Schedule() -> ScheduleOutput (plain value) -> the runner -> Update().
///
/// The rule: walk the running sequences in priority order and give each
/// min(its uncomputed tokens, the remaining budget) — a prompt is prefilled in
/// chunks, a decoding sequence takes one token — then admit waiting sequences
/// (max_num_seqs, budget and free blocks permitting). When a running sequence
/// needs a block and none is free, the lowest-priority, newest running
/// sequence is preempted: its blocks are freed and it goes back to the
/// waiting queue to be recomputed (prompt + output so far); no sequence is
/// admitted in a step that preempted. Order is (priority, arrival): lower
/// priority values first, then first-come first-served.
///
/// Prefix caching (config.enable_prefix_caching): a block is registered in
/// the pool's hash table when the step that computes its last position is
/// planned (so a sequence admitted later in the same step, such as the
/// second of n choices, already finds it: the forward pass writes a layer's
/// K/V before any attention of that layer reads them). At admission (first,
/// or again after preemption) the longest run of the sequence's full blocks
/// found in the table is attached (refcount + 1) and computation starts
/// after it; at least the last token is always computed. Requests with
/// prompt logprobs skip the lookup (they need the logits of every prompt
/// position). Free capacity counts cached blocks (BlockPool::num_free).
///
/// Thread ownership: the engine thread only. Running out of blocks is a normal
/// outcome; a request that can never fit is refused before it gets here.
class Scheduler {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Scheduler(const SchedulerConfig& config);
  ~Scheduler();

  /// Queues a request (validated by the caller; its prompt fits
  /// max_model_len). Returns its SeqId.
  SeqId AddRequest(EngineRequest request, Clock::time_point arrival);
  /// Removes a waiting or running request and frees its blocks now; returns
  /// its final update (finish `reason`), or nullopt for an unknown id.
  std::optional<RequestUpdate> Abort(const std::string& request_id, Clock::time_point now,
                                     FinishReason reason = FinishReason::kAbort);

  /// Plans one step. Allocates the blocks the planned tokens need.
  ScheduleOutput Schedule(Clock::time_point now);
  /// Applies the runner's results for `scheduled`: appends sampled tokens,
  /// finishes sequences (EOS or stop token -> kStop; max_tokens or
  /// max_model_len -> kLength) and frees their blocks. Returns one update per
  /// request with news, in batch order.
  std::vector<RequestUpdate> Update(const ScheduleOutput& scheduled, const ModelOutput& output,
                                    Clock::time_point now);

  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  const BlockPool& block_pool() const { return pool_; }
  /// The pool itself, for EngineCore::idle_block_pool only.
  BlockPool& mutable_block_pool() { return pool_; }
  /// Walks every block table and the pool: each block's refcount equals the
  /// number of tables holding it, waiting sequences hold no blocks, and
  /// BlockPool::CheckInvariants holds. Returns "" when all hold, else what is
  /// wrong (tests call it after each step).
  std::string CheckBlockAccounting() const;
  const SchedulerConfig& config() const { return config_; }
  /// Request ids of live (waiting or running) requests.
  std::vector<std::string> LiveRequestIds() const;
  /// Whether `request_id` is live (waiting or running).
  bool HasRequest(const std::string& request_id) const {
    return by_request_id_.count(request_id) > 0;
  }

 private:
  struct Sequence;
  Sequence* Find(SeqId id);
  void InsertSorted(std::vector<Sequence*>& queue, Sequence* seq);
  void Preempt(Sequence* seq, ScheduleOutput& out);
  void ScheduleChunk(Sequence* seq, int32_t num_tokens, ScheduleOutput& out, Clock::time_point now);
  // The longest run of seq's full blocks in the prefix cache, leaving at least
  // its last token to compute (empty when caching is off or not allowed).
  std::vector<int32_t> FindCachedPrefix(Sequence* seq);
  // Admits waiting_.front() with up to `budget` tokens, attaching its cached
  // prefix; false (nothing changed) when its blocks do not fit.
  bool Admit(Sequence* seq, int32_t budget, ScheduleOutput& out, Clock::time_point now,
             int32_t* scheduled);
  // Aborts unless every block that positions [from, to) of seq write is its
  // own (refcount 1) and unregistered: a shared block is never written again.
  void CheckWritable(const Sequence* seq, int32_t from, int32_t to) const;
  // Registers seq's blocks that are full once positions [0, end) are computed.
  void RegisterFullBlocks(Sequence* seq, int32_t end);
  // Ends a sequence: frees its blocks and removes it from every queue.
  FinishedRequestStats Finish(Sequence* seq, FinishReason reason, Clock::time_point now);

  SchedulerConfig config_;
  BlockPool pool_;
  std::vector<Sequence*> running_;  // sorted by (priority, arrival)
  std::vector<Sequence*> waiting_;  // sorted by (priority, arrival)
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  std::unordered_map<std::string, SeqId> by_request_id_;
  std::vector<SeqId> pending_finished_;  // for the next ScheduleOutput::finished_ids
  SeqId next_id_ = 0;
};

}  // namespace tq
