// tqserve's side of the side-by-side CPU comparison with llama.cpp
// (bench/llamacpp/run.sh, docs/PERFORMANCE.md): the same three measurements
// and output lines as the llama.cpp harness llbench
// (../shared/tools/llamacpp-anchor), fed the same token ids, driving the
// EngineCore (scheduler + model runner, no HTTP) greedily.
//
//   tq_bench_llamacpp_side --model DIR [--threads 1] [--mode validate|bench] [--runs 3]
//                          [--pp 400] [--tg 128] [--batch 16] [--batch-tokens 128]
//                          [--validate-tokens 32] [--warmup 1]
//                          [--quantization-config FILE] [--kv-cache-dtype fp32]
//
// pp:    one P-token prompt, max_tokens 1: the whole prefill + lm_head of the
//        last position + greedy sample, timed (one step: budget 512).
// tg:    an 8-token prompt; its prefill and first token untimed, then N
//        timed single-token decode steps.
// batch: B requests of 8-token prompts prefilled together untimed, then T
//        timed steps of B tokens.
// validate: "IDS single:" greedy ids of a 16-token prompt and "IDS batchS:"
//        16 ids of each batch sequence, to compare with llbench's.
// Output: "RESULT pp400 <tok/s>", "RESULT tg128 <tok/s>", "RESULT batch16 <tok/s>".
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "engine/runtime/engine_core.h"
#include "engine/runtime/model_loader.h"
#include "kernels/kv_layout.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string model, mode = "bench", quant, kv = "fp32";
  int threads = 1, runs = 3, pp = 400, tg = 128, batch = 16, batch_tokens = 128, vtok = 32,
      warmup = 1;
};

// The prompt ids of the llama.cpp kit's prompts.h, by the same rule: BOS,
// then 3 + splitmix64 outputs mod (vocab - 3) (Steele et al., "Fast
// splittable pseudorandom number generators", 2014).
std::vector<int32_t> PromptIds(uint64_t seed, int n, int32_t vocab, int32_t bos) {
  std::vector<int32_t> ids(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < n; i++) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    ids[i] = 3 + static_cast<int32_t>(z % static_cast<uint64_t>(vocab - 3));
  }
  if (n > 0) ids[0] = bos;
  return ids;
}
constexpr uint64_t kValidateSeed = 42, kPrefillSeed = 1234, kDecodeSeed = 5678, kBatchSeed = 100;
constexpr int kShortPrompt = 8;

Flags Parse(int argc, char** argv) {
  Flags f;
  CLI::App app("tqserve's side of the CPU comparison with llama.cpp (bench/llamacpp/run.sh).",
               "tq_bench_llamacpp_side");
  app.add_option("--model", f.model, "Model directory")->required();
  app.add_option("--mode", f.mode, "validate or bench")->capture_default_str();
  app.add_option("--quantization-config", f.quant, "Weight quantization config file");
  app.add_option("--kv-cache-dtype", f.kv)->capture_default_str()->check(tq::bench::KvDtypeName());
  app.add_option("--threads", f.threads)->capture_default_str();
  app.add_option("--runs", f.runs)->capture_default_str();
  app.add_option("--pp", f.pp, "Prompt tokens of the prefill test")->capture_default_str();
  app.add_option("--tg", f.tg, "Decode steps of the generation test")->capture_default_str();
  app.add_option("--batch", f.batch, "Sequences of the batch test")->capture_default_str();
  app.add_option("--batch-tokens", f.batch_tokens, "Timed steps of the batch test")
      ->capture_default_str();
  app.add_option("--validate-tokens", f.vtok)->capture_default_str();
  app.add_option("--warmup", f.warmup)->capture_default_str();
  tq::bench::ParseOrExit(app, argc, argv);
  return f;
}

struct Bench {
  tq::LoadedModel* m;
  int32_t vocab, bos;

