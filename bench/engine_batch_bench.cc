// Continuous-batching speed of the engine core without HTTP: output tokens/s
// when B sequences decode together (one forward pass per step), for several
// batch sizes measured side by side in one process.
//
//   tq_bench_engine_batch --model DIR [--batch 1,4,16] [--prompt-tokens 16]
//                         [--output-tokens 32] [--repeats 3] [--threads 0]
//                         [--kv-cache-dtype tq3|fp32|...]
//
// Each repeat runs every batch size in turn (interleaved, so load from other
// processes disturbs all alike). A run submits B requests of random prompt
// ids (BOS first) with ignore_eos and max_tokens = output tokens, and steps
// an EngineCore until all finish. Reports median output tokens/s over the
// whole run (prefill included) and of decode steps only, and the speed-up
// over the first batch size. See docs/PERFORMANCE.md.
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
#include "engine/runtime/engine_core.h"
#include "engine/runtime/model_loader.h"
#include "kernels/kv_layout.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string model;
  std::vector<int> batches = {1, 4, 16};
  int prompt_tokens = 16;
  int output_tokens = 32;
  int repeats = 3;
  int threads = 0;
  std::string kv = "tq3";
};

Flags Parse(int argc, char** argv) {
  Flags f;
  CLI::App app("Continuous-batching output tokens/s of the engine core per batch size.",
               "tq_bench_engine_batch");
  app.add_option("--model", f.model, "Model directory")->required();
  tq::bench::AddList(app, "--batch", f.batches, "Batch sizes");
  app.add_option("--prompt-tokens", f.prompt_tokens)->capture_default_str();
  app.add_option("--output-tokens", f.output_tokens)->capture_default_str();
  app.add_option("--repeats", f.repeats)->capture_default_str();
  app.add_option("--threads", f.threads, "Engine threads (0: all cores)")->capture_default_str();
  app.add_option("--kv-cache-dtype", f.kv)->capture_default_str()->check(tq::bench::KvDtypeName());
  tq::bench::ParseOrExit(app, argc, argv);
  return f;
}

struct Result {
  double all_tok_s = 0;     // output tokens / wall time of the whole run
  double decode_tok_s = 0;  // output tokens of pure decode steps / their time
};

Result RunBatch(tq::LoadedModel& m, const Flags& f, int batch, std::mt19937& rng) {
  tq::EngineOptions o;
  o.max_num_batched_tokens = 2048;
  const auto core = tq::MakeEngineCore(o, m, nullptr);
  std::uniform_int_distribution<int32_t> id(3, m.files.config.vocab_size - 1);
  for (int b = 0; b < batch; ++b) {
    tq::EngineRequest r;
    r.request_id = std::to_string(b);
    r.prompt_ids.push_back(m.files.config.bos_token_id);
    for (int i = 1; i < f.prompt_tokens; ++i) r.prompt_ids.push_back(id(rng));
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = f.output_tokens;
    core->AddRequest(std::move(r), std::make_shared<tq::RequestStream>(), Clock::now());
  }
  const auto start = Clock::now();
  core->Step();  // every prompt in one step (budget 2048) + first tokens
  const auto decode_start = Clock::now();
  while (core->has_work()) core->Step();
  const auto end = Clock::now();
  const double total = static_cast<double>(batch) * f.output_tokens;
  Result r;
  r.all_tok_s = total / std::chrono::duration<double>(end - start).count();
  r.decode_tok_s = static_cast<double>(batch) * (f.output_tokens - 1) /
                   std::chrono::duration<double>(end - decode_start).count();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = Parse(argc, argv);
  tq::EngineOptions o;
  o.model_dir = f.model;
  o.num_threads = f.threads;
  tq::kernels::ParseKvDtype(f.kv, &o.kv_cache_dtype);  // checked by Parse
  const int max_batch = *std::max_element(f.batches.begin(), f.batches.end());
  o.max_model_len = f.prompt_tokens + f.output_tokens + 16;
  // A pool for max_batch sequences of max_model_len tokens.
  auto m = std::make_unique<tq::LoadedModel>(tq::LoadModel(o));
  const int32_t block_size = m->executor->cache().layout().block_size;
  const int32_t need = max_batch * ((o.max_model_len + block_size - 1) / block_size);
  if (m->executor->cache().layout().num_blocks < need) {
    o.kv_cache_memory = tq::PagedKvCache::BytesPerBlock(m->executor->cache().num_layers(),
                                                        m->executor->cache().layout()) *
                        static_cast<size_t>(need);
    m.reset();
    m = std::make_unique<tq::LoadedModel>(tq::LoadModel(o));
  }
  std::printf("model %s, kv %s, prompt %d, output %d tokens, threads %d, %d repeats\n",
              f.model.c_str(), f.kv.c_str(), f.prompt_tokens, f.output_tokens, f.threads,
              f.repeats);
  std::mt19937 rng(1234);
  std::vector<std::vector<double>> all(f.batches.size()), decode(f.batches.size());
  for (int rep = 0; rep < f.repeats; ++rep) {
    for (size_t i = 0; i < f.batches.size(); ++i) {
      const Result r = RunBatch(*m, f, f.batches[i], rng);
      all[i].push_back(r.all_tok_s);
      decode[i].push_back(r.decode_tok_s);
    }
  }
  std::printf("| batch | output tok/s (all) | decode tok/s | decode speed-up vs batch %d |\n",
              f.batches[0]);
  std::printf("|---:|---:|---:|---:|\n");
  const double base = tq::bench::UpperMedian(decode[0]);
  for (size_t i = 0; i < f.batches.size(); ++i) {
    std::printf("| %d | %.1f | %.1f | %.2fx |\n", f.batches[i], tq::bench::UpperMedian(all[i]),
                tq::bench::UpperMedian(decode[i]), tq::bench::UpperMedian(decode[i]) / base);
  }
  return 0;
}
