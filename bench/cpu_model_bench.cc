// CPU engine speed: prefill and decode tokens/s of tq::OfflineEngine on a model
// directory, for several thread counts measured side by side in one process.
//
//   tq_bench_cpu_model --model DIR [--threads 1,2] [--prompt-tokens 256]
//                      [--decode-tokens 128] [--repeats 3]
//                      [--max-batched-tokens 512] [--decode-prompt-tokens 8]
//
// One OfflineEngine per thread count is loaded up front; each repeat then runs
// every thread count in turn (interleaved), so a burst of load from other
// processes on a shared machine disturbs all columns alike and the ratios
// between thread counts stay meaningful. Reports the median over repeats (and
// the best). See bench/README.md and docs/PERFORMANCE.md.
//
// Prefill: Generate(max_tokens = 1, greedy) on a P-token prompt of random
// valid ids (BOS first): the prompt forward pass in chunks of
// max_num_batched_tokens plus lm_head of the last position and one sample,
// what a server does for a new request. tok/s = P / wall time.
// Decode: Generate(greedy, ignore_eos, max_tokens = N) from a short prompt;
// on_token timestamps give the time from the first sampled token to the last,
// i.e. N - 1 single-token steps (the prefill and first token are excluded).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_util.h"
#include "engine/model/model_config.h"
#include "engine/runtime/offline_engine.h"
#include "engine/sampling/sampling_params.h"
#include "kernels/cpu/cpu_isa.h"

namespace {

using Clock = std::chrono::steady_clock;
using tq::bench::CpuModel;
using tq::bench::LoadAvg;
using tq::bench::Median;
using tq::bench::ProcessCpuSeconds;
using tq::bench::Seconds;

struct Flags {
  std::string model;
  std::vector<int> threads = {1, 2};
  int prompt_tokens = 256;
  int decode_tokens = 128;
  int decode_prompt_tokens = 8;
  int repeats = 3;
  int max_batched_tokens = 512;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  CLI::App app(
      "Prefill and decode tokens/s of the CPU engine per thread count (one process,\n"
      "thread counts interleaved in every repeat; medians and bests reported).",
      "tq_bench_cpu_model");
  const CLI::Range positive(1, 1 << 24);
  app.add_option("--model", f.model, "Model directory")->required();
  tq::bench::AddList(app, "--threads", f.threads, "Thread counts")->check(positive);
  app.add_option("--prompt-tokens", f.prompt_tokens)->capture_default_str()->check(positive);
  app.add_option("--decode-tokens", f.decode_tokens)
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 24));
  app.add_option("--decode-prompt-tokens", f.decode_prompt_tokens)
      ->capture_default_str()
      ->check(positive);
  app.add_option("--repeats", f.repeats)->capture_default_str()->check(positive);
  app.add_option("--max-batched-tokens", f.max_batched_tokens)
      ->capture_default_str()
      ->check(positive);
  tq::bench::ParseOrExit(app, argc, argv);
  return f;
}

// Parameter counts from the config (OfflineEngine does not expose its weights).
struct ParamCount {
  int64_t embed = 0;   // embed_tokens
  int64_t layers = 0;  // all decoder layers (projections + norms)
  int64_t final_norm = 0;
  int64_t lm_head = 0;  // 0 when tied to embed_tokens
  int64_t total() const { return embed + layers + final_norm + lm_head; }
  // Weights one decode step streams: every layer, the final norm and lm_head
  // (embed_tokens when tied); of an untied embedding table only one row.
  int64_t per_token(int64_t hidden, bool tied) const {
    return layers + final_norm + (tied ? embed : lm_head) + (tied ? 0 : hidden);
  }
};

ParamCount CountParams(const tq::ModelConfig& c) {
  const int64_t h = c.hidden_size, hd = c.head_dim, q = int64_t{c.num_attention_heads} * hd,
                kv = int64_t{c.num_key_value_heads} * hd, inter = c.intermediate_size;
  ParamCount p;
  p.embed = int64_t{c.vocab_size} * h;
  const int64_t layer = q * h + 2 * kv * h + h * q + 3 * inter * h + 2 * h;
  p.layers = layer * c.num_hidden_layers;
  p.final_norm = h;
  p.lm_head = c.tie_word_embeddings ? 0 : int64_t{c.vocab_size} * h;
  return p;
}

