// End-to-end long-context speed on the CPU (issue 21 item 4, issue 22 item 3):
// decode tokens/s of a random-weight model with head_dim 128 (GQA 4:1) at
// several contexts, for several KV cache formats measured side by side in one
// process, and prefill tokens/s of a fresh prompt per format.
//
//   tq_bench_long_context [--contexts 2048,8192,16384,32768] [--dtypes fp16,int8,tq3]
//                         [--layers 4] [--hidden 1024] [--steps 8] [--repeats 3]
//                         [--threads 0] [--prefill-tokens 0] [--model DIR]
//
// The model (hidden 1024, 8 heads of 128, 2 KV heads, intermediate 2816,
// vocab 512 with the bundled tokenizer, fp16 weights, `--layers` layers) is
// written to a temporary directory unless --model is given; the KV cache is
// what varies, so the weights are kept small next to a 32K context. One
// LoadedModel per dtype (tq formats calibrated on the built-in text). Each
// cache is filled once with random K/V for positions [0, max context) by
// KvWrite (no 32K prefill: its cost is quadratic and not what is measured),
// then each repeat runs, for every context C and every dtype in turn
// (interleaved), `--steps` decode steps of one token at positions C, C+1, ...
// through LlamaModel::Forward (embedding, all layers with attention over C
// cached positions, lm_head). Reported: median ms/token, tok/s, the ratio to
// the first dtype, and how many C-token sequences one GiB of KV holds.
// --prefill-tokens P also times a P-token prefill from position 0 (chunks of
// 512) per dtype, interleaved the same way.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_util.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/random_model.h"
#include "engine/runtime/model_loader.h"
#include "kernels/backend.h"

