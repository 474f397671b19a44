// Automatic prefix caching (docs/engine.md "Prefix cache"), measured on the
// engine core without HTTP:
//
//   tq_bench_prefix_cache ttft --model DIR [--system-tokens 1000]
//       [--question-tokens 50] [--requests 64] [--output-tokens 64]
//       [--concurrency 8] [--repeats 1] [--threads 0] [--kv-cache-dtype tq3]
//       [--max-num-batched-tokens 512]
//   tq_bench_prefix_cache capacity --model DIR --kv-cache-memory BYTES
//       [--prefix-tokens 256] [--kv-cache-dtype fp16,tq3]
//
// ttft: a shared system prompt of random ids (BOS first) + a random question
// per request, `requests` of them with ignore_eos and max_tokens = output
// tokens, at most `concurrency` in flight (a closed loop: when one finishes
// the next arrives). Caching off and on run alternately in one process
// (off, on, off, on, ... for `repeats` rounds) on one loaded model. Reports
// TTFT p50/p99 (arrival -> first token), the total time and the prefix cache
// hit rate (hit tokens / queried tokens) per setting, medians over repeats.
//
// capacity: for each KV dtype, a pool of --kv-cache-memory bytes for the
// model's KV shape (PagedKvCache::BlocksForBudget) behind the real scheduler
// and block pool; distinct prefixes of prefix-tokens ids are admitted one at
// a time (a fake runner samples one token: the count depends on block
// bookkeeping, not on the values) until the first cached block is evicted.
// Reports how many distinct prefixes the pool held, and checks that every
// one of them is a full hit afterwards.
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
  std::string mode, model;
  int system_tokens = 1000, question_tokens = 50, requests = 64, output_tokens = 64;
  int concurrency = 8, repeats = 1, threads = 0, budget = 512, prefix_tokens = 256;
  size_t kv_cache_memory = 0;
  std::vector<std::string> kv = {"tq3"};
};

Flags Parse(int argc, char** argv) {
  Flags f;
  CLI::App app("Prefix caching: TTFT with a shared system prompt, and prefixes a pool holds.",
               "tq_bench_prefix_cache");
  app.add_option("mode", f.mode, "ttft or capacity")
      ->required()
      ->check(CLI::IsMember({"ttft", "capacity"}));
  app.add_option("--model", f.model, "Model directory")->required();
  app.add_option("--system-tokens", f.system_tokens)->capture_default_str();
  app.add_option("--question-tokens", f.question_tokens)->capture_default_str();
  app.add_option("--requests", f.requests)->capture_default_str();
  app.add_option("--output-tokens", f.output_tokens)->capture_default_str();
  app.add_option("--concurrency", f.concurrency)->capture_default_str();
  app.add_option("--repeats", f.repeats)->capture_default_str();
  app.add_option("--threads", f.threads)->capture_default_str();
  app.add_option("--max-num-batched-tokens", f.budget)->capture_default_str();
  app.add_option("--prefix-tokens", f.prefix_tokens, "capacity: prefix length")
      ->capture_default_str();
  app.add_option("--kv-cache-memory", f.kv_cache_memory, "capacity: KV pool bytes");
  tq::bench::AddList(app, "--kv-cache-dtype", f.kv, "KV dtypes (ttft: the first)")
      ->check(tq::bench::KvDtypeName());
  tq::bench::ParseOrExit(app, argc, argv);
  return f;
}

// A KV dtype name that Parse checked.
tq::kernels::KvDtype Dtype(const std::string& name) {
  tq::kernels::KvDtype d{};
  tq::kernels::ParseKvDtype(name, &d);
  return d;
}

class TtftObserver : public tq::EngineObserver {
 public:
  void OnFirstToken(double s) override { ttft.push_back(s); }
  void OnPrefixCache(int32_t q, int32_t h) override {
    queries += q;
    hits += h;
  }
  std::vector<double> ttft;
  int64_t queries = 0, hits = 0;
};

struct RunResult {
  double p50 = 0, p99 = 0, total = 0, hit_rate = 0;
};