  // Runs `prompts` greedily for max_tokens each; untimed first step (all
  // prefills + first tokens) unless time_first; returns the seconds of the
  // timed steps and each request's ids.
  double Run(const std::vector<std::vector<int32_t>>& prompts, int max_tokens, bool time_first,
             std::vector<std::vector<int32_t>>* ids) {
    tq::EngineOptions o;
    const auto core = tq::MakeEngineCore(o, *m, nullptr);
    std::vector<std::shared_ptr<tq::RequestStream>> streams;
    for (size_t s = 0; s < prompts.size(); ++s) {
      tq::EngineRequest r;
      r.request_id = std::to_string(s);
      r.prompt_ids = prompts[s];
      r.sampling.temperature = 0;
      r.sampling.ignore_eos = true;
      r.sampling.max_tokens = max_tokens;
      streams.push_back(std::make_shared<tq::RequestStream>());
      core->AddRequest(std::move(r), streams.back(), Clock::now());
    }
    if (!time_first) core->Step();
    const auto start = Clock::now();
    while (core->has_work()) core->Step();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (ids) {
      ids->assign(prompts.size(), {});
      for (size_t s = 0; s < prompts.size(); ++s) {
        while (auto out = streams[s]->Next(std::chrono::milliseconds(0))) {
          (*ids)[s].insert((*ids)[s].end(), out->token_ids.begin(), out->token_ids.end());
        }
      }
    }
    return seconds;
  }

  std::vector<std::vector<int32_t>> BatchPrompts(int b) const {
    std::vector<std::vector<int32_t>> p;
    for (int s = 0; s < b; ++s) p.push_back(PromptIds(kBatchSeed + s, kShortPrompt, vocab, bos));
    return p;
  }
};

void PrintIds(const char* name, const std::vector<int32_t>& ids) {
  std::printf("IDS %s:", name);
  for (int32_t id : ids) std::printf(" %d", id);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = Parse(argc, argv);
  tq::EngineOptions o;
  o.model_dir = f.model;
  o.num_threads = f.threads;
  o.quantization_config = f.quant;
  // As `tqserve serve` (--dtype auto): F16 checkpoint weights stay F16, as in
  // the F16 GGUF llama.cpp runs (EngineOptions' own default widens to fp32).
  o.weight_dtype = tq::DenseDtype::kAuto;
  o.max_model_len = 512;
  tq::kernels::ParseKvDtype(f.kv, &o.kv_cache_dtype);  // checked by Parse
  // A pool for `batch` sequences of 512 tokens (sized from a first load).
  {
    const auto first = std::make_unique<tq::LoadedModel>(tq::LoadModel(o));
    o.kv_cache_memory =
        tq::PagedKvCache::BytesPerBlock(first->executor->cache().num_layers(),
                                        first->executor->cache().layout()) *
        static_cast<size_t>(f.batch * (512 / first->executor->cache().layout().block_size));
  }
  tq::LoadedModel m = tq::LoadModel(o);
  Bench b{&m, m.files.config.vocab_size, m.files.config.bos_token_id};
  std::printf("INFO tqserve model=%s threads=%d quant=%s kv=%s\n", f.model.c_str(), f.threads,
              f.quant.empty() ? "none" : f.quant.c_str(), f.kv.c_str());
  if (f.mode == "validate") {
    std::vector<std::vector<int32_t>> ids;
    b.Run({PromptIds(kValidateSeed, 16, b.vocab, b.bos)}, f.vtok, true, &ids);
    PrintIds("single", ids[0]);
    // llbench's batch validation: the first 16 generated ids of each sequence.
    b.Run(b.BatchPrompts(f.batch), 16, true, &ids);
    for (int s = 0; s < f.batch; ++s) PrintIds(("batch" + std::to_string(s)).c_str(), ids[s]);
    return 0;
  }
  const auto pp_prompt = PromptIds(kPrefillSeed, f.pp, b.vocab, b.bos);
  const auto tg_prompt = PromptIds(kDecodeSeed, kShortPrompt, b.vocab, b.bos);
  auto pp_once = [&] { return f.pp / b.Run({pp_prompt}, 1, true, nullptr); };
  auto tg_once = [&](int n) { return n / b.Run({tg_prompt}, n + 1, false, nullptr); };
  auto batch_once = [&](int t) {
    return double(f.batch) * t / b.Run(b.BatchPrompts(f.batch), t + 1, false, nullptr);
  };
  for (int w = 0; w < f.warmup; ++w) {
    pp_once();
    tg_once(std::min(f.tg, 32));
    batch_once(std::min(f.batch_tokens, 16));
  }
  for (int r = 0; r < f.runs; ++r) {
    std::printf("RESULT pp%d %.2f\n", f.pp, pp_once());
    std::fflush(stdout);
    std::printf("RESULT tg%d %.2f\n", f.tg, tg_once(f.tg));
    std::fflush(stdout);
    std::printf("RESULT batch%d %.2f\n", f.batch, batch_once(f.batch_tokens));
    std::fflush(stdout);
  }
  return 0;
}
