#include "engine/runtime/generator.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>

#include "engine/common/error.h"
#include "engine/model/llama_weights.h"
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

Generator::Generator(const EngineOptions& options) : options_(options) {
  if (options.num_threads < 0) throw Error("--threads must be >= 0 (0 = all cores)");
  if (options.block_size <= 0 || options.block_size > 1024) {
    throw Error("--block-size must be in [1, 1024]");
  }
  if (options.max_num_batched_tokens <= 0) throw Error("--max-num-batched-tokens must be positive");
  if (options.max_model_len < 0) throw Error("--max-model-len must be >= 0 (0 = the model's)");
  if (options.kv_sink_tokens < 0 || options.kv_sink_tokens > 8 ||
      options.kv_sink_tokens > options.block_size ||
      (options.kv_sink_tokens > 0 && !kernels::KvStoresPreRopeKeys(options.kv_cache_dtype))) {
    throw Error("--kv-sink-tokens must be 0..8 (and <= --block-size), with a tq KV cache dtype");
  }
  files_ = LoadModelFiles(options.model_dir);
  const ModelConfig& c = files_.config;
  if (options.max_model_len > c.MaxContext()) {
    throw Error("--max-model-len " + std::to_string(options.max_model_len) +
                " is longer than the model's context " + std::to_string(c.MaxContext()) + " (" +
                options.model_dir + "/config.json)");
  }
  max_model_len_ = options.max_model_len > 0 ? options.max_model_len : c.MaxContext();
  tokenizer_ = Tokenizer::Load(options.model_dir, files_.tokenizer);
  backend_ = kernels::CreateCpuBackend(options.num_threads);
  model_ = std::make_unique<LlamaModel>(c, LoadLlamaWeights(options.model_dir, c, backend_.get()),
                                        backend_.get());

  kernels::KvLayout layout;
  layout.dtype = options.kv_cache_dtype;
  layout.block_size = options.block_size;
  layout.num_kv_heads = c.num_key_value_heads;
  layout.head_dim = c.head_dim;
  const int32_t blocks_for_one_seq = (max_model_len_ + layout.block_size - 1) / layout.block_size;
  layout.num_blocks =
      options.kv_cache_memory > 0
          ? PagedKvCache::BlocksForBudget(options.kv_cache_memory, c.num_hidden_layers, layout,
                                          options.kv_sink_tokens)
          : blocks_for_one_seq;
  // As vLLM: the pool must hold at least one sequence of max_model_len tokens,
  // so an accepted request can never run out of blocks on its own.
  if (layout.num_blocks < blocks_for_one_seq) {
    throw Error("--kv-cache-memory " + std::to_string(options.kv_cache_memory) + " bytes holds " +
                std::to_string(static_cast<int64_t>(layout.num_blocks) * layout.block_size) +
                " tokens of " + std::string(kernels::KvDtypeName(layout.dtype)) +
                " KV cache, fewer than --max-model-len " + std::to_string(max_model_len_) +
                " (needs " +
                std::to_string(PagedKvCache::BytesPerBlock(c.num_hidden_layers, layout,
                                                           options.kv_sink_tokens) *
                               blocks_for_one_seq) +
                " bytes); raise it or lower --max-model-len");
  }
  std::shared_ptr<const TqCodecState> tq;
  if (kernels::KvStoresPreRopeKeys(layout.dtype)) {
    KeyChannelStats stats = CalibrateKeys();
    tq = std::make_shared<TqCodecState>(c, layout.dtype, max_model_len_, std::move(stats.mean),
                                        std::move(stats.scale));
  }
  try {
    cache_ = std::make_unique<PagedKvCache>(backend_.get(), c.num_hidden_layers, layout, tq,
                                            options.kv_sink_tokens);
  } catch (const std::bad_alloc&) {
    throw Error("cannot allocate " +
                std::to_string(PagedKvCache::BytesPerBlock(c.num_hidden_layers, layout,
                                                           options.kv_sink_tokens) *
                               layout.num_blocks) +
                " bytes for the KV cache; lower --kv-cache-memory");
  }
  pool_ = BlockPool(layout.num_blocks);
}

