#include "engine/runtime/offline_engine.h"

#include <chrono>
#include <string>

#include "engine/common/error.h"
#include "engine/runtime/engine_core.h"
#include "engine/runtime/model_loader.h"
#include "engine/runtime/request_stream.h"

namespace tq {
namespace {

// Returns a table's blocks to the pool on every exit path.
class ScopedBlockTable {
 public:
  ScopedBlockTable(BlockPool& pool, int32_t block_size) : pool_(pool), table_(block_size) {}
  ~ScopedBlockTable() { table_.Release(pool_); }
  BlockTable& get() { return table_; }

 private:
  BlockPool& pool_;
  BlockTable table_;
};

}  // namespace

OfflineEngine::OfflineEngine(const EngineOptions& options)
    : options_(options),
      loaded_(std::make_unique<LoadedModel>(LoadModel(options))),
      core_(MakeEngineCore(options_, *loaded_, nullptr)) {}

OfflineEngine::~OfflineEngine() = default;

const ModelFiles& OfflineEngine::files() const {
  return loaded_->files;
}
LlamaModel& OfflineEngine::model() {
  return loaded_->executor->model();
}
const Tokenizer& OfflineEngine::tokenizer() const {
  return *loaded_->tokenizer;
}
const PagedKvCache& OfflineEngine::kv_cache() const {
  return loaded_->executor->cache();
}
const BlockPool& OfflineEngine::block_pool() const {
  return core_->scheduler().block_pool();
}
int32_t OfflineEngine::max_model_len() const {
  return loaded_->max_model_len;
}

namespace {

// Steps `core` until every stream has delivered its finished output, passing
// each delta to on_output(index, output). A failed step, an error output or
// an exception from on_output aborts whatever is still live (its blocks come
// back) before the exception leaves.
void RunToCompletion(EngineCore& core, const std::vector<std::shared_ptr<RequestStream>>& streams,
                     const std::function<void(size_t, EngineOutput&)>& on_output) {
  std::vector<bool> done(streams.size(), false);
  size_t open = streams.size();
  try {
    while (open > 0) {
      const bool ran = core.Step();
      for (size_t i = 0; i < streams.size(); ++i) {
        if (done[i]) continue;
        std::optional<EngineOutput> out = streams[i]->Next(std::chrono::milliseconds(0));
        if (!out) continue;
        if (out->finished()) {
          done[i] = true;
          --open;
        }
        if (out->finish == FinishReason::kError) throw Error(out->error);
        on_output(i, *out);
      }
      if (!ran && open > 0) throw Error("the engine core stopped with requests unfinished");
    }
  } catch (...) {
    core.AbortAll();
    throw;
  }
}

}  // namespace

GenerationResult OfflineEngine::Generate(std::span<const int32_t> prompt,
                                         const SamplingParams& params,
                                         const std::function<void(int32_t)>& on_token) {
  CheckRequestIds(prompt, params, loaded_->max_model_len, files().config.vocab_size);
  EngineRequest request;
  request.request_id = "offline-" + std::to_string(next_request_++);
  request.prompt_ids.assign(prompt.begin(), prompt.end());
  request.sampling = params;
  const std::vector<std::shared_ptr<RequestStream>> streams = {std::make_shared<RequestStream>()};
  core_->AddRequest(std::move(request), streams[0], EngineCore::Clock::now());

  GenerationResult result;
  RunToCompletion(*core_, streams, [&](size_t, EngineOutput& out) {
    for (int32_t token : out.token_ids) {
      result.output_ids.push_back(token);
      if (on_token) on_token(token);
    }
    if (out.finished()) result.finish_reason = FinishReasonName(out.finish);
  });
  return result;
}

std::vector<std::vector<double>> OfflineEngine::ScorePrompts(
    std::span<const std::vector<int32_t>> prompts) {
  for (const std::vector<int32_t>& prompt : prompts) {
    CheckPromptIds(prompt, loaded_->max_model_len, files().config.vocab_size);
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  streams.reserve(prompts.size());
  for (const std::vector<int32_t>& prompt : prompts) {
    EngineRequest request;
    request.request_id = "offline-" + std::to_string(next_request_++);
    request.prompt_ids = prompt;
    request.sampling.max_tokens = 0;  // the prompt alone
    request.num_logprobs = 0;         // the prompt token's logprob, no top list
    request.prompt_logprobs = true;
    streams.push_back(std::make_shared<RequestStream>());
    core_->AddRequest(std::move(request), streams.back(), EngineCore::Clock::now());
  }
  std::vector<std::vector<double>> scores(prompts.size());
  RunToCompletion(*core_, streams, [&](size_t i, EngineOutput& out) {
    for (const PositionLogprobs& p : out.prompt_logprobs) scores[i].push_back(p.chosen_logprob);
  });
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (scores[i].size() + 1 != prompts[i].size()) {
      throw Error("prompt scoring returned " + std::to_string(scores[i].size()) +
                  " logprobs for a prompt of " + std::to_string(prompts[i].size()) + " tokens");
    }
  }
  return scores;
}

std::vector<float> OfflineEngine::PromptLogits(std::span<const int32_t> tokens) {
  CheckPromptIds(tokens, loaded_->max_model_len, files().config.vocab_size);
  BlockPool& pool = core_->idle_block_pool();
  ScopedBlockTable scoped(pool, loaded_->executor->cache().layout().block_size);
  BlockTable& table = scoped.get();
  if (!table.EnsureCapacity(pool, static_cast<int32_t>(tokens.size()))) {
    throw Error("KV cache too small for " + std::to_string(tokens.size()) + " tokens");
  }
  std::vector<float> all;
  PrefillSequence(*loaded_->executor, table, tokens, 0, options_.max_num_batched_tokens, true,
                  &all);
  return all;
}

}  // namespace tq
