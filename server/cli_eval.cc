// `tqserve eval`: sliding-window perplexity of a model over a text file.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/runtime/model_loader.h"
#include "engine/runtime/offline_engine.h"
#include "engine/runtime/perplexity.h"
#include "server/cli_commands.h"

namespace tq {
namespace {

struct EvalArgs {
  EngineOptions engine;
  std::string kv_cache_dtype = kDefaultKvCacheDtype;  // docs/kv-cache.md
  std::string text_path;
  std::optional<int32_t> ctx, stride;
  std::optional<int32_t> max_documents;
};

// Reads the whole --text file and splits it into documents.
std::vector<std::string> ReadDocuments(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the --text file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(path + ": read error");
  std::vector<std::string> docs = SplitDocuments(ss.str());
  if (docs.empty()) throw Error(path + ": no text (the --text file is empty or blank)");
  return docs;
}

void RunEval(EvalArgs& args) {
  ApplyKvDtypeFlag(args.kv_cache_dtype, &args.engine);
  if (args.max_documents && *args.max_documents < 1) {
    throw Error("--max-documents must be >= 1");
  }
  std::vector<std::string> texts = ReadDocuments(args.text_path);  // before the model loads
  if (args.max_documents && static_cast<size_t>(*args.max_documents) < texts.size()) {
    texts.resize(static_cast<size_t>(*args.max_documents));
  }

  const auto load_start = std::chrono::steady_clock::now();
  OfflineEngine generator(args.engine);
  const int32_t max_ctx = generator.max_model_len();
  const int32_t ctx = args.ctx.value_or(max_ctx);
  if (ctx < 2 || ctx > max_ctx) {
    throw Error("--ctx " + std::to_string(ctx) + ": must be in [2, " + std::to_string(max_ctx) +
                "] (the model's context)");
  }
  const int32_t stride = args.stride.value_or(std::max(1, ctx / 2));
  if (stride < 1 || stride > ctx) {
    throw Error("--stride " + std::to_string(stride) + ": must be in [1, --ctx " +
                std::to_string(ctx) + "]");
  }

  std::vector<std::vector<int32_t>> docs;
  docs.reserve(texts.size());
  for (const std::string& text : texts) {
    std::vector<int32_t> ids = generator.tokenizer().Encode(text, /*add_special=*/false);
    ids.insert(ids.begin(), generator.tokenizer().bos_id());
    docs.push_back(std::move(ids));
  }

  const auto start = std::chrono::steady_clock::now();
  const PerplexityResult r = EvaluatePerplexity(generator, docs, ctx, stride);
  const auto end = std::chrono::steady_clock::now();
  if (r.num_predicted == 0) {
    throw Error(args.text_path + ": no document has 2 or more tokens to score");
  }

  std::printf(
      "perplexity %.4f over %lld tokens (%zu documents, ctx %d, stride %d, kv-cache-dtype %s)\n",
      r.perplexity, static_cast<long long>(r.num_predicted), docs.size(), r.context, r.stride,
      std::string(kernels::KvDtypeName(generator.kv_cache().layout().dtype)).c_str());
  using Seconds = std::chrono::duration<double>;
  const double eval_s = Seconds(end - start).count();
  if (!generator.loaded().device_note.empty()) {
    std::fprintf(stderr, "[tqserve] %s\n", generator.loaded().device_note.c_str());
  }
  std::printf("%s\n", WeightsSummary(generator.model()).c_str());
  std::printf("%s\n", DescribeKvCache(generator).c_str());
  std::printf("time %.3f s (load %.3f s; %d windows; %.0f scored tokens/s)\n", eval_s,
              Seconds(start - load_start).count(), r.num_windows,
              static_cast<double>(r.num_predicted) / std::max(eval_s, 1e-9));
  std::fflush(stdout);
}

}  // namespace

void AddEvalCommand(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  args->engine.model_dir = TQ_DEFAULT_MODEL_DIR;
  auto* cmd = app.add_subcommand(
      "eval", "Perplexity over a text file (sliding windows; documents split at blank lines)");
  cmd->add_option("--model", args->engine.model_dir, "Hugging Face model directory")
      ->capture_default_str();
  cmd->add_option("--text", args->text_path,
                  "Text file; documents are separated by blank lines, each scored with BOS first")
      ->required();
  cmd->add_option("--ctx", args->ctx, "Window length in tokens (default: the model's context)");
  cmd->add_option("--stride", args->stride,
                  "Window advance in tokens; each window scores only its last stride tokens "
                  "(default: ctx/2)");
  cmd->add_option("--max-documents", args->max_documents, "Score only the first N documents");
  cmd->add_option("--threads", args->engine.num_threads,
                  "CPU compute threads (0 = all cores; capped at the core count)")
      ->capture_default_str();
  AddKvCacheFlags(cmd, &args->engine, &args->kv_cache_dtype);
  AddWeightFlags(cmd, &args->engine);
  cmd->callback([args] { RunEval(*args); });
}

}  // namespace tq
