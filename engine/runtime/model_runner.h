// Executes a ScheduleOutput: one batched forward pass, then sampling.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/runtime/model_executor.h"
#include "engine/runtime/schedule_output.h"
#include "engine/sampling/sampler.h"
#include "engine/structured/token_mask.h"

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
/// (sampler RNG, grammar matcher) from ScheduleOutput::new_requests until the
/// id appears in finished_ids, so a preempted and recomputed sequence
/// continues the same random stream; the token history (penalties, prompt
/// logprobs) is read from ScheduledSequence::tokens, never copied.
/// Logprobs are of the raw model distribution (log_softmax of the logits, as
/// vLLM v1 reports them by default).
///
/// Sampling path (docs/engine.md "Sampling from candidates"): kHost copies
/// every logit row to the host; kCandidates keeps the logits in backend
/// memory, runs Backend::LogitsTopK on the rows of sequences without
/// penalties and copies only those candidates, plus the full row of a
/// sequence whose candidates cannot decide exactly (same tokens, logprobs and
/// RNG stream as kHost). kAuto picks kCandidates on a non-CPU backend with
/// vocab >= kCandidateSamplingMinVocab and no tensor parallelism. Rows with
/// a grammar (SamplingParams::grammar) always take the full row: their mask
/// sets disallowed logits to -inf on the host before the Sampler runs.
enum class SamplingPath : uint8_t { kAuto, kHost, kCandidates };
constexpr int32_t kCandidateSamplingMinVocab = 32768;
/// Candidates per row when no request needs more (top_k, logprobs): the
/// sorted part of the draw (kSortedDrawRanks) with room for ties and top-p.
constexpr int32_t kDefaultSamplingCandidates = 2 * kSortedDrawRanks;

class LlamaModelRunner : public ModelRunner {
 public:
  /// kCandidates under tensor parallelism falls back to kHost (the gathered
  /// logits are not in row layout on the device).
  /// Runs every step through `executor` (not owned; it must outlive the
  /// runner, and have its KV cache set).
  explicit LlamaModelRunner(ModelExecutor* executor, SamplingPath path = SamplingPath::kAuto);
  ModelOutput Execute(const ScheduleOutput& scheduled) override;
  /// Rows sampled through candidates, and how many of them needed the full
  /// row (for tests and benchmarks).
  int64_t candidate_rows() const { return candidate_rows_; }
  int64_t full_row_fallbacks() const { return full_row_fallbacks_; }

 private:
  struct RequestState {
    explicit RequestState(const NewRequestData& data)
        : sampler(data.sampling),
          num_logprobs(data.num_logprobs),
          prompt_logprobs(data.prompt_logprobs) {
      if (data.sampling.grammar) {
        matcher = std::make_unique<structured::GrammarMatcher>(data.sampling.grammar);
      }
    }
    Sampler sampler;
    std::unique_ptr<structured::GrammarMatcher> matcher;  // structured output, else null
    int32_t num_logprobs;
    bool prompt_logprobs;
    int32_t prompt_logprobs_done = 1;  // next prompt token that needs a logprob
  };

  // Where one scheduled sequence's tokens and logit rows sit in this step's batch.
  struct SequenceRows {
    RequestState* state = nullptr;
    int32_t first_token = 0, num_tokens = 0;
    int32_t first_prompt_row = 0, num_prompt_rows = 0, first_prompt_token = 0;
    int32_t sample_row = -1;  // -1: the sequence does not sample this step
    bool candidates = false;  // sampled from LogitsTopK candidates
  };

  // The candidates of the first `rows` logit rows (LogitsTopK outputs).
  struct CandidateRows {
    int32_t rows = 0, k = 0;
    std::vector<int32_t> ids;
    std::vector<float> values;
    std::vector<double> sum_exp, sum_exp_scaled;
    LogitCandidates Row(int32_t r, int32_t vocab) const;
  };
  void ComputeCandidates(const std::vector<RequestState*>& states);

  // Execute's steps, in order.
  void UpdateRequestStates(const ScheduleOutput& scheduled);
  void FlattenBatch(const ScheduleOutput& scheduled);     // batch_, rows_
  void AssignLogitRows(const ScheduleOutput& scheduled);  // batch_.logit_indices
  void RunForward();                                      // logits_ (and cand_)
  void ScorePrompt(const ScheduledSequence& s, const SequenceRows& rows, SequenceResult& result);
  void SampleNext(const ScheduledSequence& s, const SequenceRows& rows, SequenceResult& result);
  void FetchRows(int32_t first, int32_t count);  // logit rows to the host copy
  std::span<float> LogitRow(int32_t r);

  ModelExecutor* executor_;
  int32_t vocab_;
  bool use_candidates_ = false;
  std::unordered_map<SeqId, std::unique_ptr<RequestState>> requests_;
  ForwardBatch batch_;                           // reused between steps
  std::vector<SequenceRows> rows_;               // this step's, index-aligned with sequences
  std::vector<RequestState*> candidate_states_;  // this step's sampling rows, in row order
  std::vector<float> logits_;   // [logit rows, vocab], host copies of the rows needed
  std::vector<uint64_t> mask_;  // a constrained row's allowed tokens (reused)
  CandidateRows cand_;
  // LogitsTopK inputs and outputs in backend memory, grown on demand.
  kernels::BackendBuffer dev_inv_t_, dev_ids_, dev_values_, dev_sums_;
  int64_t candidate_rows_ = 0, full_row_fallbacks_ = 0;
};

/// log_softmax of `logits` at `token`, and the top `k` tokens (descending,
/// ties by lower id). k <= 0 gives no top list.
PositionLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int32_t k);

/// ComputeLogprobs from a row's candidates (same values, bit for bit, when
/// the sums come from the CPU backend), or nullopt when they cannot tell:
/// `token` is not a candidate, the top-k list reaches past them, or the
/// maximum is not finite.
std::optional<PositionLogprobs> LogprobsFromCandidates(const LogitCandidates& c, int32_t token,
                                                       int32_t k);

}  // namespace tq