void Generator::CheckRequest(std::span<const int32_t> prompt, const SamplingParams& params) const {
  CheckPrompt(prompt);
  if (std::string err = params.Validate(); !err.empty()) throw Error(err);
  for (int32_t id : params.stop_token_ids) {
    if (id >= files_.config.vocab_size) {
      throw Error("stop_token_ids: " + std::to_string(id) + " is not below the vocabulary size " +
                  std::to_string(files_.config.vocab_size));
    }
  }
}

void Generator::CheckPrompt(std::span<const int32_t> prompt) const {
  if (prompt.empty()) throw Error("prompt is empty");
  if (static_cast<int32_t>(prompt.size()) > max_model_len_) {
    throw Error("prompt has " + std::to_string(prompt.size()) +
                " tokens, more than max_model_len " + std::to_string(max_model_len_));
  }
  for (int32_t id : prompt) {
    if (id < 0 || id >= files_.config.vocab_size) {
      throw Error("token id " + std::to_string(id) + " out of range [0, " +
                  std::to_string(files_.config.vocab_size) + ")");
    }
  }
}

void Generator::RunChunk(std::span<const int32_t> tokens, int32_t begin, BlockTable& table,
                         PagedKvCache& cache, bool all_logits, std::vector<float>* logits) {
  const int32_t end = static_cast<int32_t>(tokens.size());
  ForwardBatch batch;
  batch.num_seqs = 1;
  batch.block_tables = table.blocks();
  batch.max_blocks_per_seq = static_cast<int32_t>(batch.block_tables.size());
  for (int32_t pos = begin; pos < end; ++pos) {
    batch.token_ids.push_back(tokens[pos]);
    batch.positions.push_back(pos);
    batch.token_seq.push_back(0);
    batch.slot_mapping.push_back(static_cast<int32_t>(table.Slot(pos)));
    if (all_logits) batch.logit_indices.push_back(pos - begin);
  }
  if (!all_logits) batch.logit_indices.push_back(end - begin - 1);
  model_->Forward(batch, cache, logits);
}

void Generator::Prefill(std::span<const int32_t> tokens, int32_t begin, BlockTable& table,
                        PagedKvCache& cache, bool all_logits, std::vector<float>* logits) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  std::vector<float> chunk_logits;
  if (all_logits) logits->clear();
  for (; begin < n; begin += options_.max_num_batched_tokens) {
    const int32_t end = std::min(n, begin + options_.max_num_batched_tokens);
    RunChunk(tokens.first(end), begin, table, cache, all_logits, &chunk_logits);
    if (all_logits) {
      logits->insert(logits->end(), chunk_logits.begin(), chunk_logits.end());
    } else {
      logits->swap(chunk_logits);
    }
  }
}

