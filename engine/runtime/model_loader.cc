#include "engine/runtime/model_loader.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <optional>
#include <string>

#include "engine/common/error.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/kv_calibration.h"
#include "engine/model/llama_weights.h"
#include "engine/model/safetensors.h"
#include "engine/parallel/cpu_communicator.h"
#include "engine/parallel/nccl_communicator.h"
#include "engine/parallel/tp_devices.h"
#include "engine/quant/quant_config.h"
#include "engine/runtime/kv_dtype_auto.h"

namespace tq {
namespace {

void CheckOptions(const EngineOptions& options) {
  if (options.num_threads < 0) throw Error("--threads must be >= 0 (0 = all cores)");
  if (options.block_size <= 0 || options.block_size > 1024) {
    throw Error("--block-size must be in [1, 1024]");
  }
  if (options.max_num_batched_tokens <= 0) throw Error("--max-num-batched-tokens must be positive");
  if (options.max_num_seqs <= 0) throw Error("--max-num-seqs must be positive");
  if (options.max_model_len < 0) throw Error("--max-model-len must be >= 0 (0 = the model's)");
  if (options.tensor_parallel_size < 1 || options.tensor_parallel_size > 64) {
    throw Error("--tensor-parallel-size must be in [1, 64]");
  }
  if (options.kv_sink_tokens < 0 || options.kv_sink_tokens > 8 ||
      options.kv_sink_tokens > options.block_size ||
      (options.kv_sink_tokens > 0 &&
       (options.kv_cache_dtype_auto || !kernels::KvStoresPreRopeKeys(options.kv_cache_dtype)))) {
    throw Error(
        "--kv-sink-tokens must be 0..8 (and <= --block-size), with a tq KV cache dtype "
        "given explicitly (not auto)");
  }
  if (options.kv_cache_dtype_auto &&
      !(options.kv_quality_budget >= 1.0 && options.kv_quality_budget <= 100.0)) {
    throw Error("--kv-quality-budget must be in [1, 100] (a perplexity ratio to fp32)");
  }
  if (!(options.gpu_memory_utilization > 0.0 && options.gpu_memory_utilization <= 1.0)) {
    throw Error("--gpu-memory-utilization must be in (0, 1]");
  }
}

// KV pool budget on a GPU when --kv-cache-memory is not given (vLLM's rule):
// gpu_memory_utilization × total device memory, minus what is in use now
// (weights, this process's context, other processes) and an estimate of the
// activation workspace at the largest step (max_num_batched_tokens tokens,
// max_num_seqs logit rows) plus a fixed reserve for cuBLAS and allocator slack.
// Under tensor parallelism each rank's device gets its own budget.
size_t DeviceKvBudget(const LoadedModel& m, const kernels::Backend& backend,
                      const EngineOptions& options) {
  kernels::DeviceMemoryInfo mem;
  const std::string device = "cuda:" + std::to_string(kernels::CudaDeviceOf(backend));
  if (!kernels::QueryDeviceMemory(backend, &mem)) {
    throw Error("--device " + std::string(backend.Name()) + ": cannot query device memory");
  }
  const ModelConfig& c = m.files.config;
  const size_t tokens = static_cast<size_t>(options.max_num_batched_tokens);
  const size_t per_token = 2 * static_cast<size_t>(c.hidden_size) +
                           2 * static_cast<size_t>(c.num_attention_heads) * c.head_dim +
                           2 * static_cast<size_t>(c.num_key_value_heads) * c.head_dim +
                           2 * static_cast<size_t>(c.intermediate_size);
  const size_t logit_rows = std::max<size_t>(options.max_num_seqs, tokens);
  const size_t workspace = 4 * (tokens * per_token + logit_rows * (c.vocab_size + c.hidden_size)) +
                           2 * tokens * std::max(c.hidden_size, c.intermediate_size) +
                           (size_t{512} << 20);
  const double allowed = options.gpu_memory_utilization * static_cast<double>(mem.total_bytes);
  const double used = static_cast<double>(mem.total_bytes - mem.free_bytes);
  const double budget = allowed - used - static_cast<double>(workspace);
  if (budget <= 0.0) {
    throw Error("--gpu-memory-utilization " + std::to_string(options.gpu_memory_utilization) +
                " leaves no memory for the KV cache on " + device + " (device total " +
                std::to_string(mem.total_bytes) + " bytes, in use " +
                std::to_string(mem.total_bytes - mem.free_bytes) + " bytes, activation workspace " +
                std::to_string(workspace) + " bytes); raise it or set --kv-cache-memory");
  }
  return static_cast<size_t>(budget);
}

// Identifies the model in saved calibration stats: FNV-1a over the shape and
// the checkpoint's stored layer-0 key projection (cheap; any other checkpoint,
// even one of the same shape, differs). The stored bytes, not the loaded
// ones, so that the backend's layout (the CPU's panels), --dtype and the
// tensor-parallel split do not change it: a file calibrated on one loads on
// any other.
std::string ModelFingerprint(const LoadedModel& m) {
  const ModelConfig& c = m.files.config;
  const int32_t shape[] = {c.num_hidden_layers, c.num_key_value_heads, c.head_dim, c.hidden_size};
  uint64_t h = Fnv1a(shape, sizeof(shape));
  const SafetensorsCheckpoint ckpt(m.files.dir);
  // A `tqserve quantize` checkpoint stores the codes as .qweight.
  for (const char* suffix : {".weight", ".qweight"}) {
    if (const TensorInfo* t = ckpt.Find(std::string("model.layers.0.self_attn.k_proj") + suffix)) {
      h = Fnv1a(t->data, t->nbytes, h);
      break;
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// The ranks' statistics of their KV heads as one [layers][all KV heads][head_dim]
// set (a replicated head's ranks saw the same keys; the last one is kept).
KeyChannelStats MergeRankKeyStats(const LoadedModel& m, const std::vector<KeyStatsAccumulator>& acc,
                                  const std::string& source) {
  const ModelConfig& c = m.files.config;
  KeyChannelStats all;
  all.num_layers = c.num_hidden_layers;
  all.num_kv_heads = c.num_key_value_heads;
  all.head_dim = c.head_dim;
  all.source = source;
  if (acc.size() == 1) return acc[0].Finish(source);
  const size_t hd = c.head_dim;
  all.mean.resize(static_cast<size_t>(all.num_layers) * all.num_kv_heads * hd);
  all.scale.resize(all.mean.size());
  for (size_t r = 0; r < acc.size(); ++r) {
    const KeyChannelStats part = acc[r].Finish(source);
    const TpPlan& plan = m.executor->worker(static_cast<int>(r)).model->tp_plan();
    all.num_tokens = r == 0 ? part.num_tokens : std::min(all.num_tokens, part.num_tokens);
    for (int32_t l = 0; l < all.num_layers; ++l) {
      for (int32_t h = 0; h < plan.num_kv_heads; ++h) {
        const size_t src = (static_cast<size_t>(l) * plan.num_kv_heads + h) * hd;
        const size_t dst =
            (static_cast<size_t>(l) * all.num_kv_heads + plan.first_kv_head + h) * hd;
        std::copy_n(part.mean.begin() + src, hd, all.mean.begin() + dst);
        std::copy_n(part.scale.begin() + src, hd, all.scale.begin() + dst);
      }
    }
  }
  return all;
}

// Rank r's codec state: the statistics of its KV heads only.
std::shared_ptr<const TqCodecState> RankCodecState(const LoadedModel& m, kernels::KvDtype dtype,
                                                   const KeyChannelStats& stats, int r) {
  const ModelConfig& c = m.files.config;
  const TpPlan& plan = m.executor->worker(r).model->tp_plan();
  ModelConfig local = c;
  local.num_key_value_heads = plan.num_kv_heads;
  const size_t hd = c.head_dim;
  std::vector<float> mean, scale;
  for (int32_t l = 0; l < c.num_hidden_layers; ++l) {
    const size_t first = (static_cast<size_t>(l) * c.num_key_value_heads + plan.first_kv_head) * hd;
    const size_t n = plan.num_kv_heads * hd;
    mean.insert(mean.end(), stats.mean.begin() + first, stats.mean.begin() + first + n);
    scale.insert(scale.end(), stats.scale.begin() + first, stats.scale.begin() + first + n);
  }
  return std::make_shared<TqCodecState>(local, dtype, m.max_model_len, std::move(mean),
                                        std::move(scale));
}

std::string ReadCalibrationText(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw Error(path + ": calibration text not found (not a file)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read calibration text");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The calibration text's tokens (BOS first as the tokenizer adds it), up to
// the model's own context (not --max-model-len: stats saved for reuse should
// not depend on a serving limit). *name gets the text's name for messages.
std::vector<int32_t> CalibrationTokens(const LoadedModel& m, const EngineOptions& options,
                                       const std::string& needs, std::string* name) {
  const ModelConfig& c = m.files.config;
  if (!m.tokenizer) {
    throw Error(needs +
                " calibrates on text, which needs the tokenizer; load the "
                "model with it or pass a saved --kv-calibration-stats file");
  }
  const bool builtin = options.kv_calibration_text.empty();
  const std::string text = builtin ? std::string(BuiltinCalibrationText())
                                   : ReadCalibrationText(options.kv_calibration_text);
  *name = builtin ? "the built-in text" : options.kv_calibration_text;
  std::vector<int32_t> tokens = m.tokenizer->Encode(text);
  if (static_cast<int32_t>(tokens.size()) > c.MaxContext()) tokens.resize(c.MaxContext());
  return tokens;
}

// Pre-RoPE key statistics for the tq formats: loaded, or computed by running
// `tokens` (the calibration text's, or the part of it auto does not hold out)
// through an uncompressed cache. `tokens` is only read when no saved stats exist.
KeyChannelStats CalibrateKeys(LoadedModel& m, const EngineOptions& options,
                              const std::vector<int32_t>* tokens_in) {
  const ModelConfig& c = m.files.config;
  const std::string& stats_path = options.kv_calibration_stats;
  std::error_code ec;
  if (!stats_path.empty() && std::filesystem::exists(stats_path, ec)) {
    KeyChannelStats stats = LoadKeyStats(stats_path, c.num_hidden_layers, c.num_key_value_heads,
                                         c.head_dim, ModelFingerprint(m));
    m.kv_calibration_source = stats.source;
    return stats;
  }
  std::string text_name;
  std::vector<int32_t> own;
  if (tokens_in == nullptr) {
    own = CalibrationTokens(
        m, options, "--kv-cache-dtype " + std::string(kernels::KvDtypeName(options.kv_cache_dtype)),
        &text_name);
    tokens_in = &own;
  } else {
    text_name =
        options.kv_calibration_text.empty() ? "the built-in text" : options.kv_calibration_text;
  }
  const std::vector<int32_t>& tokens = *tokens_in;
  constexpr size_t kMinCalibrationTokens = 64;
  if (tokens.size() < std::min<size_t>(kMinCalibrationTokens, c.MaxContext())) {
    throw Error(text_name + ": calibration text has " + std::to_string(tokens.size()) +
                " tokens; at least " + std::to_string(kMinCalibrationTokens) +
                " are needed for per-channel key statistics");
  }

  // An uncompressed cache just large enough for the calibration tokens.
  kernels::KvLayout layout;
  layout.dtype = kernels::KvDtype::kF32;
  layout.block_size = options.block_size;
  layout.num_kv_heads = m.executor->model().tp_plan().num_kv_heads;
  layout.head_dim = c.head_dim;
  layout.num_blocks =
      (static_cast<int32_t>(tokens.size()) + layout.block_size - 1) / layout.block_size;
  const RankCaches caches = m.executor->MakeCaches(layout, {}, 0);
  BlockPool pool(layout.num_blocks);
  BlockTable table(layout.block_size);
  table.EnsureCapacity(pool, static_cast<int32_t>(tokens.size()));

  // One accumulator and observer per rank (its KV heads, fed on its thread).
  // Deques: the models point at elements, which emplace_back never moves.
  const int world = m.executor->world_size();
  std::vector<KeyStatsAccumulator> acc;
  std::deque<ForwardObserver> observers;
  std::deque<ScopedForwardObserver> scoped;  // removes them on every exit path
  acc.reserve(world);
  for (int r = 0; r < world; ++r) {
    acc.emplace_back(c.num_hidden_layers, layout.num_kv_heads, c.head_dim);
    observers.push_back(
        {[&acc, r](int32_t layer, const float* keys, int32_t n) { acc[r].Add(layer, keys, n); }});
    scoped.emplace_back(*m.executor->worker(r).model, &observers.back());
  }
  std::vector<float> logits;
  PrefillSequence(
      [&](const ForwardBatch& b, std::vector<float>* l) { m.executor->Forward(b, caches, l); },
      table, tokens, 0, options.max_num_batched_tokens, false, &logits);
  scoped.clear();
  table.Release(pool);

  KeyChannelStats stats = MergeRankKeyStats(m, acc, text_name);
  stats.model_fingerprint = ModelFingerprint(m);
  m.kv_calibration_source =
      "calibrated on " + text_name + " (" + std::to_string(tokens.size()) + " tokens)";
  if (!stats_path.empty()) {
    SaveKeyStats(stats_path, stats);
    m.kv_calibration_source += ", saved to " + stats_path;
  }
  return stats;
}

// --kv-cache-dtype auto: calibrates the tq key statistics on the calibration
// text less its held-out tail, scores the tail with fp32 and each candidate
// (kv_dtype_auto.h) and records the choice in m.kv_dtype_choice.
KeyChannelStats ChooseKvDtypeAtStartup(LoadedModel& m, const EngineOptions& options) {
  std::string text_name;
  std::vector<int32_t> tokens =
      CalibrationTokens(m, options, "--kv-cache-dtype auto (it scores the formats)", &text_name);
  // The held-out tokens are scored as their own sequence, after the text's
  // first token (BOS when the tokenizer adds one): the built-in held-out text
  // (the statistics then come from the whole calibration text, as for an
  // explicit tq dtype), or the tail of a --kv-calibration-text file.
  // Bounded by --max-model-len, not the model's context: the tq codec's RoPE
  // table holds max_model_len positions (a longer held-out text read past it).
  const int32_t max_held = std::min(kMaxHeldOutTokens, m.max_model_len - 1);
  std::vector<int32_t> held_out = {tokens.front()};
  if (options.kv_calibration_text.empty()) {
    const std::vector<int32_t> text = m.tokenizer->Encode(BuiltinHeldOutText(), false);
    held_out.insert(held_out.end(), text.begin(),
                    text.begin() + std::min<int32_t>(max_held, static_cast<int32_t>(text.size())));
  } else {
    const int32_t n = static_cast<int32_t>(tokens.size());
    const int32_t held = std::min(max_held, HeldOutTokenCount(n));
    if (held < 2) {
      throw Error(text_name + ": calibration text has " + std::to_string(n) +
                  " tokens, too few to hold out a part for --kv-cache-dtype auto");
    }
    held_out.insert(held_out.end(), tokens.end() - held, tokens.end());
    tokens.resize(static_cast<size_t>(n - held));
  }
  KeyChannelStats stats = CalibrateKeys(m, options, &tokens);

  const ModelConfig& c = m.files.config;
  const int world = m.executor->world_size();
  auto make_caches = [&](kernels::KvDtype dtype, int32_t num_blocks) {
    kernels::KvLayout layout;
    layout.dtype = dtype;
    layout.block_size = options.block_size;
    layout.num_kv_heads = m.executor->model().tp_plan().num_kv_heads;
    layout.head_dim = c.head_dim;
    layout.num_blocks = num_blocks;
    std::vector<std::shared_ptr<const TqCodecState>> tq;
    if (kernels::KvStoresPreRopeKeys(dtype)) {
      for (int r = 0; r < world; ++r) tq.push_back(RankCodecState(m, dtype, stats, r));
    }
    return m.executor->MakeCaches(layout, tq, 0);
  };
  // tqk3v2 (CPU-only kernels) is a candidate where the backend has it; every
  // rank runs on the same --device, as the explicit-dtype check assumes.
  std::vector<kernels::KvDtype> extra;
  if (m.executor->backend().Capabilities().SupportsKvDtype(kernels::KvDtype::kTqK3V2)) {
    extra.push_back(kernels::KvDtype::kTqK3V2);
  }
  const std::vector<kernels::KvDtype> candidates = AutoKvCandidates(c.head_dim, extra);
  m.kv_dtype_choice =
      ChooseKvDtype(*m.executor, held_out, candidates, options.kv_quality_budget,
                    options.block_size, options.max_num_batched_tokens, make_caches);
  return stats;
}

// The backends (rank 0 first) and communicators of `world` > 1 ranks: CUDA
// device r with NCCL on the backends' streams, or CPU backends with the
// in-process communicator (ChooseTpDevices says which).
struct RankBackends {
  std::vector<std::unique_ptr<kernels::Backend>> backends;
  std::vector<std::unique_ptr<Communicator>> comms;
};
RankBackends MakeRankBackends(kernels::DeviceKind device, int world, int threads,
                              std::string* note) {
  std::string why_no_cuda;
  const int cuda_devices =
      device == kernels::DeviceKind::kCpu ? 0 : kernels::CudaDeviceCount(&why_no_cuda);
  const TpDevices where = ChooseTpDevices(device, world, cuda_devices, NcclBuilt(), why_no_cuda);
  *note = where.note;
  RankBackends out;
  std::vector<int> devices;
  std::vector<void*> streams;
  for (int r = 0; r < world; ++r) {
    if (where.cuda) {
      out.backends.push_back(kernels::CreateCudaBackendOn(r));
      devices.push_back(r);
      streams.push_back(kernels::CudaStreamOf(*out.backends.back()));
    } else {
      out.backends.push_back(kernels::CreateCpuBackend(threads));
    }
  }
  out.comms =
      where.cuda ? CreateNcclCommunicators(devices, streams) : CreateCpuCommunicators(world);
  return out;
}

LoadedModel LoadModelImpl(const EngineOptions& options, bool with_tokenizer) {
  CheckOptions(options);
  LoadedModel m;
  m.files = LoadModelFiles(options.model_dir);
  const ModelConfig& c = m.files.config;
  if (options.max_model_len > c.MaxContext()) {
    throw Error("--max-model-len " + std::to_string(options.max_model_len) +
                " is longer than the model's context " + std::to_string(c.MaxContext()) + " (" +
                options.model_dir + "/config.json)");
  }
  m.max_model_len = options.max_model_len > 0 ? options.max_model_len : c.MaxContext();
  if (with_tokenizer) m.tokenizer = Tokenizer::Load(options.model_dir, m.files.tokenizer);
  // Tensor parallelism: the cores are split between the ranks.
  const int world = options.tensor_parallel_size;
  const int threads = std::max(1, kernels::CpuThreadCount(options.num_threads) / world);
  std::optional<quant::QuantConfig> quant_config;
  WeightLoadOptions weight_options;
  weight_options.dense_dtype = options.weight_dtype;
  if (!options.quantization_config.empty()) {
    quant_config = quant::QuantConfig::Load(options.quantization_config);
    weight_options.quant = &*quant_config;
  }
  // A model that cannot be split fails before any loading.
  MakeTpPlan(c, 0, world, options.enable_expert_parallel);
  RankBackends ranks;
  try {
    if (world == 1) {
      ranks.backends.push_back(kernels::CreateBackend(options.device, threads, &m.device_note));
    } else {
      ranks = MakeRankBackends(options.device, world, threads, &m.device_note);
    }
  } catch (const std::runtime_error& e) {
    throw Error(e.what());
  }
  const kernels::Backend& backend0 = *ranks.backends.front();
  const kernels::BackendCapabilities caps = backend0.Capabilities();
  if (c.moe.enabled() && caps.device_memory) {
    throw Error(c.architecture +
                ": mixture-of-experts layers run on the CPU backend only in "
                "this version (the " +
                std::string(backend0.Name()) + " MoE path is issue 42 item 6); use --device cpu");
  }
  if (!options.kv_cache_dtype_auto && !caps.SupportsKvDtype(options.kv_cache_dtype)) {
    throw Error("--kv-cache-dtype " + std::string(kernels::KvDtypeName(options.kv_cache_dtype)) +
                " is CPU-only (no " + std::string(backend0.Name()) +
                " kernels): use tq3 on CUDA, or --device cpu");
  }
  std::vector<Worker> workers(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    Worker& w = workers[static_cast<size_t>(r)];
    w.backend = std::move(ranks.backends[static_cast<size_t>(r)]);
    TpPlan plan = MakeTpPlan(c, r, world, options.enable_expert_parallel);
    if (!ranks.comms.empty()) plan.comm = ranks.comms[static_cast<size_t>(r)].get();
    w.model = std::make_unique<LlamaModel>(
        c, LoadLlamaWeights(options.model_dir, c, w.backend.get(), plan, weight_options),
        w.backend.get(), plan);
  }
  m.executor = std::make_unique<ModelExecutor>(std::move(workers), std::move(ranks.comms));

  std::optional<KeyChannelStats> stats;
  if (options.kv_cache_dtype_auto) stats = ChooseKvDtypeAtStartup(m, options);
  kernels::KvLayout layout;
  layout.dtype = options.kv_cache_dtype_auto ? m.kv_dtype_choice.dtype : options.kv_cache_dtype;
  layout.block_size = options.block_size;
  layout.num_kv_heads = m.executor->model().tp_plan().num_kv_heads;
  layout.head_dim = c.head_dim;
  const int32_t blocks_for_one_seq = (m.max_model_len + layout.block_size - 1) / layout.block_size;
  const size_t bytes_per_block =
      PagedKvCache::BytesPerBlock(c.num_hidden_layers, layout, options.kv_sink_tokens);
  // Block tables are shared, so every rank's pool has the same block count:
  // the smallest of the ranks' device budgets.
  size_t kv_budget = options.kv_cache_memory;
  if (kv_budget == 0 && caps.device_memory) {
    kv_budget = DeviceKvBudget(m, m.executor->backend(), options);
    for (int r = 1; r < world; ++r) {
      kv_budget = std::min(kv_budget, DeviceKvBudget(m, *m.executor->worker(r).backend, options));
    }
  }
  layout.num_blocks = kv_budget > 0 ? PagedKvCache::BlocksForBudget(kv_budget, c.num_hidden_layers,
                                                                    layout, options.kv_sink_tokens)
                                    : blocks_for_one_seq;
  // As vLLM: the pool must hold at least one sequence of max_model_len tokens,
  // so an accepted request can never run out of blocks on its own.
  if (layout.num_blocks < blocks_for_one_seq) {
    const std::string budget_source =
        options.kv_cache_memory > 0
            ? "--kv-cache-memory " + std::to_string(options.kv_cache_memory) + " bytes"
            : "--gpu-memory-utilization " + std::to_string(options.gpu_memory_utilization) + " (" +
                  std::to_string(kv_budget) + " bytes for the KV cache)";
    throw Error(budget_source + " holds " +
                std::to_string(static_cast<int64_t>(layout.num_blocks) * layout.block_size) +
                " tokens of " + std::string(kernels::KvDtypeName(layout.dtype)) +
                " KV cache, fewer than --max-model-len " + std::to_string(m.max_model_len) +
                " (needs " + std::to_string(bytes_per_block * blocks_for_one_seq) +
                " bytes); raise it or lower --max-model-len");
  }
  std::vector<std::shared_ptr<const TqCodecState>> tq;
  if (kernels::KvStoresPreRopeKeys(layout.dtype)) {
    if (!stats) stats = CalibrateKeys(m, options, nullptr);
    for (int r = 0; r < world; ++r) tq.push_back(RankCodecState(m, layout.dtype, *stats, r));
    char mean_hex[17], scale_hex[17];
    m.kv_fingerprint = std::string(FingerprintFloats(stats->mean, mean_hex)) +
                       std::string(FingerprintFloats(stats->scale, scale_hex));
  } else if (options.kv_cache_dtype_auto) {
    m.kv_calibration_source.clear();  // the chosen format does not use the statistics
  }
  m.kv_fingerprint += "/sink" + std::to_string(options.kv_sink_tokens);
  try {
    m.executor->SetCaches(m.executor->MakeCaches(layout, tq, options.kv_sink_tokens));
  } catch (const std::bad_alloc&) {
    throw Error("cannot allocate " + std::to_string(bytes_per_block * layout.num_blocks) +
                " bytes for the KV cache; lower --kv-cache-memory");
  }
  if (options.cuda_graphs) {
    if (caps.graphs && world == 1) {
      // Decode batches up to vLLM's default capture limit; every graph reads
      // block tables as wide as one max_model_len sequence needs.
      constexpr int32_t kMaxGraphBatch = 256;
      m.executor->model().EnableDecodeGraphs(std::min(options.max_num_seqs, kMaxGraphBatch),
                                             blocks_for_one_seq);
    } else {
      m.device_note += std::string(m.device_note.empty() ? "" : "; ") +
                       "--cuda-graphs: ignored (needs --device cuda and one rank)";
    }
  }
  return m;
}

}  // namespace

LoadedModel LoadModel(const EngineOptions& options) {
  return LoadModelImpl(options, true);
}

LoadedModel LoadModelWithoutTokenizer(const EngineOptions& options) {
  return LoadModelImpl(options, false);
}

std::vector<RankMemory> DescribeRanks(const LoadedModel& m) {
  std::vector<RankMemory> out;
  for (int r = 0; r < m.executor->world_size(); ++r) {
    const Worker& w = m.executor->worker(r);
    RankMemory rm;
    rm.rank = r;
    rm.cuda_device = kernels::CudaDeviceOf(*w.backend);
    rm.weight_bytes = w.model->weights().BytesByPrecision();
    if (w.cache) {
      const PagedKvCache& cache = *w.cache;
      rm.kv_cache_bytes = cache.total_bytes();
      rm.kv_capacity_tokens =
          static_cast<int64_t>(cache.layout().num_blocks) * cache.layout().block_size;
    }
    out.push_back(rm);
  }
  return out;
}

}  // namespace tq