namespace {

using Clock = std::chrono::steady_clock;
using tq::kernels::KvDtype;

struct Flags {
  std::vector<long> contexts = {2048, 8192, 16384, 32768};
  std::vector<std::string> dtypes = {"fp16", "int8", "tq3"};
  int layers = 4, hidden = 1024, steps = 8, repeats = 3, threads = 0, prefill = 0;
  std::string model;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  CLI::App app("Decode time per token at long contexts per KV format.", "tq_bench_long_context");
  tq::bench::AddList(app, "--contexts", f.contexts, "Context lengths");
  tq::bench::AddList(app, "--dtypes", f.dtypes, "KV dtypes")->check(tq::bench::KvDtypeName());
  app.add_option("--layers", f.layers, "Layers of the random model")->capture_default_str();
  app.add_option("--hidden", f.hidden, "Hidden size of the random model")->capture_default_str();
  app.add_option("--steps", f.steps, "Decode steps per context")->capture_default_str();
  app.add_option("--repeats", f.repeats)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--threads", f.threads)->capture_default_str();
  app.add_option("--prefill-tokens", f.prefill, "Also time a prefill of this many tokens")
      ->capture_default_str();
  app.add_option("--model", f.model, "Model directory instead of the random model");
  tq::bench::ParseOrExit(app, argc, argv);
  return f;
}

// One format: its loaded model, a block table covering the longest context, timings.
struct Run {
  KvDtype dtype;
  tq::LoadedModel m;
  std::unique_ptr<tq::BlockPool> pool;
  std::unique_ptr<tq::BlockTable> table;
  std::vector<std::vector<double>> ms_per_token;  // [context][repeat]
  std::vector<double> prefill_s;                  // [repeat]
};

// Random K/V (N(0, 1)) for positions [0, n) of every layer.
void FillCache(Run& r, int32_t n) {
  const tq::kernels::KvLayout& l = r.m.executor->cache().layout();
  const int32_t row = l.num_kv_heads * l.head_dim;
  constexpr int32_t kChunk = 1024;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> k(static_cast<size_t>(kChunk) * row), v(k.size());
  std::vector<int32_t> slots(kChunk), positions(kChunk);
  for (int32_t layer = 0; layer < r.m.executor->cache().num_layers(); ++layer) {
    for (int32_t begin = 0; begin < n; begin += kChunk) {
      const int32_t count = std::min(kChunk, n - begin);
      for (float& x : k) x = normal(rng);
      for (float& x : v) x = normal(rng);
      for (int32_t t = 0; t < count; ++t) {
        slots[t] = static_cast<int32_t>(r.table->Slot(begin + t));
        positions[t] = begin + t;
      }
      tq::kernels::KvWriteParams p;
      p.k = k.data();
      p.v = v.data();
      p.slot_mapping = slots.data();
      p.num_tokens = count;
      p.cache = r.m.executor->cache().Layer(layer);
      p.positions = positions.data();
      r.m.executor->backend().KvWrite(p);
    }
  }
}

// ms per token of `steps` single-token decode steps at positions ctx, ctx + 1, ...
double DecodeMs(Run& r, int32_t ctx, int32_t steps) {
  std::vector<float> logits;
  const auto start = Clock::now();
  for (int32_t s = 0; s < steps; ++s) {
    tq::ForwardBatch b;
    b.num_seqs = 1;
    b.block_tables = r.table->blocks();
    b.max_blocks_per_seq = static_cast<int32_t>(b.block_tables.size());
    b.token_ids = {1 + (ctx + s) % 500};
    b.positions = {ctx + s};
    b.token_seq = {0};
    b.slot_mapping = {static_cast<int32_t>(r.table->Slot(ctx + s))};
    b.logit_indices = {0};
    r.m.executor->Forward(b, &logits);
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count() / steps;
}

std::string Name(KvDtype d) {
  return std::string(tq::kernels::KvDtypeName(d));
}

}  // namespace

int main(int argc, char** argv) try {
  const Flags f = ParseFlags(argc, argv);
  const int32_t max_ctx =
      static_cast<int32_t>(*std::max_element(f.contexts.begin(), f.contexts.end()));
  const int32_t positions = std::max(max_ctx, f.prefill) + f.steps + 2;
  std::string dir = f.model;
  std::filesystem::path tmp;
  if (dir.empty()) {
    tmp = std::filesystem::temp_directory_path() /
          ("tq_long_context_" + std::to_string(static_cast<long>(::getpid())));
    tq::RandomModelSpec spec;
    tq::ModelConfig& c = spec.config;
    c.hidden_size = f.hidden;
    c.num_attention_heads = f.hidden / 128;
    c.num_key_value_heads = std::max(1, c.num_attention_heads / 4);
    c.head_dim = 128;
    c.intermediate_size = f.hidden * 11 / 4;
    c.num_hidden_layers = f.layers;
    c.vocab_size = 512;
    c.max_position_embeddings = positions;
    c.rope_theta = 500000.0;
    tq::WriteRandomModel(tmp.string(), spec, std::string(TQ_MODEL_DIR) + "/tokenizer.model");
    dir = tmp.string();
  }

  std::vector<Run> runs;
  runs.reserve(f.dtypes.size());
  for (const std::string& name : f.dtypes) {
    tq::EngineOptions o;
    o.model_dir = dir;
    o.num_threads = f.threads;
    o.max_model_len = positions;
    tq::kernels::ParseKvDtype(name, &o.kv_cache_dtype);  // checked by ParseFlags
    Run r{o.kv_cache_dtype, tq::LoadModel(o), nullptr, nullptr, {}, {}};
    const tq::kernels::KvLayout& l = r.m.executor->cache().layout();
    r.pool = std::make_unique<tq::BlockPool>(l.num_blocks);
    r.table = std::make_unique<tq::BlockTable>(l.block_size);
    r.table->EnsureCapacity(*r.pool, positions);
    FillCache(r, max_ctx);
    r.ms_per_token.assign(f.contexts.size(), {});
    runs.push_back(std::move(r));
  }
  const tq::ModelConfig& config = runs.front().m.files.config;
  std::printf("model: %d layers, hidden %d, %d heads / %d KV heads, head_dim %d; %d threads\n",
              config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
              config.num_key_value_heads, config.head_dim, tq::kernels::CpuThreadCount(f.threads));

  for (int rep = 0; rep < f.repeats; ++rep) {
    for (size_t ci = 0; ci < f.contexts.size(); ++ci) {
      for (Run& r : runs) {
        DecodeMs(r, static_cast<int32_t>(f.contexts[ci]), 1);  // warm-up step
        r.ms_per_token[ci].push_back(DecodeMs(r, static_cast<int32_t>(f.contexts[ci]), f.steps));
      }
    }
    if (f.prefill > 0) {
      std::vector<int32_t> prompt(f.prefill);
      for (int32_t i = 0; i < f.prefill; ++i) prompt[i] = 1 + i % 500;
      for (Run& r : runs) {
        std::vector<float> logits;
        const auto start = Clock::now();
        tq::PrefillSequence(*r.m.executor, *r.table, prompt, 0, 512, false, &logits);
        r.prefill_s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      }
    }
  }

  std::printf(
      "\n| context | dtype | ms/token | tok/s | speed vs %s | sequences of this context per GiB of "
      "KV |\n|---|---|---|---|---|---|\n",
      f.dtypes.front().c_str());
  for (size_t ci = 0; ci < f.contexts.size(); ++ci) {
    const double base = tq::bench::UpperMedian(runs.front().ms_per_token[ci]);
    for (Run& r : runs) {
      const tq::kernels::KvLayout& l = r.m.executor->cache().layout();
      const double bytes_per_token =
          static_cast<double>(tq::PagedKvCache::BytesPerBlock(config.num_hidden_layers, l, 0)) /
          l.block_size;
      const double ms = tq::bench::UpperMedian(r.ms_per_token[ci]);
      std::printf("| %ld | %s | %.2f | %.1f | %.2fx | %.1f |\n", f.contexts[ci],
                  Name(r.dtype).c_str(), ms, 1e3 / ms, base / ms,
                  static_cast<double>(1 << 30) / (bytes_per_token * f.contexts[ci]));
    }
  }
  if (f.prefill > 0) {
    std::printf("\n| prefill %d tokens | tok/s | speed vs %s |\n|---|---|---|\n", f.prefill,
                f.dtypes.front().c_str());
    const double base = tq::bench::UpperMedian(runs.front().prefill_s);
    for (Run& r : runs) {
      const double s = tq::bench::UpperMedian(r.prefill_s);
      std::printf("| %s | %.1f | %.2fx |\n", Name(r.dtype).c_str(), f.prefill / s, base / s);
    }
  }
  if (!tmp.empty()) std::filesystem::remove_all(tmp);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tq_bench_long_context: %s\n", e.what());
  return 1;
}
