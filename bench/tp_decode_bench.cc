// A decode step under tensor parallelism vs one rank, on the CPU backend:
// milliseconds per forward pass of B sequences x 1 token, for each
// --tensor-parallel-size, measured side by side in one process.
//
//   tq_bench_tp_decode --model DIR [--tp 1,2] [--threads 0,0] [--batch 1,16]
//                      [--steps 32] [--repeats 3] [--kv-cache-dtype fp32]
//
// Every configuration (TP size with its --threads, zipped; a single --threads
// value applies to all) is loaded once; the threads are split between the
// ranks, as `tqserve --tensor-parallel-size` does. Each repeat runs every (TP, batch)
// in turn, interleaved so that load from other processes disturbs all alike:
// B sequences of 16 random prompt ids are prefilled, then --steps decode
// steps (one token per sequence, fed greedy tokens) are timed. Reports the
// median ms/step and B / that in tokens/s. See docs/PERFORMANCE.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_util.h"
#include "engine/kv/block_pool.h"
#include "engine/runtime/model_loader.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kPromptTokens = 16;

// Seconds per decode step of `batch` sequences (median of `steps`).
double DecodeStep(tq::LoadedModel& m, int batch, int steps, uint32_t seed) {
  const tq::kernels::KvLayout& layout = m.executor->cache().layout();
  tq::BlockPool pool(layout.num_blocks);
  std::vector<tq::BlockTable> tables(batch, tq::BlockTable(layout.block_size));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(3, m.files.config.vocab_size - 1);
  std::vector<std::vector<int32_t>> seqs(batch);
  for (int s = 0; s < batch; ++s) {
    if (!tables[s].EnsureCapacity(pool, kPromptTokens + steps)) {
      std::fprintf(stderr, "KV pool too small: raise --kv-cache-memory\n");
      std::exit(1);
    }
    seqs[s].push_back(1);
    for (int i = 1; i < kPromptTokens; ++i) seqs[s].push_back(id(rng));
  }
  std::vector<double> times;
  std::vector<float> logits;
  const int32_t vocab = m.files.config.vocab_size;
  for (int step = -1; step < steps; ++step) {  // step -1: the prefill, untimed
    tq::ForwardBatch b;
    b.num_seqs = batch;
    b.max_blocks_per_seq = static_cast<int32_t>(tables[0].blocks().size());
    for (int s = 0; s < batch; ++s) {
      const auto& blocks = tables[s].blocks();
      b.block_tables.insert(b.block_tables.end(), blocks.begin(), blocks.end());
      const int32_t begin = step < 0 ? 0 : static_cast<int32_t>(seqs[s].size()) - 1;
      for (int32_t pos = begin; pos < static_cast<int32_t>(seqs[s].size()); ++pos) {
        b.token_ids.push_back(seqs[s][pos]);
        b.positions.push_back(pos);
        b.token_seq.push_back(s);
        b.slot_mapping.push_back(static_cast<int32_t>(tables[s].Slot(pos)));
      }
      b.logit_indices.push_back(b.num_tokens() - 1);
    }
    const auto t0 = Clock::now();
    m.executor->Forward(b, &logits);
    if (step >= 0) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    for (int s = 0; s < batch; ++s) {
      const float* row = logits.data() + static_cast<size_t>(s) * vocab;
      seqs[s].push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
    }
  }
  for (auto& t : tables) t.Release(pool);
  return tq::bench::UpperMedian(times);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model;
  std::vector<int> tps = {1, 2}, batches = {1, 16};
  int steps = 32, repeats = 3;
  std::vector<int> threads = {0};
  std::string kv = "fp32";
  CLI::App app("Decode step under tensor parallelism vs one rank (CPU backend).",
               "tq_bench_tp_decode");
  app.add_option("--model", model, "Model directory")->required();
  tq::bench::AddList(app, "--tp", tps, "Tensor-parallel sizes");
  tq::bench::AddList(app, "--batch", batches, "Batch sizes");
  app.add_option("--steps", steps)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats)->capture_default_str()->check(CLI::PositiveNumber);
  tq::bench::AddList(app, "--threads", threads, "Threads: one value, or one per --tp value");
  app.add_option("--kv-cache-dtype", kv)->capture_default_str()->check(tq::bench::KvDtypeName());
  tq::bench::ParseOrExit(app, argc, argv);
  if (threads.size() == 1) threads.resize(tps.size(), threads[0]);
  if (threads.size() != tps.size()) {
    std::fprintf(stderr, "--threads needs one value or one per --tp value\n");
    return 2;
  }
  std::vector<std::unique_ptr<tq::LoadedModel>> loaded;
  for (size_t t = 0; t < tps.size(); ++t) {
    const int tp = tps[t];
    tq::EngineOptions o;
    o.model_dir = model;
    o.num_threads = threads[t];
    o.tensor_parallel_size = tp;
    o.max_model_len = 256;
    tq::kernels::ParseKvDtype(kv, &o.kv_cache_dtype);  // checked above
    // A pool (per rank) of max_batch sequences of max_model_len tokens.
    const tq::ModelConfig c = tq::LoadModelFiles(model).config;
    tq::kernels::KvLayout layout;
    layout.dtype = o.kv_cache_dtype;
    layout.num_kv_heads = std::max(1, c.num_key_value_heads / tp);
    layout.head_dim = c.head_dim;
    const int max_batch = *std::max_element(batches.begin(), batches.end());
    o.kv_cache_memory = tq::PagedKvCache::BytesPerBlock(c.num_hidden_layers, layout) *
                        (o.max_model_len / layout.block_size) * max_batch;
    loaded.push_back(std::make_unique<tq::LoadedModel>(tq::LoadModel(o)));
    std::printf("config %zu: TP=%d, --threads %d (%d per rank), %d KV blocks\n", t, tp, threads[t],
                std::max(1, tq::kernels::CpuThreadCount(threads[t]) / tp),
                loaded.back()->executor->cache().layout().num_blocks);
  }
  std::vector<std::vector<std::vector<double>>> ms(
      tps.size(), std::vector<std::vector<double>>(batches.size()));
  for (int rep = 0; rep < repeats; ++rep) {
    for (size_t b = 0; b < batches.size(); ++b) {
      for (size_t t = 0; t < tps.size(); ++t) {
        ms[t][b].push_back(1e3 * DecodeStep(*loaded[t], batches[b], steps, 1234 + rep));
      }
    }
  }
  std::printf("%-4s %-8s %-6s %-14s %-12s %-10s\n", "TP", "threads", "batch", "ms/step (med)",
              "tokens/s", "vs first");
  for (size_t b = 0; b < batches.size(); ++b) {
    double base = 0;
    for (size_t t = 0; t < tps.size(); ++t) {
      const double med = tq::bench::UpperMedian(ms[t][b]);
      if (t == 0) base = med;
      std::printf("%-4d %-8d %-6d %-14.3f %-12.1f %-10.2f\n", tps[t], threads[t], batches[b], med,
                  batches[b] * 1e3 / med, base / med);
    }
  }
  return 0;
}
