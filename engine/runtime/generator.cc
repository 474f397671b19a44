#include "engine/runtime/generator.h"

#include <algorithm>
#include <string>

#include "engine/common/error.h"
#include "engine/runtime/model_loader.h"
#include "engine/sampling/sampler.h"

namespace tq {
namespace {

// Returns a sequence's blocks to the pool on every exit path.
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

void CheckPromptIds(std::span<const int32_t> prompt, int32_t max_model_len, int32_t vocab_size) {
  if (prompt.empty()) throw Error("prompt is empty");
  if (static_cast<int32_t>(prompt.size()) > max_model_len) {
    throw Error("prompt has " + std::to_string(prompt.size()) +
                " tokens, more than max_model_len " + std::to_string(max_model_len));
  }
  for (int32_t id : prompt) {
    if (id < 0 || id >= vocab_size) {
      throw Error("token id " + std::to_string(id) + " out of range [0, " +
                  std::to_string(vocab_size) + ")");
    }
  }
}

void CheckRequestIds(std::span<const int32_t> prompt, const SamplingParams& params,
                     int32_t max_model_len, int32_t vocab_size) {
  CheckPromptIds(prompt, max_model_len, vocab_size);
  if (std::string err = params.Validate(); !err.empty()) throw Error(err);
  for (int32_t id : params.stop_token_ids) {
    if (id >= vocab_size) {
      throw Error("stop_token_ids: " + std::to_string(id) + " is not below the vocabulary size " +
                  std::to_string(vocab_size));
    }
  }
}

Generator::Generator(const EngineOptions& options)
    : options_(options), loaded_(std::make_unique<LoadedModel>(LoadModel(options))) {
  pool_ = BlockPool(loaded_->cache->layout().num_blocks);
}

Generator::~Generator() = default;

const ModelFiles& Generator::files() const {
  return loaded_->files;
}
LlamaModel& Generator::model() {
  return *loaded_->model;
}
const Tokenizer& Generator::tokenizer() const {
  return *loaded_->tokenizer;
}
const PagedKvCache& Generator::kv_cache() const {
  return *loaded_->cache;
}
const std::string& Generator::kv_calibration_source() const {
  return loaded_->kv_calibration_source;
}

const KvDtypeChoice& Generator::kv_dtype_choice() const {
  return loaded_->kv_dtype_choice;
}
const std::string& Generator::device_note() const {
  return loaded_->device_note;
}
int32_t Generator::max_model_len() const {
  return loaded_->max_model_len;
}

void Generator::CheckRequest(std::span<const int32_t> prompt, const SamplingParams& params) const {
  CheckRequestIds(prompt, params, loaded_->max_model_len, files().config.vocab_size);
}

void Generator::CheckPrompt(std::span<const int32_t> prompt) const {
  CheckPromptIds(prompt, loaded_->max_model_len, files().config.vocab_size);
}

GenerationResult Generator::Generate(std::span<const int32_t> prompt, const SamplingParams& params,
                                     const std::function<void(int32_t)>& on_token) {
  CheckRequest(prompt, params);

  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  const size_t prompt_len = tokens.size();
  PagedKvCache& cache = *loaded_->cache;
  ScopedBlockTable scoped(pool_, cache.layout().block_size);
  BlockTable& table = scoped.get();
  Sampler sampler(params);
  GenerationResult result;
  std::vector<float> logits;
  const auto& eos = files().config.eos_token_ids;

  int32_t computed = 0;  // positions whose K/V are in the cache
  result.finish_reason = "length";
  while (static_cast<int32_t>(result.output_ids.size()) < params.max_tokens) {
    const int32_t total = static_cast<int32_t>(tokens.size());
    if (total >= loaded_->max_model_len) break;
    if (!table.EnsureCapacity(pool_, total)) {
      throw Error("KV cache too small for " + std::to_string(total) +
                  " tokens; raise --kv-cache-memory");
    }
    // Prefill (chunked); decode is a chunk of one.
    PrefillSequence(*loaded_->model, cache, table, tokens, computed,
                    options_.max_num_batched_tokens, false, &logits);
    computed = total;
    const std::span<const int32_t> prompt_ids(tokens.data(), prompt_len);
    const std::span<const int32_t> output_ids(tokens.data() + prompt_len,
                                              tokens.size() - prompt_len);
    const int32_t next = sampler.Sample(logits, prompt_ids, output_ids).token;
    tokens.push_back(next);
    result.output_ids.push_back(next);
    if (on_token) on_token(next);
    const bool is_eos = !params.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end();
    const bool is_stop = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(),
                                   next) != params.stop_token_ids.end();
    if (is_eos || is_stop) {
      result.finish_reason = "stop";
      break;
    }
  }
  return result;
}

std::vector<float> Generator::PromptLogits(std::span<const int32_t> tokens) {
  CheckPrompt(tokens);
  ScopedBlockTable scoped(pool_, loaded_->cache->layout().block_size);
  BlockTable& table = scoped.get();
  if (!table.EnsureCapacity(pool_, static_cast<int32_t>(tokens.size()))) {
    throw Error("KV cache too small for " + std::to_string(tokens.size()) + " tokens");
  }
  std::vector<float> all;
  PrefillSequence(*loaded_->model, *loaded_->cache, table, tokens, 0,
                  options_.max_num_batched_tokens, true, &all);
  return all;
}

}  // namespace tq
