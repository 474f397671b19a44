// `tqserve generate`: one prompt in, its continuation streamed to stdout.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/common/error.h"
#include "engine/runtime/model_loader.h"
#include "engine/runtime/offline_engine.h"
#include "engine/runtime/request.h"
#include "server/cli_commands.h"
#include "server/text/detokenizer.h"

namespace tq {
namespace {

struct GenerateArgs {
  EngineOptions engine;
  std::string kv_cache_dtype = kDefaultKvCacheDtype;  // docs/kv-cache.md
  std::string prompt = "Once upon a time";
  bool no_bos = false;
  SamplingParams sampling;
  std::optional<double> temperature, top_p;
  std::optional<int32_t> top_k;
  std::optional<uint64_t> seed;
  bool quiet = false;
};

void RunGenerate(GenerateArgs& args) {
  ApplyKvDtypeFlag(args.kv_cache_dtype, &args.engine);
  const auto load_start = std::chrono::steady_clock::now();
  OfflineEngine generator(args.engine);
  const ModelFiles& files = generator.files();

  // Unset sampling flags fall back to generation_config.json, then OpenAI defaults.
  SamplingParams params = args.sampling;
  params.temperature = args.temperature.value_or(files.generation.temperature);
  params.top_p = args.top_p.value_or(files.generation.top_p);
  params.top_k = args.top_k.value_or(files.generation.top_k);
  params.seed = args.seed;

  const Tokenizer& tokenizer = generator.tokenizer();
  const std::vector<int32_t> prompt = tokenizer.Encode(args.prompt, !args.no_bos);
  // Generate's checks, before echoing the prompt.
  CheckRequestIds(prompt, params, generator.max_model_len(), files.config.vocab_size);
  if (!args.quiet) {
    if (!generator.loaded().device_note.empty()) {
      std::fprintf(stderr, "[tqserve] %s\n", generator.loaded().device_note.c_str());
    }
    std::fprintf(stderr, "[tqserve] %s\n", WeightsSummary(generator.model()).c_str());
    std::fprintf(stderr, "[tqserve] %s\n", DescribeKvCache(generator).c_str());
  }
  IncrementalDetokenizer detok(&tokenizer, prompt);
  if (args.engine.num_threads > kernels::CpuThreadCount(args.engine.num_threads)) {
    std::fprintf(stderr, "[tqserve] --threads %d is more than the %d cores; using %d\n",
                 args.engine.num_threads, kernels::CpuThreadCount(0),
                 kernels::CpuThreadCount(args.engine.num_threads));
  }

  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first_token;
  std::fputs(args.prompt.c_str(), stdout);
  std::fflush(stdout);
  const GenerationResult result = generator.Generate(prompt, params, [&](int32_t token) {
    if (first_token == std::chrono::steady_clock::time_point{}) {
      first_token = std::chrono::steady_clock::now();
    }
    const std::string delta = detok.Push(token);
    std::fputs(delta.c_str(), stdout);
    std::fflush(stdout);
  });
  std::fputs(detok.Flush().c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  const auto end = std::chrono::steady_clock::now();

  if (!args.quiet) {
    using Seconds = std::chrono::duration<double>;
    const double load_s = Seconds(start - load_start).count();
    const size_t n = result.output_ids.size();
    std::fprintf(stderr,
                 "[tqserve] model %s: load %.3f s; prompt %zu tokens; %zu tokens generated "
                 "(finish_reason=%s)",
                 files.dir.c_str(), load_s, prompt.size(), n, result.finish_reason.c_str());
    if (n > 0) {
      std::fprintf(stderr, "; TTFT %.2f ms", Seconds(first_token - start).count() * 1e3);
    }
    if (n > 1) {
      std::fprintf(stderr, "; decode %.1f tokens/s",
                   static_cast<double>(n - 1) / Seconds(end - first_token).count());
    }
    std::fputs("\n", stderr);
  }
}

}  // namespace

std::string DescribeKvCache(const OfflineEngine& generator) {
  const kernels::KvLayout& l = generator.kv_cache().layout();
  return KvCacheLine(l.dtype, l.head_dim, l.num_blocks, l.block_size,
                     generator.kv_cache().total_bytes(), generator.loaded().kv_calibration_source,
                     generator.loaded().kv_dtype_choice.Describe());
}

void AddGenerateCommand(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  args->engine.model_dir = TQ_DEFAULT_MODEL_DIR;
  args->sampling.max_tokens = 256;
  auto* cmd =
      app.add_subcommand("generate", "Generate a continuation of a prompt (streams to stdout)");
  cmd->add_option("--model", args->engine.model_dir, "Hugging Face model directory")
      ->capture_default_str();
  cmd->add_option("--prompt", args->prompt, "Prompt text")->capture_default_str();
  cmd->add_flag("--no-bos", args->no_bos, "Do not add the BOS token");
  cmd->add_option("--max-tokens", args->sampling.max_tokens, "Maximum new tokens")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--temperature", args->temperature,
                  "0 = greedy (default: generation_config.json, else 1)");
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling mass in (0, 1]");
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens (0 = off)");
  cmd->add_option("--min-p", args->sampling.min_p, "Drop tokens below min_p x the top probability");
  cmd->add_option("--seed", args->seed, "Seed of this request's RNG");
  cmd->add_option("--repetition-penalty", args->sampling.repetition_penalty,
                  "HF/CTRL penalty (1 = off)");
  cmd->add_option("--presence-penalty", args->sampling.presence_penalty, "OpenAI presence penalty");
  cmd->add_option("--frequency-penalty", args->sampling.frequency_penalty,
                  "OpenAI frequency penalty");
  cmd->add_option("--stop-token-ids", args->sampling.stop_token_ids,
                  "Token ids that end generation")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--ignore-eos", args->sampling.ignore_eos, "Keep generating after EOS");
  cmd->add_option("--threads", args->engine.num_threads,
                  "CPU compute threads (0 = all cores; capped at the core count)")
      ->capture_default_str();
  cmd->add_option("--max-model-len", args->engine.max_model_len, "Context length (0 = the model's)")
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", args->engine.max_num_batched_tokens,
                  "Prefill chunk size in tokens")
      ->capture_default_str();
  AddKvCacheFlags(cmd, &args->engine, &args->kv_cache_dtype);
  AddWeightFlags(cmd, &args->engine);
  cmd->add_flag("--quiet", args->quiet, "Do not print the KV cache and timing lines to stderr");
  cmd->callback([args] { RunGenerate(*args); });
}

}  // namespace tq
