// ServerMetrics: the rendered Prometheus text is parsed here (independently of
// prometheus-cpp) and compared with values computed by hand from the events
// fed in; `promtool check metrics` lints it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/runtime/offline_engine.h"
#include "server/metrics/host_memory.h"
#include "server/metrics/server_metrics.h"
#include "tests/unit/temp_dir_test.h"
#include "tests/unit/watchdog.h"

namespace tq {
namespace {

using LabelMap = std::map<std::string, std::string>;

struct Sample {
  std::string name;
  LabelMap labels;
  double value = 0;
};

/// A parsed text exposition (format 0.0.4): samples plus HELP and TYPE by family.
struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> help;
  std::map<std::string, std::string> type;

  /// Samples named `name` whose labels include all of `subset`.
  std::vector<Sample> All(const std::string& name, const LabelMap& subset = {}) const {
    std::vector<Sample> found;
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : subset) {
        auto it = s.labels.find(k);
        match = match && it != s.labels.end() && it->second == v;
      }
      if (match) found.push_back(s);
    }
    return found;
  }

  /// The value of the one sample that matches; fails the test otherwise.
  double Value(const std::string& name, const LabelMap& subset = {}) const {
    std::vector<Sample> found = All(name, subset);
    EXPECT_EQ(found.size(), 1u) << name;
    return found.empty() ? std::nan("") : found[0].value;
  }

  /// Cumulative bucket counts of histogram `name` by upper bound (le).
  std::map<double, double> Buckets(const std::string& name) const {
    std::map<double, double> buckets;
    for (const Sample& s : All(name + "_bucket")) {
      buckets[std::strtod(s.labels.at("le").c_str(), nullptr)] = s.value;
    }
    return buckets;
  }
};

// Reads a label value in double quotes with the format's escapes (\\ \" \n).
std::string ParseQuoted(const std::string& line, size_t& pos) {
  EXPECT_EQ(line[pos], '"') << line;
  std::string value;
  for (++pos; pos < line.size() && line[pos] != '"'; ++pos) {
    if (line[pos] == '\\' && pos + 1 < line.size()) {
      ++pos;
      value += line[pos] == 'n' ? '\n' : line[pos];
    } else {
      value += line[pos];
    }
  }
  ++pos;  // closing quote
  return value;
}

Exposition Parse(const std::string& text) {
  Exposition out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream words(line.substr(1));
      std::string keyword, name, rest;
      words >> keyword >> name;
      std::getline(words >> std::ws, rest);
      if (keyword == "HELP") out.help[name] = rest;
      if (keyword == "TYPE") out.type[name] = rest;
      continue;
    }
    Sample s;
    size_t pos = line.find_first_of("{ ");
    s.name = line.substr(0, pos);
    if (line[pos] == '{') {
      ++pos;
      while (line[pos] != '}') {
        size_t eq = line.find('=', pos);
        std::string key = line.substr(pos, eq - pos);
        pos = eq + 1;
        s.labels[key] = ParseQuoted(line, pos);
        if (line[pos] == ',') ++pos;
      }
      ++pos;
    }
    s.value = std::strtod(line.c_str() + pos, nullptr);
    out.samples.push_back(s);
  }
  return out;
}

/// An engine of 120 blocks of 16 tokens, 4096 bytes per block (hand-picked).
EngineInfo TestInfo() {
  EngineInfo info;
  info.model_dir = "/models/stories260K";
  info.kv_cache_dtype = "tq3";
  info.block_size = 16;
  info.num_kv_blocks = 120;
  info.kv_bytes_per_block = 4096;
  info.kv_cache_bytes = 120 * 4096;
  info.kv_capacity_tokens = 120 * 16;
  info.weight_bytes = {{"fp32", 1000}, {"int4", 500}};
  info.kv_calibration_source = "built-in";
  info.device = "cpu";
  info.cpu_isa = "avx2";
  return info;
}

Exposition RenderParsed(ServerMetrics& metrics, const EngineStats& stats = {},
                        const EngineInfo& info = TestInfo()) {
  return Parse(metrics.Render(stats, info, "served-model"));
}

// FinishedRequestStats{finish, prompt tokens, output tokens, queue, e2e,
// prefill, decode seconds}.
using Finished = FinishedRequestStats;