uint64_t CheckpointBytes(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") bytes += e.file_size(ec);
  }
  return bytes;
}

double Max(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}

struct Result {
  std::vector<double> prefill_tps;    // per repeat
  std::vector<double> decode_tps;     // per repeat, first token excluded
  std::vector<double> decode_p90_ms;  // per repeat, 90th percentile step
  std::vector<double> decode_cpu;     // per repeat, CPU time / (wall x threads)
  double load_s = 0;
};

double PrefillOnce(tq::OfflineEngine& g, const std::vector<int32_t>& prompt) {
  tq::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 1;
  params.ignore_eos = true;
  const auto t0 = Clock::now();
  g.Generate(prompt, params);
  return static_cast<double>(prompt.size()) / Seconds(t0, Clock::now());
}

// Returns tokens/s over steps 2..N; *p90_ms gets the 90th percentile step time
// and *cpu_seconds the process CPU time over the same steps.
double DecodeOnce(tq::OfflineEngine& g, const std::vector<int32_t>& prompt, int n, double* p90_ms,
                  double* cpu_seconds = nullptr) {
  tq::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = n;
  params.ignore_eos = true;
  std::vector<Clock::time_point> stamps;
  stamps.reserve(n);
  double cpu_first = 0, cpu_last = 0;
  const auto result = g.Generate(prompt, params, [&](int32_t) {
    stamps.push_back(Clock::now());
    cpu_last = ProcessCpuSeconds();
    if (stamps.size() == 1) cpu_first = cpu_last;
  });
  if (cpu_seconds) *cpu_seconds = cpu_last - cpu_first;
  if (stamps.size() < 2 || static_cast<int>(result.output_ids.size()) != n) {
    std::fprintf(stderr, "error: decode produced %zu tokens, wanted %d (max_model_len %d)\n",
                 result.output_ids.size(), n, g.max_model_len());
    std::exit(1);
  }
  std::vector<double> steps;
  for (size_t i = 1; i < stamps.size(); ++i) steps.push_back(Seconds(stamps[i - 1], stamps[i]));
  *p90_ms = 1e3 * tq::bench::Percentile(std::move(steps), 0.9);
  return static_cast<double>(stamps.size() - 1) / Seconds(stamps.front(), stamps.back());
}