RunResult RunWorkload(tq::LoadedModel& m, const Flags& f, bool caching) {
  tq::EngineOptions o;
  o.max_num_seqs = f.concurrency;
  o.max_num_batched_tokens = f.budget;
  o.enable_prefix_caching = caching;
  TtftObserver obs;
  const auto core = tq::MakeEngineCore(o, m, &obs);
  std::mt19937 rng(4321);  // the same prompts for every run
  std::uniform_int_distribution<int32_t> id(3, m.files.config.vocab_size - 1);
  std::vector<int32_t> system = {m.files.config.bos_token_id};
  while (static_cast<int>(system.size()) < f.system_tokens) system.push_back(id(rng));
  std::vector<tq::EngineRequest> requests;
  for (int i = 0; i < f.requests; ++i) {
    tq::EngineRequest r;
    r.request_id = std::to_string(i);
    r.prompt_ids = system;
    for (int t = 0; t < f.question_tokens; ++t) r.prompt_ids.push_back(id(rng));
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = f.output_tokens;
    requests.push_back(std::move(r));
  }
  const auto start = Clock::now();
  size_t next = 0;
  std::vector<std::shared_ptr<tq::RequestStream>> live;
  for (;;) {
    // Closed loop: top up to `concurrency` requests in flight.
    std::erase_if(live, [](const auto& s) {
      while (auto out = s->Next(std::chrono::milliseconds(0))) {
        if (out->finished()) return true;
      }
      return false;
    });
    while (static_cast<int>(live.size()) < f.concurrency && next < requests.size()) {
      live.push_back(std::make_shared<tq::RequestStream>());
      core->AddRequest(requests[next], live.back(), Clock::now());
      ++next;
    }
    if (live.empty()) break;
    core->Step();
  }
  RunResult r;
  r.total = std::chrono::duration<double>(Clock::now() - start).count();
  r.p50 = tq::bench::Percentile(obs.ttft, 0.5);
  r.p99 = tq::bench::Percentile(obs.ttft, 0.99);
  r.hit_rate = obs.queries > 0 ? static_cast<double>(obs.hits) / obs.queries : 0.0;
  return r;
}

int Ttft(const Flags& f) {
  tq::EngineOptions o;
  o.model_dir = f.model;
  o.num_threads = f.threads;
  o.kv_cache_dtype = Dtype(f.kv.front());
  o.max_num_batched_tokens = f.budget;
  o.max_num_seqs = f.concurrency;
  o.max_model_len = f.system_tokens + f.question_tokens + f.output_tokens + 16;
  // Room for every in-flight sequence without sharing: caching off must not preempt.
  {
    const tq::LoadedModel probe = tq::LoadModel(o);
    const int32_t bs = probe.executor->cache().layout().block_size;
    o.kv_cache_memory = tq::PagedKvCache::BytesPerBlock(probe.executor->cache().num_layers(),
                                                        probe.executor->cache().layout()) *
                        static_cast<size_t>(f.concurrency) * ((o.max_model_len + bs - 1) / bs);
  }
  tq::LoadedModel m = tq::LoadModel(o);
  std::printf(
      "model %s, kv %s, system %d + question %d tokens, %d requests x %d output tokens, "
      "concurrency %d, budget %d, %d repeats (off and on alternate)\n",
      f.model.c_str(), f.kv.front().c_str(), f.system_tokens, f.question_tokens, f.requests,
      f.output_tokens, f.concurrency, f.budget, f.repeats);
  std::vector<RunResult> runs[2];
  for (int rep = 0; rep < f.repeats; ++rep) {
    for (int caching = 0; caching < 2; ++caching) {
      runs[caching].push_back(RunWorkload(m, f, caching == 1));
      const RunResult& r = runs[caching].back();
      std::printf("  repeat %d caching %-3s: TTFT p50 %.3f s p99 %.3f s, total %.1f s, hit %.3f\n",
                  rep, caching ? "on" : "off", r.p50, r.p99, r.total, r.hit_rate);
      std::fflush(stdout);
    }
  }
  auto med = [&](int caching, double RunResult::*field) {
    std::vector<double> v;
    for (const RunResult& r : runs[caching]) v.push_back(r.*field);
    return tq::bench::UpperMedian(v);
  };
  std::printf("| prefix caching | TTFT p50 (s) | TTFT p99 (s) | total (s) | hit rate |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  for (int caching = 0; caching < 2; ++caching) {
    std::printf("| %s | %.3f | %.3f | %.1f | %.3f |\n", caching ? "on" : "off",
                med(caching, &RunResult::p50), med(caching, &RunResult::p99),
                med(caching, &RunResult::total), med(caching, &RunResult::hit_rate));
  }
  std::printf("TTFT p50 off/on = %.1fx, p99 off/on = %.1fx, total off/on = %.2fx\n",
              med(0, &RunResult::p50) / med(1, &RunResult::p50),
              med(0, &RunResult::p99) / med(1, &RunResult::p99),
              med(0, &RunResult::total) / med(1, &RunResult::total));
  return 0;
}

