// Executes a ScheduleOutput: one batched forward pass, then sampling.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/model/llama_model.h"
#include "engine/runtime/schedule_output.h"
#include "engine/sampling/sampler.h"

namespace tq {

/// Runs the steps the scheduler plans (DESIGN.md "Data flow"). Thread
/// ownership: the engine thread. Execute returns one SequenceResult per
/// scheduled sequence, in order.
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual ModelOutput Execute(const ScheduleOutput& scheduled) = 0;
};

/// The Llama runner: all scheduled sequences' tokens go through ONE
/// LlamaModel::Forward (varlen tokens, slot mapping, block tables), then each
/// sampling sequence draws from its own Sampler. Keeps per-request state
/// (sampler RNG, prompt and output ids for the penalties) from
/// ScheduleOutput::new_requests until the id appears in finished_ids, so a
/// preempted and recomputed sequence continues the same random stream.
/// Logprobs are of the raw model distribution (log_softmax of the logits, as
/// vLLM v1 reports them by default).
class LlamaModelRunner : public ModelRunner {
 public:
  LlamaModelRunner(LlamaModel* model, PagedKvCache* cache);
  ModelOutput Execute(const ScheduleOutput& scheduled) override;

 private:
  struct RequestState {
    explicit RequestState(const NewRequestData& data)
        : sampler(data.sampling),
          prompt(data.prompt_ids),
          num_logprobs(data.num_logprobs),
          prompt_logprobs(data.prompt_logprobs) {}
    Sampler sampler;
    std::vector<int32_t> prompt;
    std::vector<int32_t> output;
    int32_t num_logprobs;
    bool prompt_logprobs;
    int32_t prompt_logprobs_done = 1;  // next prompt token that needs a logprob
  };

  LlamaModel* model_;
  PagedKvCache* cache_;
  std::unordered_map<SeqId, std::unique_ptr<RequestState>> requests_;
  ForwardBatch batch_;         // reused between steps
  std::vector<float> logits_;  // [logit rows, vocab]
};

/// log_softmax of `logits` at `token`, and the top `k` tokens (descending,
/// ties by lower id). k <= 0 gives no top list.
PositionLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int32_t k);

}  // namespace tq