std::vector<int32_t> RandomPrompt(int n, int32_t vocab, int32_t bos, uint32_t seed) {
  std::mt19937 rng(seed);
  // Skip the first ids (unk/bos/eos in Llama vocabularies); any id is valid.
  const int32_t lo = vocab > 8 ? 3 : 0;
  std::uniform_int_distribution<int32_t> dist(lo, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  if (bos >= 0 && bos < vocab) ids[0] = bos;
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  try {
    const tq::ModelFiles files = tq::LoadModelFiles(flags.model);
    const tq::ModelConfig& c = files.config;
    const ParamCount params = CountParams(c);
    const int64_t per_token = params.per_token(c.hidden_size, c.tie_word_embeddings);

    std::printf("# tq_bench_cpu_model\n\n");
    std::printf(
        "- model: %s (hidden %d, layers %d, heads %d/%d kv, head_dim %d, inter %d, "
        "vocab %d, tied %s, dtype %s)\n",
        flags.model.c_str(), c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
        c.num_key_value_heads, c.head_dim, c.intermediate_size, c.vocab_size,
        c.tie_word_embeddings ? "yes" : "no", c.torch_dtype.c_str());
    std::printf(
        "- parameters: %lld (%.2fM); weights in memory (fp32): %lld bytes (%.1f MiB); "
        "checkpoint on disk: %llu bytes\n",
        static_cast<long long>(params.total()), params.total() / 1e6,
        static_cast<long long>(params.total() * 4), params.total() * 4 / 1048576.0,
        static_cast<unsigned long long>(CheckpointBytes(flags.model)));
    std::printf("- weights streamed per decode token (fp32): %.1f MiB\n",
                per_token * 4 / 1048576.0);
    std::printf("- cpu: %s, %u hardware threads, kernels %s; load average at start: %s\n",
                CpuModel().c_str(), std::thread::hardware_concurrency(),
                tq::kernels::cpu::CpuIsaName(tq::kernels::cpu::ActiveCpuIsa()), LoadAvg().c_str());
    std::printf(
        "- prefill: %d-token prompt, chunks of %d, Generate(max_tokens=1); decode: %d "
        "tokens from a %d-token prompt, first token excluded; %d repeats, thread "
        "counts interleaved\n\n",
        flags.prompt_tokens, flags.max_batched_tokens, flags.decode_tokens,
        flags.decode_prompt_tokens, flags.repeats);
    std::fflush(stdout);

    std::vector<std::unique_ptr<tq::OfflineEngine>> gens;
    std::vector<Result> results(flags.threads.size());
    for (size_t i = 0; i < flags.threads.size(); ++i) {
      tq::EngineOptions opt;
      opt.model_dir = flags.model;
      opt.num_threads = flags.threads[i];
      opt.max_num_batched_tokens = flags.max_batched_tokens;
      const auto t0 = Clock::now();
      gens.push_back(std::make_unique<tq::OfflineEngine>(opt));
      results[i].load_s = Seconds(t0, Clock::now());
    }

    const int32_t vocab = c.vocab_size;
    const std::vector<int32_t> prefill_prompt =
        RandomPrompt(flags.prompt_tokens, vocab, c.bos_token_id, 1234);
    const std::vector<int32_t> decode_prompt =
        RandomPrompt(flags.decode_prompt_tokens, vocab, c.bos_token_id, 5678);

    // Warm-up (not counted): first touch of activations and KV blocks.
    for (auto& g : gens) {
      PrefillOnce(*g, prefill_prompt);
      double unused = 0;
      DecodeOnce(*g, decode_prompt, std::min(flags.decode_tokens, 16), &unused);
    }
    for (int r = 0; r < flags.repeats; ++r) {
      for (size_t i = 0; i < gens.size(); ++i) {
        results[i].prefill_tps.push_back(PrefillOnce(*gens[i], prefill_prompt));
        double p90 = 0, cpu = 0;
        const double tps = DecodeOnce(*gens[i], decode_prompt, flags.decode_tokens, &p90, &cpu);
        results[i].decode_tps.push_back(tps);
        results[i].decode_p90_ms.push_back(p90);
        const double wall = (flags.decode_tokens - 1) / tps;
        results[i].decode_cpu.push_back(cpu / (wall * flags.threads[i]));
      }
    }

    std::printf(
        "| threads | prefill tok/s | decode tok/s | ms/token decode | prefill best | "
        "decode best | decode p90 ms | decode GB/s (weights) | decode CPU util | load s |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < gens.size(); ++i) {
      const Result& res = results[i];
      const double pre = Median(res.prefill_tps), dec = Median(res.decode_tps);
      std::printf("| %d | %.1f | %.1f | %.3f | %.1f | %.1f | %.3f | %.2f | %.2f | %.2f |\n",
                  flags.threads[i], pre, dec, 1e3 / dec, Max(res.prefill_tps), Max(res.decode_tps),
                  Median(res.decode_p90_ms), dec * static_cast<double>(per_token) * 4 / 1e9,
                  Median(res.decode_cpu), res.load_s);
    }
    std::printf("\nper repeat (prefill tok/s / decode tok/s / decode CPU util):\n");
    for (size_t i = 0; i < gens.size(); ++i) {
      std::printf("- %d threads:", flags.threads[i]);
      for (int r = 0; r < flags.repeats; ++r) {
        std::printf(" %.0f/%.0f/%.2f", results[i].prefill_tps[r], results[i].decode_tps[r],
                    results[i].decode_cpu[r]);
      }
      std::printf("\n");
    }
    if (gens.size() > 1) {
      std::printf("\nspeedup vs %d thread(s) (median):", flags.threads[0]);
      for (size_t i = 1; i < gens.size(); ++i) {
        std::printf(" %d threads: prefill x%.2f, decode x%.2f;", flags.threads[i],
                    Median(results[i].prefill_tps) / Median(results[0].prefill_tps),
                    Median(results[i].decode_tps) / Median(results[0].decode_tps));
      }
      std::printf("\n");
    }
    std::printf("\nload average at end: %s\n", LoadAvg().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