GenerationResult Generator::Generate(std::span<const int32_t> prompt, const SamplingParams& params,
                                     const std::function<void(int32_t)>& on_token) {
  CheckRequest(prompt, params);

  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  const size_t prompt_len = tokens.size();
  ScopedBlockTable scoped(pool_, cache_->layout().block_size);
  BlockTable& table = scoped.get();
  Sampler sampler(params);
  GenerationResult result;
  std::vector<float> logits;
  const auto& eos = files_.config.eos_token_ids;

  int32_t computed = 0;  // positions whose K/V are in the cache
  result.finish_reason = "length";
  while (static_cast<int32_t>(result.output_ids.size()) < params.max_tokens) {
    const int32_t total = static_cast<int32_t>(tokens.size());
    if (total >= max_model_len_) break;
    if (!table.EnsureCapacity(pool_, total)) {
      throw Error("KV cache too small for " + std::to_string(total) +
                  " tokens; raise --kv-cache-memory");
    }
    // Prefill (chunked); decode is a chunk of one.
    Prefill(std::span<const int32_t>(tokens.data(), total), computed, table, *cache_, false,
            &logits);
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
  ScopedBlockTable scoped(pool_, cache_->layout().block_size);
  BlockTable& table = scoped.get();
  if (!table.EnsureCapacity(pool_, static_cast<int32_t>(tokens.size()))) {
    throw Error("KV cache too small for " + std::to_string(tokens.size()) + " tokens");
  }
  std::vector<float> all;
  Prefill(tokens, 0, table, *cache_, true, &all);
  return all;
}

std::string Generator::ModelFingerprint() const {
  // FNV-1a over the shape and the layer-0 key projection: cheap, and any
  // other checkpoint (even one of the same shape) differs.
  const ModelConfig& c = files_.config;
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* data, size_t n) {
    const auto* b = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  const int32_t shape[] = {c.num_hidden_layers, c.num_key_value_heads, c.head_dim, c.hidden_size};
  mix(shape, sizeof(shape));
  const kernels::BackendBuffer& k_proj = model_->weights().layers.at(0).k_proj;
  std::vector<uint8_t> host(k_proj.bytes());
  backend_->CopyToHost(host.data(), k_proj.data(), host.size());
  mix(host.data(), host.size());
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

KeyChannelStats Generator::CalibrateKeys() {
  const ModelConfig& c = files_.config;
  const std::string& stats_path = options_.kv_calibration_stats;
  std::error_code ec;
  if (!stats_path.empty() && std::filesystem::exists(stats_path, ec)) {
    KeyChannelStats stats = LoadKeyStats(stats_path, c.num_hidden_layers, c.num_key_value_heads,
                                         c.head_dim, ModelFingerprint());
    kv_calibration_source_ = stats.source;
    return stats;
  }
  std::string text;
  std::string text_name = "the built-in text";
  if (options_.kv_calibration_text.empty()) {
    text = std::string(BuiltinCalibrationText());
  } else {
    if (!std::filesystem::is_regular_file(options_.kv_calibration_text, ec)) {
      throw Error(options_.kv_calibration_text + ": calibration text not found (not a file)");
    }
    std::ifstream in(options_.kv_calibration_text, std::ios::binary);
    if (!in) throw Error(options_.kv_calibration_text + ": cannot read calibration text");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    text_name = options_.kv_calibration_text;
  }
  // Up to the model's own context (not --max-model-len: stats saved for reuse
  // should not depend on a serving limit).
  std::vector<int32_t> tokens = tokenizer_->Encode(text);
  if (static_cast<int32_t>(tokens.size()) > c.MaxContext()) tokens.resize(c.MaxContext());
  constexpr size_t kMinCalibrationTokens = 64;
  if (tokens.size() < std::min<size_t>(kMinCalibrationTokens, c.MaxContext())) {
    throw Error(text_name + ": calibration text has " + std::to_string(tokens.size()) +
                " tokens; at least " + std::to_string(kMinCalibrationTokens) +
                " are needed for per-channel key statistics");
  }

  // An uncompressed cache just large enough for the calibration tokens.
  kernels::KvLayout layout;
  layout.dtype = kernels::KvDtype::kF32;
  layout.block_size = options_.block_size;
  layout.num_kv_heads = c.num_key_value_heads;
  layout.head_dim = c.head_dim;
  layout.num_blocks =
      (static_cast<int32_t>(tokens.size()) + layout.block_size - 1) / layout.block_size;
  PagedKvCache cache(backend_.get(), c.num_hidden_layers, layout);
  BlockPool pool(layout.num_blocks);
  BlockTable table(layout.block_size);
  table.EnsureCapacity(pool, static_cast<int32_t>(tokens.size()));

  KeyStatsAccumulator acc(c.num_hidden_layers, c.num_key_value_heads, c.head_dim);
  model_->SetKeyObserver(
      [&](int32_t layer, const float* keys, int32_t n) { acc.Add(layer, keys, n); });
  std::vector<float> logits;
  try {
    Prefill(tokens, 0, table, cache, false, &logits);
  } catch (...) {
    model_->SetKeyObserver(nullptr);  // the observer refers to this frame
    throw;
  }
  model_->SetKeyObserver(nullptr);
  table.Release(pool);

  KeyChannelStats stats = acc.Finish(text_name);
  stats.model_fingerprint = ModelFingerprint();
  kv_calibration_source_ =
      "calibrated on " + text_name + " (" + std::to_string(tokens.size()) + " tokens)";
  if (!stats_path.empty()) {
    SaveKeyStats(stats_path, stats);
    kv_calibration_source_ += ", saved to " + stats_path;
  }
  return stats;
}

}  // namespace tq
