// The values passed between the scheduler and the model runner each step
// (DESIGN.md "Data flow"): plain data, except ScheduledSequence::tokens, a
// view of the scheduler's token list (both run on the engine thread, so the
// runner reads the one copy instead of keeping its own, as vLLM v1 must
// across its process boundary).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/request.h"
#include "engine/sampling/sampling_params.h"

namespace tq {

/// Engine-internal id of a request (dense, assigned at arrival, never reused).
using SeqId = int64_t;

/// Sent to the runner the first time a request is scheduled, so that it can
/// keep per-request state (sampler RNG, grammar matcher) across steps and
/// preemptions, as vLLM v1's NewRequestData. The tokens are not copied: each
/// step's ScheduledSequence::tokens shows them.
struct NewRequestData {
  SeqId seq_id = 0;
  SamplingParams sampling;
  int32_t num_logprobs = -1;
  bool prompt_logprobs = false;
};

/// One sequence's share of a step: compute the K/V (and logits) of
/// token_ids at positions [start_position, start_position + size).
struct ScheduledSequence {
  SeqId seq_id = 0;
  std::vector<int32_t> token_ids;
  int32_t start_position = 0;
  std::vector<int32_t> block_table;   // covers every position up to the chunk's end
  int32_t num_prompt_tokens = 0;      // of the original prompt (penalties, prompt logprobs)
  bool sample = false;                // the chunk reaches the sequence's end: sample one token
  int32_t num_new_prompt_tokens = 0;  // prompt tokens computed for the first time (metrics;
                                      // recompute after preemption is not new)
  /// Every token of the sequence so far: the whole prompt ([0,
  /// num_prompt_tokens), chunks not yet computed included) then the sampled
  /// outputs; token_ids is a slice of it, and a chunk that samples ends it. A view of the
  /// scheduler's list, valid until Scheduler::Update for this step (engine
  /// thread); the runner reads penalty history and prompt-logprob targets here.
  std::span<const int32_t> tokens;
};

/// What one step runs. The scheduler's only message to the runner.
struct ScheduleOutput {
  std::vector<NewRequestData> new_requests;
  std::vector<ScheduledSequence> sequences;  // in batch order
  std::vector<SeqId> finished_ids;           // ended since the last step: drop their state
  std::vector<SeqId> preempted_ids;          // preempted this step (blocks freed)
  int32_t num_batched_tokens = 0;
  // Prefix cache lookups of requests admitted for the first time in this
  // step (metrics, vLLM's meaning): prompt tokens queried and found cached.
  int32_t prefix_cache_queries = 0;
  int32_t prefix_cache_hits = 0;

  bool empty() const { return sequences.empty(); }
};

/// The runner's answer, index-aligned with ScheduleOutput::sequences.
struct SequenceResult {
  int32_t token = -1;         // sampled token; -1 when the sequence did not sample
  PositionLogprobs logprobs;  // when requested and sampled
  // Prompt logprobs of this chunk's scored prompt tokens, in order (when
  // requested): the scheduler appends them to the request's list.
  std::vector<PositionLogprobs> prompt_logprobs;
};

struct ModelOutput {
  std::vector<SequenceResult> results;
};

}  // namespace tq