// Expects the cumulative count at each listed upper bound.
void ExpectCumulative(const std::map<double, double>& buckets,
                      const std::vector<std::pair<double, double>>& expected) {
  for (const auto& [le, count] : expected) {
    ASSERT_TRUE(buckets.count(le)) << "no bucket le=" << le;
    EXPECT_EQ(buckets.at(le), count) << "le=" << le;
  }
}

TEST(ServerMetrics, TtftHistogramCountsSumAndCumulativeBuckets) {
  ServerMetrics metrics;
  const std::vector<double> observed = {0.05, 0.2, 3.0};
  for (double ttft : observed) metrics.OnFirstToken(ttft);
  Exposition e = RenderParsed(metrics);

  const std::string name = "tqserve_time_to_first_token_seconds";
  EXPECT_EQ(e.Value(name + "_count"), 3);
  EXPECT_DOUBLE_EQ(e.Value(name + "_sum"), 3.25);
  // The bounds documented in docs/metrics.md (vLLM's, with 0.1-0.5 ms in front).
  const std::vector<double> documented = {
      0.0001, 0.00025, 0.0005, 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,  0.1,   0.25,  0.5,
      0.75,   1.0,     2.5,    5.0,   7.5,   10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
  std::map<double, double> buckets = e.Buckets(name);
  std::vector<double> bounds;
  for (const auto& [le, count] : buckets) {
    if (!std::isinf(le)) bounds.push_back(le);
    double expected = 0;  // cumulative: observations <= le
    for (double v : observed) expected += v <= le ? 1 : 0;
    EXPECT_EQ(count, expected) << "le=" << le;
  }
  EXPECT_EQ(bounds, documented);
  ExpectCumulative(buckets, {{0.04, 0},
                             {0.06, 1},
                             {0.25, 2},
                             {2.5, 2},
                             {5.0, 3},
                             {std::numeric_limits<double>::infinity(), 3}});
}

TEST(ServerMetrics, InterTokenLatencyBoundIsInclusive) {
  ServerMetrics metrics;
  metrics.OnInterToken(0.1);  // exactly a bound: Prometheus' le means <=
  metrics.OnInterToken(0.0002);
  Exposition e = RenderParsed(metrics);
  std::map<double, double> buckets = e.Buckets("tqserve_inter_token_latency_seconds");
  ExpectCumulative(buckets, {{0.0001, 0}, {0.00025, 1}, {0.075, 1}, {0.1, 2}});
  EXPECT_EQ(buckets.begin()->first, 0.0001);
  EXPECT_EQ(std::prev(buckets.end(), 2)->first, 80.0);
  EXPECT_DOUBLE_EQ(e.Value("tqserve_inter_token_latency_seconds_sum"), 0.1002);
}

TEST(ServerMetrics, StepAndFinishCounters) {
  ServerMetrics metrics;
  metrics.OnStep(5, 1);
  metrics.OnStep(0, 3);
  metrics.OnStep(7, 2);
  metrics.OnPreemption();
  metrics.OnPreemption();
  metrics.OnRequestFinished(Finished{FinishReason::kStop, 12, 6, 0.5, 2.0, 0.25, 1.25});
  metrics.OnRequestFinished(Finished{FinishReason::kLength, 3, 100, 0.0, 10.0, 1.0, 9.0});
  metrics.OnRequestFinished(Finished{FinishReason::kAbort, 0, 0, 0.0, 0.0, 0.0, 0.0});
  metrics.OnRequestFinished(Finished{FinishReason::kError, 40, 1, 1.0, 4.0, 1.0, 2.0});
  Exposition e = RenderParsed(metrics);

  EXPECT_EQ(e.Value("tqserve_prompt_tokens_total"), 12);     // 5 + 0 + 7
  EXPECT_EQ(e.Value("tqserve_generation_tokens_total"), 6);  // 1 + 3 + 2
  EXPECT_EQ(e.Value("tqserve_num_preemptions_total"), 2);
  EXPECT_EQ(e.Value("tqserve_request_success_total", {{"finish_reason", "stop"}}), 1);
  EXPECT_EQ(e.Value("tqserve_request_success_total", {{"finish_reason", "length"}}), 1);
  EXPECT_EQ(e.Value("tqserve_request_success_total", {{"finish_reason", "abort"}}), 1);
  EXPECT_TRUE(e.All("tqserve_request_success_total", {{"finish_reason", "error"}}).empty());
  EXPECT_EQ(e.Value("tqserve_request_failure_total"), 1);

  // Histograms hold the three counted requests, not the failed one.
  EXPECT_EQ(e.Value("tqserve_e2e_request_latency_seconds_count"), 3);
  EXPECT_DOUBLE_EQ(e.Value("tqserve_e2e_request_latency_seconds_sum"), 12.0);
  EXPECT_DOUBLE_EQ(e.Value("tqserve_request_queue_time_seconds_sum"), 0.5);
  EXPECT_DOUBLE_EQ(e.Value("tqserve_request_prefill_time_seconds_sum"), 1.25);
  EXPECT_DOUBLE_EQ(e.Value("tqserve_request_decode_time_seconds_sum"), 10.25);
  EXPECT_DOUBLE_EQ(e.Value("tqserve_request_inference_time_seconds_sum"), 11.5);
  EXPECT_EQ(e.Buckets("tqserve_e2e_request_latency_seconds").at(2.0), 2);  // 0 and 2.0

  // Size histograms use 1-2-5 bounds: prompts 12, 3, 0; outputs 6, 100, 0.
  std::map<double, double> prompt = e.Buckets("tqserve_request_prompt_tokens");
  ExpectCumulative(prompt, {{1, 1}, {2, 1}, {5, 2}, {10, 2}, {20, 3}});
  EXPECT_EQ(prompt.rbegin()->second, 3);
  EXPECT_EQ(std::prev(prompt.end(), 2)->first, 1e6);
  std::map<double, double> generation = e.Buckets("tqserve_request_generation_tokens");
  ExpectCumulative(generation, {{5, 1}, {10, 2}, {50, 2}, {100, 3}});
  EXPECT_EQ(e.Value("tqserve_request_generation_tokens_sum"), 106);
}

TEST(ServerMetrics, PrefixCacheCountersCountTokens) {
  ServerMetrics metrics;
  metrics.OnPrefixCache(300, 288);  // 18 blocks of 16 found for a 300-token prompt
  metrics.OnPrefixCache(10, 0);
  metrics.OnPrefixCache(-5, -3);  // bad input adds nothing
  Exposition e = RenderParsed(metrics);
  EXPECT_EQ(e.Value("tqserve_prefix_cache_queries_total"), 310);
  EXPECT_EQ(e.Value("tqserve_prefix_cache_hits_total"), 288);
}

TEST(ServerMetrics, EngineGaugesFromStatsAndInfo) {
  ServerMetrics metrics;
  EngineStats stats;
  stats.num_running = 3;
  stats.num_waiting = 2;
  stats.kv_blocks_used = 30;
  stats.kv_blocks_cached = 50;
  Exposition e = RenderParsed(metrics, stats);

  EXPECT_EQ(e.Value("tqserve_num_requests_running"), 3);
  EXPECT_EQ(e.Value("tqserve_num_requests_waiting"), 2);
  EXPECT_EQ(e.Value("tqserve_kv_cache_num_blocks"), 120);
  EXPECT_EQ(e.Value("tqserve_kv_cache_blocks_used"), 30);
  EXPECT_DOUBLE_EQ(e.Value("tqserve_kv_cache_usage_perc"), 30.0 / 120.0);
  EXPECT_EQ(e.Value("tqserve_kv_cache_capacity_tokens"), 1920);
  // 120 blocks: 30 used, 50 cached (prefix cache), the other 40 free.
  EXPECT_EQ(e.Value("tqserve_kv_cache_blocks", {{"state", "used"}}), 30);
  EXPECT_EQ(e.Value("tqserve_kv_cache_blocks", {{"state", "cached"}}), 50);
  EXPECT_EQ(e.Value("tqserve_kv_cache_blocks", {{"state", "free"}}), 40);
  EXPECT_EQ(e.Value("tqserve_memory_kv_cache_bytes", {{"state", "used"}}), 30 * 4096);
  EXPECT_EQ(e.Value("tqserve_memory_kv_cache_bytes", {{"state", "free"}}), 90 * 4096);
  EXPECT_EQ(e.Value("tqserve_memory_weights_bytes", {{"precision", "fp32"}}), 1000);
  EXPECT_EQ(e.Value("tqserve_memory_weights_bytes", {{"precision", "int4"}}), 500);

  std::vector<Sample> info = e.All("tqserve_info");
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0].value, 1);
  EXPECT_EQ(info[0].labels, (LabelMap{{"model_name", "served-model"},
                                      {"version", TQ_PROJECT_VERSION},
                                      {"model", "served-model"},  // the served name, never the path
                                      {"kv_cache_dtype", "tq3"},
                                      {"device", "cpu"},
                                      {"cpu_isa", "avx2"}}));
  std::vector<Sample> cache = e.All("tqserve_cache_config_info");
  ASSERT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache[0].value, 1);
  EXPECT_EQ(cache[0].labels, (LabelMap{{"model_name", "served-model"},
                                       {"block_size", "16"},
                                       {"num_blocks", "120"},
                                       {"kv_cache_dtype", "tq3"},
                                       {"kv_bytes_per_block", "4096"},
                                       {"kv_calibration", "built-in"}}));

  // A later render with other weights leaves no stale precision series.
  EngineInfo other = TestInfo();
  other.weight_bytes = {{"fp16", 2048}};
  e = RenderParsed(metrics, stats, other);
  ASSERT_EQ(e.All("tqserve_memory_weights_bytes").size(), 1u);
  EXPECT_EQ(e.Value("tqserve_memory_weights_bytes", {{"precision", "fp16"}}), 2048);
}

