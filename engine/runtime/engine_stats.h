// What the engine reports about itself, for /metrics, /health and logs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/request.h"

namespace tq {

/// Fixed facts about the loaded engine (they do not change after start-up).
/// What one tensor-parallel rank holds (the start-up log line per rank and
/// the per-rank memory metrics).
struct RankMemory {
  int rank = 0;
  std::map<std::string, size_t> weight_bytes;  // the rank's weights by precision ("fp32", ...)
  size_t kv_cache_bytes = 0;                   // the rank's KV pool (its KV heads)
  int64_t kv_capacity_tokens = 0;              // tokens the pool holds (the same on every rank)
  int cuda_device = -1;                        // the CUDA device it computes on; -1 on the CPU
};

struct EngineInfo {
  std::string model_dir;
  std::string kv_cache_dtype;  // "tq3", "fp16", ...
  int32_t block_size = 0;      // tokens per KV block
  int32_t num_kv_blocks = 0;
  size_t kv_bytes_per_block = 0;  // all layers, K and V
  size_t kv_cache_bytes = 0;      // the whole pool
  int64_t kv_capacity_tokens = 0;
  int32_t max_model_len = 0;
  int32_t max_num_seqs = 0;
  int32_t max_num_batched_tokens = 0;
  bool enable_prefix_caching = false;
  int32_t vocab_size = 0;
  int32_t max_logprobs = 20;                   // EngineOptions::max_logprobs
  std::map<std::string, size_t> weight_bytes;  // by precision ("fp32", "fp16", "int4", ...)
  std::string weights_summary;                 // LlamaWeights::MemorySummary(), for the log
  std::string kv_calibration_source;
  // --kv-cache-dtype auto: what it measured and chose (KvDtypeChoice::Describe;
  // "" when the dtype came from the flag) and each candidate's perplexity ratio
  // to an fp32 cache (the tqserve_kv_cache_quality_ratio gauge), by dtype name.
  std::string kv_dtype_choice;
  std::vector<std::pair<std::string, double>> kv_quality_ratios;
  std::string device = "cpu";
  // The CPU kernels' instruction-set level (kernels/cpu/cpu_isa.h CpuIsaName:
  // "x86-64", "avx2", "avx512", "avx512-vnni", "native"); they run on every
  // device (sampling, and everything on --device cpu).
  std::string cpu_isa;
  // Tensor-parallel ranks; the byte counts above are their sums.
  std::vector<RankMemory> ranks;
  std::string device_note;  // why --device auto runs on the CPU; "" otherwise
};

/// A snapshot of the engine's gauges, taken after a step (cheap to copy).
struct EngineStats {
  bool alive = false;  // the engine loop runs and has not failed
  bool draining = false;
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int32_t kv_blocks_used = 0;    // refcount > 0
  int32_t kv_blocks_cached = 0;  // refcount 0, kept for prefix cache hits
  int32_t kv_blocks_free = 0;    // neither (used + cached + free = num_kv_blocks)
  int64_t num_steps = 0;
  // Seconds since the engine thread last began a loop iteration (taking the
  // queued commands, then one step) while it has work; 0 while it sleeps for
  // want of work. A step that never returns makes it grow without bound (a
  // wedged engine: the liveness probes' input). Computed when Stats() is read.
  double busy_seconds = 0;
};

/// Timings of a finished request, in seconds (steady clock).
struct FinishedRequestStats {
  FinishReason finish = FinishReason::kNone;
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  double queue_seconds = 0;  // arrival -> first scheduled
  double e2e_seconds = 0;    // arrival -> finished
  // Prefill compute time (first scheduled -> first token) and decode time
  // (first token -> finished); 0 when there was no token.
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

/// Receives engine events for counters and histograms (Prometheus in the
/// server). Called on the engine thread, so implementations must be cheap and
/// thread-safe against concurrent scrapes. The default does nothing.
class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  /// A step ran: prompt tokens prefilled for the first time (recompute after
  /// preemption is not counted again) and tokens generated.
  virtual void OnStep(int32_t /*prompt_tokens*/, int32_t /*generated_tokens*/) {}
  /// A request's first token: arrival -> first token (TTFT).
  virtual void OnFirstToken(double /*ttft_seconds*/) {}
  /// Each later token: time since the request's previous token (ITL/TPOT).
  virtual void OnInterToken(double /*itl_seconds*/) {}
  /// Prefix cache lookups of the requests admitted for the first time in a
  /// step: prompt tokens queried and prompt tokens found cached (vLLM's
  /// prefix_cache_queries / prefix_cache_hits). Not called when caching is off.
  virtual void OnPrefixCache(int32_t /*queried_tokens*/, int32_t /*hit_tokens*/) {}
  /// A running sequence was preempted (blocks freed, recomputed later).
  virtual void OnPreemption() {}
  /// A request ended (any reason, aborts included).
  virtual void OnRequestFinished(const FinishedRequestStats& /*stats*/) {}
};

}  // namespace tq
