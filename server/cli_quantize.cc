// `tqserve quantize`: offline weight quantization by a config, or by a
// per-module format search on calibration text (docs/quantization.md), and
// the --quantization-config flag of serve/generate/eval.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "engine/common/error.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"
#include "engine/quant/quant_config.h"
#include "engine/quant/quantized_checkpoint.h"
#include "engine/quant/sensitivity.h"
#include "engine/runtime/offline_engine.h"
#include "engine/runtime/perplexity.h"
#include "server/cli_commands.h"

namespace tq {
namespace {

struct QuantizeArgs {
  std::string model_dir;
  std::string config;
  std::string calibration_text;
  std::optional<double> target_bits;
  bool symmetric = false;
  std::string loss_scale = "relative";
  int32_t max_calibration_tokens = 8192;
  int32_t threads = 0;
  std::string out_dir;
  std::string config_out;
};

std::string ReadText(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the " + flag + " file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Calibration tokens: each document (blank-line separated) with BOS first,
// concatenated, at most `limit` tokens.
std::vector<int32_t> CalibrationTokens(OfflineEngine& g, const std::string& path, int32_t limit) {
  std::vector<int32_t> tokens;
  for (const std::string& doc : SplitDocuments(ReadText(path, "--calibration-text"))) {
    tokens.push_back(g.tokenizer().bos_id());
    const std::vector<int32_t> ids = g.tokenizer().Encode(doc, /*add_special=*/false);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    if (static_cast<int32_t>(tokens.size()) >= limit) break;
  }
  if (static_cast<int32_t>(tokens.size()) > limit) tokens.resize(static_cast<size_t>(limit));
  if (tokens.size() < 16) {
    throw Error(path + ": --calibration-text has " + std::to_string(tokens.size()) +
                " tokens; at least 16 are needed");
  }
  return tokens;
}

std::map<std::string, quant::QuantFormat> SearchFormats(const QuantizeArgs& args,
                                                        const ModelConfig& config) {
  EngineOptions options;
  options.model_dir = args.model_dir;
  options.num_threads = args.threads;
  options.kv_cache_dtype = kernels::KvDtype::kF32;  // measure the weights alone
  OfflineEngine generator(options);
  const std::vector<int32_t> tokens =
      CalibrationTokens(generator, args.calibration_text, args.max_calibration_tokens);
  const quant::ActivationMoments moments = quant::MeasureActivationMoments(generator, tokens);
  const SafetensorsCheckpoint ckpt(args.model_dir);
  if (args.loss_scale != "relative" && args.loss_scale != "absolute") {
    throw Error("--sensitivity-loss: unknown value '" + args.loss_scale +
                "' (expected relative or absolute)");
  }
  const std::vector<quant::ModuleCandidates> scored = quant::ScoreModules(
      ckpt, config, moments, args.symmetric,
      args.loss_scale == "absolute" ? quant::LossScale::kAbsolute : quant::LossScale::kRelative);
  auto formats = quant::AllocateBits(scored, *args.target_bits);
  std::map<std::string, int> counts;
  for (const auto& [name, f] : formats) ++counts[f.ToString()];
  std::string mix;
  for (const auto& [f, n] : counts) mix += (mix.empty() ? "" : ", ") + std::to_string(n) + " " + f;
  std::printf(
      "calibrated on %lld tokens of %s; chose %s: %.4f bits per weight (target %.4f), "
      "estimated loss %.6g\n",
      static_cast<long long>(moments.tokens()), args.calibration_text.c_str(), mix.c_str(),
      quant::AverageBits(quant::LlamaLinearModules(config), formats), *args.target_bits,
      quant::TotalLoss(scored, formats));
  return formats;
}

void RunQuantize(const QuantizeArgs& args) {
  const bool search = !args.calibration_text.empty() || args.target_bits.has_value();
  if (search == !args.config.empty()) {
    throw Error("quantize: give either --config FILE or --calibration-text FILE --target-bits B");
  }
  if (search && (args.calibration_text.empty() || !args.target_bits)) {
    throw Error("quantize: --calibration-text and --target-bits go together");
  }
  if (args.out_dir.empty() && args.config_out.empty()) {
    throw Error("quantize: give --out DIR (a quantized checkpoint) and/or --config-out FILE");
  }
  if (args.max_calibration_tokens < 16) throw Error("--max-calibration-tokens must be >= 16");
  const ModelFiles files = LoadModelFiles(args.model_dir);
  const auto start = std::chrono::steady_clock::now();
  const std::map<std::string, quant::QuantFormat> formats =
      search ? SearchFormats(args, files.config)
             : quant::PlanFormats(quant::QuantConfig::Load(args.config), files.config);
  if (!args.config_out.empty()) {
    const std::string comment = search ? "chosen by tqserve quantize --target-bits " +
                                             std::to_string(*args.target_bits) + " on " +
                                             args.calibration_text + " for " + args.model_dir
                                       : "resolved from " + args.config + " for " + args.model_dir;
    std::ofstream out(args.config_out);
    out << quant::PerModuleConfigJson(formats, comment);
    if (!out) throw Error(args.config_out + ": write failed");
    std::printf("wrote %s\n", args.config_out.c_str());
  }
  if (!args.out_dir.empty()) {
    const quant::QuantizeSummary s =
        quant::WriteQuantizedCheckpoint(args.model_dir, files.config, formats, args.out_dir);
    std::printf(
        "wrote %s: %d modules quantized, %.4f bits per weight over the linear modules, %zu bytes "
        "(%.1f s)\n",
        args.out_dir.c_str(), s.quantized_modules, s.average_bits, s.bytes_written,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::fflush(stdout);
}

}  // namespace

void AddWeightFlags(CLI::App* cmd, EngineOptions* engine) {
  cmd->add_option("--quantization-config", engine->quantization_config,
                  "Quantize the linear weights at load time by this JSON config "
                  "(configs/llama_*.json, docs/quantization.md)");
  // vLLM's --dtype values (half/float aliases included); default auto as in vLLM.
  engine->weight_dtype = DenseDtype::kAuto;
  const std::map<std::string, DenseDtype> dtypes = {
      {"auto", DenseDtype::kAuto},     {"float32", DenseDtype::kFloat32},
      {"float", DenseDtype::kFloat32}, {"float16", DenseDtype::kFloat16},
      {"half", DenseDtype::kFloat16},  {"bfloat16", DenseDtype::kBFloat16}};
  cmd->add_option_function<std::string>(
         "--dtype",
         [engine, dtypes](const std::string& v) {
           const auto it = dtypes.find(v);
           if (it == dtypes.end()) {
             throw CLI::ValidationError(
                 "--dtype",
                 "unknown value '" + v + "' (expected auto, float32, float16 or bfloat16)");
           }
           engine->weight_dtype = it->second;
         },
         "Dense weight storage: auto (the checkpoint's dtype; 16-bit for the embeddings of a "
         "quantized model), float32, float16 or bfloat16")
      ->default_str("auto");
}

void AddQuantizeCommand(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  args->model_dir = TQ_DEFAULT_MODEL_DIR;
  auto* cmd = app.add_subcommand(
      "quantize",
      "Write a quantized checkpoint by a config, or choose per-module formats on calibration "
      "text for a bits-per-weight target");
  cmd->add_option("--model", args->model_dir, "Hugging Face model directory")
      ->capture_default_str();
  cmd->add_option("--config", args->config, "Quantization config (JSON) to apply");
  cmd->add_option("--calibration-text", args->calibration_text,
                  "Text to measure activation statistics on (documents split at blank lines)");
  cmd->add_option("--target-bits", args->target_bits,
                  "Average bits per weight over the linear modules (incl. scales/zeros)")
      ->check(CLI::Range(4.0, 16.0));
  cmd->add_flag("--symmetric", args->symmetric,
                "Search symmetric formats (default: asymmetric, with zero points)");
  cmd->add_option("--sensitivity-loss", args->loss_scale,
                  "relative (module output error / output energy) or absolute (the GPTQ/AWQ "
                  "diagonal-Hessian error as is)")
      ->capture_default_str();
  cmd->add_option("--max-calibration-tokens", args->max_calibration_tokens,
                  "Calibration tokens to run")
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU compute threads (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--out", args->out_dir, "Output directory for the quantized checkpoint");
  cmd->add_option("--config-out", args->config_out,
                  "Write the chosen per-module config (JSON) here, for review");
  cmd->callback([args] { RunQuantize(*args); });
}

}  // namespace tq
