// Subcommands of the tqserve binary. Each Add* registers one CLI11 subcommand
// whose callback runs it; errors surface as tq::Error, printed by main().
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "engine/runtime/offline_engine.h"
#include "kernels/kv_layout.h"

namespace tq {

class OfflineEngine;
struct EngineOptions;

/// Adds the option `name` (into `value`) to `cmd`: refused outside [lo, hi],
/// its default shown in --help.
template <typename T, typename Bound>
CLI::Option* AddRangedOption(CLI::App* cmd, const std::string& name, T& value,
                             const std::string& help, Bound lo, Bound hi) {
  return cmd->add_option(name, value, help)->check(CLI::Range(lo, hi))->capture_default_str();
}

/// A byte count as a flag takes it: a non-negative integer in decimal
/// ("1000000000") or exponent form ("1e9", "2.5e9"; the value must be a whole
/// number). Throws CLI::ValidationError naming `flag` for anything else or a
/// value above `max`.
size_t ParseByteCount(const std::string& flag, const std::string& text, double max);

/// Adds --kv-cache-dtype (into *kv_cache_dtype), --kv-quality-budget,
/// --kv-cache-memory, --block-size, --kv-calibration-text,
/// --kv-calibration-stats and --tensor-parallel-size to `cmd`.
void AddKvCacheFlags(CLI::App* cmd, EngineOptions* engine, std::string* kv_cache_dtype);
/// Parses a --kv-cache-dtype value other than auto; throws tq::Error naming the flag.
kernels::KvDtype ParseKvDtypeFlag(const std::string& value);
/// Applies a --kv-cache-dtype value to `engine`: "auto" sets kv_cache_dtype_auto
/// (and kv_cache_dtype to int8, the widest candidate, for sizing a default pool
/// before the choice); anything else as ParseKvDtypeFlag.
void ApplyKvDtypeFlag(const std::string& value, EngineOptions* engine);
/// The default --kv-cache-dtype of serve, generate and eval.
inline constexpr const char* kDefaultKvCacheDtype = "auto";
/// One line on a KV cache: format, bits per element, blocks, capacity in
/// tokens, MiB, then "; tq keys <calibration_source>" and "; <choice>" (auto's,
/// KvDtypeChoice::Describe) when present.
std::string KvCacheLine(kernels::KvDtype dtype, int32_t head_dim, int32_t num_blocks,
                        int32_t block_size, size_t bytes, const std::string& calibration_source,
                        const std::string& choice);

/// Adds --quantization-config FILE (weight quantization at load time,
/// docs/quantization.md) and --dtype auto|float32|float16|bfloat16 (dense
/// weight storage, as vLLM's; sets engine->weight_dtype to auto) to `cmd`.
void AddWeightFlags(CLI::App* cmd, EngineOptions* engine);

/// `tqserve quantize --model DIR (--config FILE | --calibration-text FILE
/// --target-bits B) (--out DIR | --config-out FILE)`: writes a quantized
/// checkpoint and/or the chosen per-module config (docs/quantization.md).
void AddQuantizeCommand(CLI::App& app);

/// KvCacheLine of the KV cache an OfflineEngine built.
std::string DescribeKvCache(const OfflineEngine& generator);

/// `tqserve generate --model DIR --prompt TEXT [sampling flags]`: prints the
/// prompt's continuation to stdout as it is generated.
void AddGenerateCommand(CLI::App& app);

/// `tqserve make-random-model --out DIR --preset NAME | --hidden-size ...`:
/// writes a random-weight HF checkpoint (engine/model/random_model.h).
void AddMakeRandomModelCommand(CLI::App& app);

/// `tqserve eval --model DIR --text FILE [--ctx N --stride S]`: perplexity.
void AddEvalCommand(CLI::App& app);

/// `tqserve serve --model DIR [--host --port --served-model-name ...]`: the
/// OpenAI-compatible HTTP daemon (server/http, docs/api.md). Runs until
/// SIGTERM/SIGINT, then drains and returns (exit status 0); when the engine
/// thread fails it fails every request, and throws tq::Error within ~3 s
/// (exit status 1) so that a supervisor restarts it.
void AddServeCommand(CLI::App& app);

/// The whole tqserve command line: parses `argv`, runs one subcommand and
/// returns the process exit status (0; 1 on tq::Error, printed as one
/// "tqserve: error:" line; 2 on a usage or internal error).
int RunTqserve(int argc, char** argv);

}  // namespace tq