TEST(ServerMetrics, ModelNameOnEngineSeriesOnly) {
  ServerMetrics metrics;
  metrics.OnApiRequest("http", "/v1/models", "200");
  Exposition e = RenderParsed(metrics);
  const std::set<std::string> process_families = {"tqserve_api_requests_total",
                                                  "tqserve_memory_device_bytes",
                                                  "tqserve_process_resident_memory_bytes"};
  ASSERT_FALSE(e.samples.empty());
  for (const Sample& s : e.samples) {
    bool process = process_families.count(s.name) > 0;
    EXPECT_EQ(s.labels.count("model_name"), process ? 0u : 1u) << s.name;
    if (!process) {
      EXPECT_EQ(s.labels.at("model_name"), "served-model") << s.name;
    }
  }
}

TEST(ServerMetrics, BadInputIsClampedGaugesNonNegativeCountersMonotonic) {
  ServerMetrics metrics;
  metrics.OnStep(4, 2);
  metrics.OnFirstToken(0.5);
  Exposition before = RenderParsed(metrics);

  metrics.OnStep(-5, -3);                                         // adds nothing
  metrics.OnFirstToken(std::nan(""));                             // dropped
  metrics.OnFirstToken(std::numeric_limits<double>::infinity());  // dropped
  metrics.OnFirstToken(-1.0);                                     // counted as 0 s
  metrics.OnRequestFinished(Finished{FinishReason::kStop, -4, -1, -2.0, -1.0, -0.5, -0.5});
  metrics.OnRequestFinished(Finished{FinishReason::kNone, 1, 1, 0, 0, 0, 0});  // a failure
  EngineStats stats;
  stats.num_running = -3;
  stats.num_waiting = -1;
  stats.kv_blocks_used = 500;  // more than the 120 blocks there are
  Exposition after = RenderParsed(metrics, stats);

  EXPECT_EQ(after.Value("tqserve_prompt_tokens_total"), 4);
  EXPECT_EQ(after.Value("tqserve_generation_tokens_total"), 2);
  EXPECT_EQ(after.Value("tqserve_time_to_first_token_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(after.Value("tqserve_time_to_first_token_seconds_sum"), 0.5);
  EXPECT_EQ(after.Buckets("tqserve_time_to_first_token_seconds").at(0.0001), 1);
  EXPECT_EQ(after.Value("tqserve_e2e_request_latency_seconds_sum"), 0);
  EXPECT_EQ(after.Buckets("tqserve_request_prompt_tokens").at(1), 1);  // observed as 0
  EXPECT_EQ(after.Value("tqserve_request_failure_total"), 1);

  EXPECT_EQ(after.Value("tqserve_num_requests_running"), 0);
  EXPECT_EQ(after.Value("tqserve_num_requests_waiting"), 0);
  EXPECT_EQ(after.Value("tqserve_kv_cache_blocks_used"), 120);
  EXPECT_EQ(after.Value("tqserve_kv_cache_blocks", {{"state", "free"}}), 0);
  EXPECT_EQ(after.Value("tqserve_kv_cache_usage_perc"), 1);
  EXPECT_EQ(after.Value("tqserve_memory_kv_cache_bytes", {{"state", "free"}}), 0);
  EXPECT_EQ(after.Value("tqserve_memory_kv_cache_bytes", {{"state", "used"}}), 120 * 4096);
  for (const Sample& s : after.samples) {
    EXPECT_GE(s.value, 0) << s.name;
    if (after.type.count(s.name) && after.type.at(s.name) == "counter") {
      EXPECT_GE(s.value, before.Value(s.name, s.labels)) << s.name;
    }
  }

  // No blocks at all (engine not loaded): usage 0, not NaN.
  stats.kv_blocks_used = 0;
  Exposition empty = RenderParsed(metrics, stats, EngineInfo{});
  EXPECT_EQ(empty.Value("tqserve_kv_cache_usage_perc"), 0);
}

TEST(ServerMetrics, ApiRequestsByProtocolRouteCode) {
  ServerMetrics metrics;
  metrics.OnApiRequest("http", "/v1/completions", "200");
  metrics.OnApiRequest("http", "/v1/completions", "200");
  metrics.OnApiRequest("http", "/v1/completions", "400");
  metrics.OnApiRequest("grpc", "Generate", "OK");
  Exposition e = RenderParsed(metrics);
  const std::string name = "tqserve_api_requests_total";
  EXPECT_EQ(e.Value(name, {{"protocol", "http"}, {"route", "/v1/completions"}, {"code", "200"}}),
            2);
  EXPECT_EQ(e.Value(name, {{"protocol", "http"}, {"route", "/v1/completions"}, {"code", "400"}}),
            1);
  EXPECT_EQ(e.Value(name, {{"protocol", "grpc"}, {"route", "Generate"}, {"code", "OK"}}), 1);
  EXPECT_EQ(e.All(name).size(), 3u);
}

TEST(ServerMetrics, ApiRouteSeriesAreCapped) {
  ServerMetrics metrics;
  // 300 distinct routes: the first 256 series (docs/metrics.md) keep their
  // route, the other 44 requests are counted under route="other".
  for (int i = 0; i < 300; ++i) metrics.OnApiRequest("http", "/x" + std::to_string(i), "404");
  Exposition e = RenderParsed(metrics);
  std::vector<Sample> series = e.All("tqserve_api_requests_total");
  EXPECT_EQ(series.size(), 257u);
  double total = 0;
  for (const Sample& s : series) total += s.value;
  EXPECT_EQ(total, 300);
  EXPECT_EQ(e.Value("tqserve_api_requests_total", {{"route", "other"}}), 44);
}

// The kernel's total RAM, via sysinfo(2) (sysconf), independent of /proc/meminfo.
uint64_t SysconfRamBytes() {
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// VmRSS of /proc/self/status, in bytes: another kernel view of the RSS.
double StatusVmRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  double kib = -1;
  while (in >> key) {
    if (key == "VmRSS:") {
      in >> kib;
      break;
    }
  }
  return kib * 1024;
}

TEST(ServerMetrics, CpuDeviceMemoryIsHostRamAndProcessRss) {
  ServerMetrics metrics;
  Exposition e = RenderParsed(metrics);
  const std::string name = "tqserve_memory_device_bytes";
  EXPECT_EQ(e.Value(name, {{"device", "cpu"}, {"kind", "total"}}),
            static_cast<double>(SysconfRamBytes()));
  const double rss = StatusVmRssBytes();
  ASSERT_GT(rss, 0);
  // Read at slightly different moments: allow 16 MiB of drift.
  EXPECT_NEAR(e.Value(name, {{"device", "cpu"}, {"kind", "used"}}), rss, 16 << 20);
  EXPECT_NEAR(e.Value("tqserve_process_resident_memory_bytes"), rss, 16 << 20);

  // Another device's memory is not visible from here: no series at all.
  EngineInfo cuda = TestInfo();
  cuda.device = "cuda:0";
  e = RenderParsed(metrics, {}, cuda);
  EXPECT_TRUE(e.All(name).empty());
  EXPECT_EQ(e.All("tqserve_process_resident_memory_bytes").size(), 1u);
}

TEST(ServerMetricsHostMemory, ParsesProcfsText) {
  EXPECT_EQ(ParseMemTotalBytes("MemTotal:       16384 kB\nMemFree:  1 kB\n"), 16384u * 1024);
  EXPECT_EQ(ParseMemTotalBytes("Foo: 3 kB\nXMemTotal: 5 kB\nMemTotal: 2 kB\n"), 2048u);
  EXPECT_EQ(ParseMemTotalBytes("MemFree: 1 kB\n"), std::nullopt);
  EXPECT_EQ(ParseMemTotalBytes("MemTotal: abc kB\n"), std::nullopt);
  EXPECT_EQ(ParseMemTotalBytes("MemTotal: 12\n"), std::nullopt);
  EXPECT_EQ(ParseStatmResidentBytes("1000 250 30 5 0 400 0\n", 4096), 250u * 4096);
  EXPECT_EQ(ParseStatmResidentBytes("1000", 4096), std::nullopt);
  EXPECT_EQ(ParseStatmResidentBytes("", 4096), std::nullopt);
  EXPECT_EQ(HostMemTotalBytes(), SysconfRamBytes());
}

TEST(ServerMetrics, ConcurrentRecordingWhileRendering) {
  ServerMetrics metrics;
  constexpr int kThreads = 4;
  constexpr int kIterations = 10000;
  std::atomic<bool> done{false};
  std::atomic<int> renders{0};
  std::thread scraper([&] {
    double last_prompt = 0;
    while (!done.load()) {
      Exposition e = RenderParsed(metrics);
      double prompt = e.Value("tqserve_prompt_tokens_total");
      EXPECT_GE(prompt, last_prompt);  // counters never go back, even mid-update
      last_prompt = prompt;
      renders.fetch_add(1);
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < kIterations; ++i) {
        metrics.OnStep(1, 2);
        metrics.OnFirstToken(0.25);
        metrics.OnInterToken(0.5);
        metrics.OnPreemption();
        metrics.OnRequestFinished(Finished{FinishReason::kStop, 3, 2, 0.25, 1.5, 0.5, 0.75});
        metrics.OnApiRequest("http", "/v1/completions", "200");
      }
    });
  }
  for (std::thread& w : workers) w.join();
  done = true;
  scraper.join();
  EXPECT_GT(renders.load(), 0);

  // Quarters and halves add exactly in binary floating point.
  const double n = kThreads * kIterations;
  Exposition e = RenderParsed(metrics);
  EXPECT_EQ(e.Value("tqserve_prompt_tokens_total"), n);
  EXPECT_EQ(e.Value("tqserve_generation_tokens_total"), 2 * n);
  EXPECT_EQ(e.Value("tqserve_num_preemptions_total"), n);
  EXPECT_EQ(e.Value("tqserve_time_to_first_token_seconds_count"), n);
  EXPECT_EQ(e.Value("tqserve_time_to_first_token_seconds_sum"), 0.25 * n);
  EXPECT_EQ(e.Value("tqserve_inter_token_latency_seconds_sum"), 0.5 * n);
  EXPECT_EQ(e.Value("tqserve_request_success_total", {{"finish_reason", "stop"}}), n);
  EXPECT_EQ(e.Value("tqserve_e2e_request_latency_seconds_sum"), 1.5 * n);
  EXPECT_EQ(e.Value("tqserve_request_inference_time_seconds_sum"), 1.25 * n);
  EXPECT_EQ(e.Value("tqserve_request_prompt_tokens_sum"), 3 * n);
  EXPECT_EQ(e.Value("tqserve_api_requests_total"), n);
}

// Every metric the issue (item 10) and docs/metrics.md list, with its type.
TEST(ServerMetrics, EveryDocumentedMetricHasTypeAndHelp) {
  const std::map<std::string, std::string> documented = {
      {"tqserve_num_requests_running", "gauge"},
      {"tqserve_num_requests_waiting", "gauge"},
      {"tqserve_kv_cache_usage_perc", "gauge"},
      {"tqserve_kv_cache_num_blocks", "gauge"},
      {"tqserve_kv_cache_blocks_used", "gauge"},
      {"tqserve_kv_cache_capacity_tokens", "gauge"},
      {"tqserve_num_preemptions_total", "counter"},
      {"tqserve_prefix_cache_queries_total", "counter"},
      {"tqserve_prefix_cache_hits_total", "counter"},
      {"tqserve_kv_cache_blocks", "gauge"},
      {"tqserve_prompt_tokens_total", "counter"},
      {"tqserve_generation_tokens_total", "counter"},
      {"tqserve_request_success_total", "counter"},
      {"tqserve_request_failure_total", "counter"},
      {"tqserve_time_to_first_token_seconds", "histogram"},
      {"tqserve_inter_token_latency_seconds", "histogram"},
      {"tqserve_e2e_request_latency_seconds", "histogram"},
      {"tqserve_request_queue_time_seconds", "histogram"},
      {"tqserve_request_prefill_time_seconds", "histogram"},
      {"tqserve_request_decode_time_seconds", "histogram"},
      {"tqserve_request_inference_time_seconds", "histogram"},
      {"tqserve_request_prompt_tokens", "histogram"},
      {"tqserve_request_generation_tokens", "histogram"},
      {"tqserve_memory_weights_bytes", "gauge"},
      {"tqserve_memory_kv_cache_bytes", "gauge"},
      {"tqserve_memory_device_bytes", "gauge"},
      {"tqserve_process_resident_memory_bytes", "gauge"},
      {"tqserve_info", "gauge"},
      {"tqserve_cache_config_info", "gauge"},
      {"tqserve_api_requests_total", "counter"},
      {"tqserve_requests_refused_total", "counter"},
  };
  ServerMetrics metrics;
  // A labelled family without series is not written at all; give it one.
  metrics.OnApiRequest("http", "/health", "200");
  metrics.OnRefused("http", "body_too_large");
  Exposition e = RenderParsed(metrics);
  EXPECT_EQ(e.type, documented);
  for (const auto& [name, type] : documented) {
    ASSERT_TRUE(e.help.count(name)) << name;
    EXPECT_FALSE(e.help.at(name).empty()) << name;
  }
}

// `promtool check metrics` (the Prometheus project's own linter) on text.
class ServerMetricsPromtool : public testing::TempDirTest {
 protected:
  void ExpectClean(const std::string& text) {
    ASSERT_TRUE(std::filesystem::exists(TQ_PROMTOOL))
        << "promtool not found at configure time (\"" << TQ_PROMTOOL
        << "\"): install the Debian package prometheus and re-run cmake";
    const std::string input = Path("metrics.txt");
    std::ofstream(input) << text;
    const std::string command = std::string(TQ_PROMTOOL) + " check metrics < " + input + " 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string output;
    char buffer[512];
    while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
    int status = pclose(pipe);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << output;
    EXPECT_EQ(output, "");  // promtool prints one line per lint problem
  }
};

TEST_F(ServerMetricsPromtool, FreshMetricsPassLint) {
  ServerMetrics metrics;
  ExpectClean(metrics.Render({}, EngineInfo{}, "stories260K"));
}

TEST_F(ServerMetricsPromtool, PopulatedMetricsPassLint) {
  ServerMetrics metrics;
  metrics.OnStep(10, 4);
  metrics.OnFirstToken(0.01);
  metrics.OnInterToken(0.002);
  metrics.OnPreemption();
  metrics.OnRequestFinished(Finished{FinishReason::kLength, 10, 4, 0.001, 0.1, 0.01, 0.05});
  metrics.OnRequestFinished(Finished{FinishReason::kError, 1, 0, 0, 0, 0, 0});
  metrics.OnApiRequest("http", "/v1/chat/completions", "200");
  metrics.OnApiRequest("grpc", "Generate", "DEADLINE_EXCEEDED");
  EngineStats stats;
  stats.num_running = 1;
  stats.kv_blocks_used = 7;
  // A model name and path that need escaping in label values.
  EngineInfo info = TestInfo();
  info.model_dir = "/models/a \"quoted\" \\ dir";
  ExpectClean(metrics.Render(stats, info, "name with \"quotes\""));
  EngineInfo cuda = TestInfo();
  cuda.device = "cuda:0";  // empty tqserve_memory_device_bytes family
  ExpectClean(metrics.Render(stats, cuda, "stories260K"));
}

// The real engine on the bundled model as the observer's source: what the
// metrics count equals the usage the request streams report.
TEST_F(ServerMetricsPromtool, EngineOnBundledModel) {
  tq::testing::Watchdog watchdog("EngineOnBundledModel", std::chrono::seconds(120));
  ServerMetrics metrics;
  EngineOptions options;
  options.model_dir = TQ_MODEL_DIR;
  options.num_threads = 1;
  options.kv_cache_memory = 4 << 20;
  Engine client(options, &metrics);
  auto request = [&](const char* id, const char* prompt, int32_t max_tokens) {
    EngineRequest r;
    r.request_id = id;
    r.prompt_ids = client.tokenizer().Encode(prompt);
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    return client.Submit(std::move(r));
  };
  auto drain = [](RequestStream& stream) {
    EngineOutput all;
    while (!all.finished()) {
      if (auto out = stream.Next(std::chrono::milliseconds(50))) all.Merge(std::move(*out));
    }
    return all;
  };
  auto a = request("a", "Once upon a time", 8);
  auto b = request("b", "The dog", 5);
  auto c = request("c", "Lily saw a bird", 100000);
  EngineOutput first_c;
  while (first_c.token_ids.empty()) {
    if (auto out = c->Next(std::chrono::milliseconds(50))) first_c.Merge(std::move(*out));
  }
  client.Abort("c");
  const EngineOutput out_a = drain(*a), out_b = drain(*b), out_c = drain(*c);
  ASSERT_EQ(out_a.finish, FinishReason::kLength);
  ASSERT_EQ(out_b.finish, FinishReason::kLength);
  // c may rarely reach max_model_len before the abort lands; count what the streams say.
  ASSERT_TRUE(out_c.finish == FinishReason::kAbort || out_c.finish == FinishReason::kLength);
  const double aborted = out_c.finish == FinishReason::kAbort ? 1 : 0;
  EngineStats stats = client.Stats();
  for (int i = 0; i < 200 && (stats.num_running > 0 || stats.kv_blocks_used > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stats = client.Stats();
  }
  const std::string text = metrics.Render(stats, client.info(), "stories260K");
  const Exposition e = Parse(text);

  const double prompt = out_a.num_prompt_tokens + out_b.num_prompt_tokens + out_c.num_prompt_tokens;
  const double c_tokens = first_c.token_ids.size() + out_c.token_ids.size();
  EXPECT_EQ(e.Value("tqserve_prompt_tokens_total"), prompt);
  EXPECT_EQ(e.Value("tqserve_generation_tokens_total"), 8 + 5 + c_tokens);
  EXPECT_EQ(e.Value("tqserve_request_success_total", {{"finish_reason", "length"}}), 3 - aborted);
  EXPECT_EQ(e.Value("tqserve_request_success_total", {{"finish_reason", "abort"}}), aborted);
  EXPECT_EQ(e.Value("tqserve_time_to_first_token_seconds_count"), 3);
  EXPECT_EQ(e.Value("tqserve_inter_token_latency_seconds_count"), 7 + 4 + (c_tokens - 1));
  EXPECT_EQ(e.Value("tqserve_request_prompt_tokens_sum"), prompt);
  EXPECT_EQ(e.Value("tqserve_request_generation_tokens_sum"), 8 + 5 + c_tokens);
  EXPECT_EQ(e.Value("tqserve_num_requests_running"), 0);
  EXPECT_EQ(e.Value("tqserve_kv_cache_blocks_used"), 0);
  EXPECT_EQ(e.Value("tqserve_kv_cache_num_blocks"), client.info().num_kv_blocks);
  EXPECT_EQ(e.Value("tqserve_memory_kv_cache_bytes", {{"state", "free"}}),
            static_cast<double>(client.info().kv_cache_bytes));
  ExpectClean(text);
}

}  // namespace
}  // namespace tq

namespace tq {
namespace {

TEST(ServerMetrics, KvQualityRatiosOfAutoPerDtype) {
  ServerMetrics metrics;
  EXPECT_TRUE(RenderParsed(metrics).All("tqserve_kv_cache_quality_ratio").empty());  // flag dtype
  EngineInfo info = TestInfo();
  info.kv_dtype_choice = "auto: tq3 (...)";
  info.kv_quality_ratios = {{"tq3", 1.0021}, {"tq4", 1.0012}, {"int8", 0.9998}};
  const Exposition e = RenderParsed(metrics, {}, info);
  ASSERT_EQ(e.All("tqserve_kv_cache_quality_ratio").size(), 3u);
  EXPECT_DOUBLE_EQ(e.Value("tqserve_kv_cache_quality_ratio", {{"dtype", "tq3"}}), 1.0021);
  EXPECT_DOUBLE_EQ(e.Value("tqserve_kv_cache_quality_ratio", {{"dtype", "int8"}}), 0.9998);
  EXPECT_EQ(e.All("tqserve_cache_config_info")[0].labels.at("kv_cache_dtype"), "tq3");
}

}  // namespace
}  // namespace tq
