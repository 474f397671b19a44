// KV cache and tensor-parallel flags shared by `generate`, `eval` and `serve`.
#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/common/error.h"
#include "server/cli_commands.h"

namespace tq {

void AddKvCacheFlags(CLI::App* cmd, EngineOptions* engine, std::string* kv_cache_dtype) {
  // The device decides where the KV pool lives, so its flags come with the pool's.
  engine->device = kernels::DeviceKind::kAuto;
  cmd->add_option_function<std::string>(
         "--device",
         [engine](const std::string& value) {
           if (!kernels::ParseDeviceKind(value, &engine->device)) {
             throw CLI::ValidationError("--device",
                                        "expected auto, cpu or cuda, got '" + value + "'");
           }
         },
         "Compute device: auto (CUDA when a GPU is present, else CPU), cpu or cuda")
      ->default_str("auto");
  AddRangedOption(cmd, "--gpu-memory-utilization", engine->gpu_memory_utilization,
                  "GPU: fraction of device memory for weights, activations and the KV pool "
                  "(sizes the pool when --kv-cache-memory is 0)",
                  0.01, 1.0);
  cmd->add_flag("--cuda-graphs", engine->cuda_graphs,
                "CUDA: run decode steps from CUDA graphs captured per padded batch size "
                "(off by default until measured; docs/cuda.md)");
  cmd->add_option("--kv-cache-dtype", *kv_cache_dtype,
                  "KV cache format: auto (the smallest of tq3, tq4, int8 and, on the CPU, "
                  "tqk3v2 within --kv-quality-budget, measured at start-up), fp32, fp16, bf16, "
                  "int8, int4, "
                  "tq3, tq4, tqk3v2 (CPU only: 3-bit keys, 2-bit values)")
      ->capture_default_str();
  AddRangedOption(cmd, "--kv-quality-budget", engine->kv_quality_budget,
                  "auto: the largest perplexity ratio to an fp32 cache a format may cost on "
                  "held-out calibration text",
                  1.0, 100.0);
  // Parsed here rather than by CLI11's size_t conversion, which refuses the
  // "1e15" its own range text shows; "-5" cannot wrap around.
  cmd->add_option_function<std::string>(
         "--kv-cache-memory",
         [engine](const std::string& text) {
           engine->kv_cache_memory = ParseByteCount("--kv-cache-memory", text, 1e15);
         },
         "KV pool size in bytes, e.g. 4000000000 or 4e9 (0 = one --max-model-len sequence)")
      ->type_name("BYTES in [0 - 1e15]");
  AddRangedOption(cmd, "--block-size", engine->block_size, "Tokens per KV block", 1, 1024);
  cmd->add_option("--kv-sink-tokens", engine->kv_sink_tokens,
                  "tq: keep the first N positions of each sequence exact (0..8)")
      ->capture_default_str();
  cmd->add_option("--kv-calibration-text", engine->kv_calibration_text,
                  "Text to calibrate the tq key statistics on (default: built-in text)");
  cmd->add_option("--kv-calibration-stats", engine->kv_calibration_stats,
                  "JSON file of tq key statistics: loaded if it exists, else written");
  AddRangedOption(cmd, "--tensor-parallel-size", engine->tensor_parallel_size,
                  "Tensor-parallel ranks in this process (one thread and backend each: rank r "
                  "on CUDA device r, or CPU backends that split the CPU threads; "
                  "docs/parallelism.md)",
                  1, 64);
  cmd->add_flag("--enable-expert-parallel", engine->enable_expert_parallel,
                "MoE models: place whole experts on the tensor-parallel ranks (num_experts / N "
                "each, partial outputs all-reduced) instead of splitting every expert's width");
}

size_t ParseByteCount(const std::string& flag, const std::string& text, double max) {
  const auto refuse = [&](const std::string& why) {
    throw CLI::ValidationError(flag, "'" + text + "' " + why);
  };
  // Digits, then optionally a fraction and an exponent: no sign, no hex, no
  // inf/nan (which strtod would take).
  const bool form = !text.empty() && std::isdigit(static_cast<unsigned char>(text[0])) &&
                    text.find_first_not_of("0123456789.eE+-") == std::string::npos;
  char* end = nullptr;
  errno = 0;
  const double value = form ? std::strtod(text.c_str(), &end) : 0.0;
  if (!form || end != text.c_str() + text.size() || errno == ERANGE) {
    refuse("is not a byte count (an integer such as 4000000000, or 4e9)");
  }
  if (value > max) {
    char bound[32];
    std::snprintf(bound, sizeof(bound), "%g", max);
    refuse(std::string("is more than ") + bound + " bytes");
  }
  if (value != std::floor(value)) refuse("is not a whole number of bytes");
  // Integers beyond 2^53 in decimal keep every digit (strtod would round).
  if (text.find_first_not_of("0123456789") == std::string::npos) {
    return static_cast<size_t>(std::strtoull(text.c_str(), nullptr, 10));
  }
  return static_cast<size_t>(value);
}

kernels::KvDtype ParseKvDtypeFlag(const std::string& value) {
  kernels::KvDtype dtype;
  if (!kernels::ParseKvDtype(value, &dtype)) {
    throw Error("--kv-cache-dtype: unknown value '" + value +
                "' (expected auto, fp32, fp16, bf16, int8, int4, tq3, tq4 or tqk3v2)");
  }
  return dtype;
}

void ApplyKvDtypeFlag(const std::string& value, EngineOptions* engine) {
  engine->kv_cache_dtype_auto = value == "auto";
  engine->kv_cache_dtype =
      engine->kv_cache_dtype_auto ? kernels::KvDtype::kInt8 : ParseKvDtypeFlag(value);
}

std::string KvCacheLine(kernels::KvDtype dtype, int32_t head_dim, int32_t num_blocks,
                        int32_t block_size, size_t bytes, const std::string& calibration_source,
                        const std::string& choice) {
  char line[256];
  std::snprintf(line, sizeof(line),
                "KV cache %s (%.3g bits/element): %d blocks x %d = %lld tokens in %.2f MiB",
                std::string(kernels::KvDtypeName(dtype)).c_str(),
                kernels::KvBitsPerElement(dtype, head_dim), num_blocks, block_size,
                static_cast<long long>(int64_t{num_blocks} * block_size),
                static_cast<double>(bytes) / (1 << 20));
  std::string out = line;
  if (!calibration_source.empty()) out += "; tq keys " + calibration_source;
  if (!choice.empty()) out += "; " + choice;
  return out;
}

}  // namespace tq
