// Loading a model directory into a ready-to-run model with its KV cache.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/runtime/engine_options.h"
#include "engine/runtime/engine_stats.h"
#include "engine/runtime/kv_dtype_auto.h"
#include "engine/runtime/model_executor.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/backend.h"

namespace tq {

/// A loaded model: files, tokenizer and the executor whose workers hold each
/// rank's backend, weights and paged KV cache memory (its block pool is the
/// scheduler's); see docs/parallelism.md. Thread ownership: the engine
/// thread; tokenizer and files are safe to read from any thread.
struct LoadedModel {
  LoadedModel() = default;
  LoadedModel(LoadedModel&&) = default;
  LoadedModel& operator=(LoadedModel&&) = default;

  ModelFiles files;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ModelExecutor> executor;
  int32_t max_model_len = 0;
  // How the tq key statistics were obtained ("" for other KV dtypes).
  std::string kv_calibration_source;
  // What --kv-cache-dtype auto measured and chose (automatic false otherwise).
  KvDtypeChoice kv_dtype_choice;
  // What besides the tokens decides the K/V a block holds (the tq key
  // statistics' fingerprint, sink tokens): the prefix cache's extra key.
  std::string kv_fingerprint;
  // Why --device auto runs on the CPU ("" otherwise); the CLI logs it once,
  // after its own checks, so that a start-up error stays one line.
  std::string device_note;
};

/// Each rank's weights and KV pool (one entry without tensor parallelism).
std::vector<RankMemory> DescribeRanks(const LoadedModel& m);

/// Validates the options, loads config, tokenizer and weights, calibrates the
/// tq key statistics when the KV dtype needs them, and allocates the KV pool
/// (options.kv_cache_memory bytes; 0 = one max_model_len sequence; it must
/// hold at least one, as in vLLM). With options.tensor_parallel_size N > 1,
/// builds N ranks, each with its weight slices and a pool of its KV heads:
/// on CUDA devices 0..N-1 joined by NCCL (--device cuda, or auto with N
/// devices; ChooseTpDevices), else on N CPU backends of num_threads / N
/// compute threads joined by the in-process communicator. kv_cache_memory is
/// each rank's budget; without it, --gpu-memory-utilization applies to each
/// rank's GPU and the pool (the same block count on every rank) is the
/// smallest of those budgets. Throws tq::Error naming the flag or file.
LoadedModel LoadModel(const EngineOptions& options);

/// LoadModel without the tokenizer (LoadedModel::tokenizer stays null), for
/// builds without sentencepiece (-DTQ_SENTENCEPIECE=OFF: the GPU test
/// machine, tests/cuda) that run token ids only. A tq KV cache dtype then
/// needs options.kv_calibration_stats to name an existing file (calibrating
/// encodes text); otherwise tq::Error.
LoadedModel LoadModelWithoutTokenizer(const EngineOptions& options);

}  // namespace tq