// The scheduler and pool without a model: each step samples token 3.
tq::ModelOutput OneTokenEach(const tq::ScheduleOutput& s) {
  tq::ModelOutput out;
  for (const tq::ScheduledSequence& q : s.sequences) {
    tq::SequenceResult r;
    if (q.sample) r.token = 3;
    out.results.push_back(r);
  }
  return out;
}

int Capacity(const Flags& f) {
  std::printf(
      "| KV dtype | --kv-cache-memory | blocks | %d-token prefixes held before eviction |\n",
      f.prefix_tokens);
  std::printf("|---|---:|---:|---:|\n");
  for (const std::string& name : f.kv) {
    tq::EngineOptions o;
    o.model_dir = f.model;
    o.num_threads = 1;
    o.kv_cache_dtype = Dtype(name);
    o.max_model_len = f.prefix_tokens + 16;
    o.kv_cache_memory = f.kv_cache_memory;
    const tq::LoadedModel m = tq::LoadModel(o);
    tq::SchedulerConfig c;
    c.max_num_seqs = 1;
    c.max_num_batched_tokens = f.prefix_tokens + 16;
    c.max_model_len = o.max_model_len;
    c.block_size = m.executor->cache().layout().block_size;
    c.num_blocks = m.executor->cache().layout().num_blocks;
    c.enable_prefix_caching = true;
    c.prefix_cache_seed = tq::PrefixCacheSeed(name, m.kv_fingerprint);
    tq::Scheduler sched(c);
    auto prefix = [&](int i) {
      tq::EngineRequest r;
      r.request_id = "p" + std::to_string(i);
      for (int t = 0; t < f.prefix_tokens; ++t) r.prompt_ids.push_back(10 + (i * 7919 + t) % 30000);
      r.prompt_ids.push_back(5);  // one more token: the prefix's blocks are all full
      r.sampling.temperature = 0;
      r.sampling.max_tokens = 1;
      return r;
    };
    auto run = [&](tq::EngineRequest r, int32_t* hits) {
      sched.AddRequest(std::move(r), tq::Scheduler::Clock::now());
      while (sched.has_work()) {
        const tq::ScheduleOutput s = sched.Schedule(tq::Scheduler::Clock::now());
        *hits += s.prefix_cache_hits;
        sched.Update(s, OneTokenEach(s), tq::Scheduler::Clock::now());
      }
    };
    int held = 0;
    for (int i = 0;; ++i) {
      int32_t hits = 0;
      run(prefix(i), &hits);
      if (sched.block_pool().num_evictions() > 0) break;
      held = i + 1;
    }
    // Check: a fresh scheduler state is not needed; the first prefix was the
    // one evicted (LRU), so count full hits over prefixes 1..held.
    int full = 0;
    for (int i = 1; i <= held; ++i) {
      int32_t hits = 0;
      run(prefix(i), &hits);
      if (hits == f.prefix_tokens) ++full;
    }
    std::printf("| %s | %zu | %d | %d (re-queried: %d of prefixes 1..%d full hits) |\n",
                name.c_str(), f.kv_cache_memory, c.num_blocks, held, full, held);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = Parse(argc, argv);
  return f.mode == "ttft" ? Ttft(f) : Capacity(f);
}
