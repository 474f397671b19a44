#include "server/metrics/server_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/backend_factory.h"
#include "server/metrics/host_memory.h"

#ifndef TQ_VERSION
#error "TQ_VERSION must be defined by the build (server/metrics/CMakeLists.txt)"
#endif

namespace tq {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;

// Bucket upper bounds (docs/metrics.md gives the reasons): vLLM's lists, with
// finer sub-10 ms steps in front because a CPU or a fast GPU lands there.
// Functions, not globals, so that a ServerMetrics built during another
// translation unit's static initialization still finds them.
const Histogram::BucketBoundaries& TtftBuckets() {
  static const Histogram::BucketBoundaries buckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
      0.75,   1.0,     2.5,    5.0,   7.5,   10.0, 20.0, 40.0, 80.0, 160., 640., 2560.};
  return buckets;
}

const Histogram::BucketBoundaries& ItlBuckets() {
  static const Histogram::BucketBoundaries buckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15,
      0.2,    0.3,     0.4,    0.5,   0.75,   1.0,   2.5,    5.0,  7.5,   10.0, 20.0,  40.0, 80.0};
  return buckets;
}

// Whole-request phases (e2e, queue, prefill, decode, inference).
const Histogram::BucketBoundaries& RequestBuckets() {
  static const Histogram::BucketBoundaries buckets = {
      0.001, 0.0025, 0.005, 0.01,  0.025, 0.05,  0.1,    0.3,   0.5,  0.8,
      1.0,   1.5,    2.0,   2.5,   5.0,   10.0,  15.0,   20.0,  30.0, 40.0,
      50.0,  60.0,   120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return buckets;
}

// vLLM's build_1_2_5_buckets, to a fixed 10^6 tokens instead of max_model_len
// (buckets are fixed at construction, before the engine is known).
Histogram::BucketBoundaries TokenCountBuckets() {
  Histogram::BucketBoundaries buckets;
  for (double decade = 1; decade <= 1e6; decade *= 10) {
    for (double mantissa : {1.0, 2.0, 5.0}) {
      if (mantissa * decade <= 1e6) buckets.push_back(mantissa * decade);
    }
  }
  return buckets;
}

// Counts from the engine are non-negative by contract; a negative one (a bug)
// adds nothing, so that counters never decrease.
double CountOrZero(int64_t count) {
  return count > 0 ? static_cast<double>(count) : 0.0;
}

// A duration to observe: NaN and infinities are dropped (one would poison the
// histogram's _sum forever); a negative one (impossible on a steady clock) is
// observed as 0 so that _count still counts the event.
void ObserveSeconds(Histogram& histogram, double seconds) {
  if (!std::isfinite(seconds)) return;
  histogram.Observe(std::max(seconds, 0.0));
}

Counter& AddCounter(prometheus::Registry& registry, const std::string& name,
                    const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

Gauge& AddGauge(prometheus::Registry& registry, const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

Histogram& AddHistogram(prometheus::Registry& registry, const std::string& name,
                        const std::string& help, const Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add({}, buckets);
}

// Whole-request phases, as vLLM's request histograms (FinishedRequestStats).
enum Phase { kE2e, kQueue, kPrefill, kDecode, kInference, kNumPhases };

struct PhaseMetric {
  const char* name;
  const char* help;
};
constexpr std::array<PhaseMetric, kNumPhases> kPhaseMetrics = {{
    {"tqserve_e2e_request_latency_seconds", "Time from arrival to finish of a request in seconds."},
    {"tqserve_request_queue_time_seconds",
     "Time from arrival to first scheduling of a request (WAITING phase) in seconds."},
    {"tqserve_request_prefill_time_seconds",
     "Time from first scheduling to the first token (PREFILL phase) in seconds."},
    {"tqserve_request_decode_time_seconds",
     "Time from the first token to finish (DECODE phase) in seconds."},
    {"tqserve_request_inference_time_seconds",
     "Prefill plus decode time of a request (RUNNING phase) in seconds."},
}};

std::array<Histogram*, kNumPhases> AddPhaseHistograms(prometheus::Registry& registry) {
  std::array<Histogram*, kNumPhases> histograms{};
  for (size_t i = 0; i < kNumPhases; ++i) {
    histograms[i] =
        &AddHistogram(registry, kPhaseMetrics[i].name, kPhaseMetrics[i].help, RequestBuckets());
  }
  return histograms;
}

/// The children of a gauge family kept equal to a given set of label sets
/// (label sets not assigned again are removed, so no stale series remain).
/// Not thread-safe: used under the render mutex.
class GaugeSet {
 public:
  GaugeSet(prometheus::Registry& registry, const std::string& name, const std::string& help)
      : family_(prometheus::BuildGauge().Name(name).Help(help).Register(registry)) {}

  void Assign(const std::vector<std::pair<Labels, double>>& values) {
    std::map<Labels, Gauge*> next;
    for (const auto& [labels, value] : values) {
      auto it = live_.find(labels);
      Gauge* gauge = it != live_.end() ? it->second : &family_.Add(labels);
      gauge->Set(value);
      next.emplace(labels, gauge);
    }
    for (const auto& [labels, gauge] : live_) {
      if (!next.count(labels)) family_.Remove(gauge);
    }
    live_ = std::move(next);
  }

 private:
  Family<Gauge>& family_;
  std::map<Labels, Gauge*> live_;
};

// Distinct {protocol, route, code} series before new routes count as
// route="other": a client probing random URLs must not grow /metrics forever.
constexpr size_t kMaxApiSeries = 256;

}  // namespace

struct ServerMetrics::Impl {
  // Series of the served model: model_name is added when rendering, because
  // the engine's events do not carry it (Render's argument does).
  prometheus::Registry model_registry;
  // Front-end and process series (no model_name).
  prometheus::Registry process_registry;

  // Engine gauges, set from EngineStats/EngineInfo in Render.
  Gauge& num_running = AddGauge(model_registry, "tqserve_num_requests_running",
                                "Number of requests in the running batch (scheduled to compute).");
  Gauge& num_waiting =
      AddGauge(model_registry, "tqserve_num_requests_waiting",
               "Number of requests waiting to be scheduled (queued or preempted).");
  Gauge& kv_usage = AddGauge(model_registry, "tqserve_kv_cache_usage_perc",
                             "KV-cache usage as a fraction of its blocks: 1 means 100 percent.");
  Gauge& kv_blocks = AddGauge(model_registry, "tqserve_kv_cache_num_blocks",
                              "Number of blocks in the KV-cache pool.");
  Gauge& kv_blocks_used = AddGauge(model_registry, "tqserve_kv_cache_blocks_used",
                                   "Number of KV-cache blocks held by sequences.");
  GaugeSet kv_blocks_by_state{model_registry, "tqserve_kv_cache_blocks",
                              "KV-cache blocks by state: used (held by sequences), cached "
                              "(refcount 0, kept for prefix cache hits, evicted LRU when a "
                              "block is needed), free; they add up to num_blocks."};
  Gauge& kv_capacity = AddGauge(model_registry, "tqserve_kv_cache_capacity_tokens",
                                "Tokens the KV-cache pool holds (blocks times block size).");
  GaugeSet kv_bytes{model_registry, "tqserve_memory_kv_cache_bytes",
                    "KV-cache pool memory in bytes per tensor-parallel rank: used = blocks "
                    "used times the rank's bytes per block; free = pool bytes minus used."};
  GaugeSet weight_bytes{model_registry, "tqserve_memory_weights_bytes",
                        "Memory of the model weights in bytes, by storage precision and "
                        "tensor-parallel rank."};
  GaugeSet info_labels{model_registry, "tqserve_info",
                       "Build and model facts as labels; the value is always 1."};
  GaugeSet cache_config{model_registry, "tqserve_cache_config_info",
                        "KV-cache configuration as labels; the value is always 1."};
  GaugeSet kv_quality_ratio{model_registry, "tqserve_kv_cache_quality_ratio",
                            "--kv-cache-dtype auto: perplexity with each candidate KV format "
                            "over that with an fp32 cache, on held-out calibration text "
                            "(measured at start-up)."};

  // Engine counters.
  Counter& prompt_tokens = AddCounter(model_registry, "tqserve_prompt_tokens_total",
                                      "Number of prompt tokens prefilled (recompute after "
                                      "preemption not counted again).");
  Counter& generation_tokens =
      AddCounter(model_registry, "tqserve_generation_tokens_total", "Number of tokens generated.");
  Counter& prefix_queries =
      AddCounter(model_registry, "tqserve_prefix_cache_queries_total",
                 "Prompt tokens looked up in the prefix cache (requests admitted for the first "
                 "time; vLLM's prefix_cache_queries).");
  Counter& prefix_hits = AddCounter(model_registry, "tqserve_prefix_cache_hits_total",
                                    "Prompt tokens found in the prefix cache (their KV reused, "
                                    "not computed; vLLM's prefix_cache_hits).");
  Counter& preemptions = AddCounter(model_registry, "tqserve_num_preemptions_total",
                                    "Number of preemptions (a running sequence's blocks freed, "
                                    "recomputed later).");
  Family<Counter>& success_family =
      prometheus::BuildCounter()
          .Name("tqserve_request_success_total")
          .Help("Number of requests finished, by finish_reason (stop, length, abort).")
          .Register(model_registry);
  // Created up front so that every reason has a series at 0 (rate() works).
  std::array<Counter*, 3> success_by_reason = {&success_family.Add({{"finish_reason", "stop"}}),
                                               &success_family.Add({{"finish_reason", "length"}}),
                                               &success_family.Add({{"finish_reason", "abort"}})};
  Counter& failures = AddCounter(model_registry, "tqserve_request_failure_total",
                                 "Number of requests ended by an engine error.");

  // Engine histograms.
  Histogram& ttft =
      AddHistogram(model_registry, "tqserve_time_to_first_token_seconds",
                   "Time from arrival to the first generated token in seconds.", TtftBuckets());
  Histogram& itl = AddHistogram(model_registry, "tqserve_inter_token_latency_seconds",
                                "Time between two consecutive generated tokens of a request "
                                "in seconds.",
                                ItlBuckets());
  std::array<Histogram*, kNumPhases> phases = AddPhaseHistograms(model_registry);
  Histogram& request_prompt_tokens =
      AddHistogram(model_registry, "tqserve_request_prompt_tokens",
                   "Number of prompt tokens of a finished request.", TokenCountBuckets());
  Histogram& request_generation_tokens =
      AddHistogram(model_registry, "tqserve_request_generation_tokens",
                   "Number of tokens generated for a finished request.", TokenCountBuckets());

  // Process and front-end series.
  GaugeSet device_bytes{process_registry, "tqserve_memory_device_bytes",
                        "Memory of the compute device in bytes: total and used by this server "
                        "(on device cpu: MemTotal and this process's resident set)."};
  GaugeSet resident_bytes{process_registry, "tqserve_process_resident_memory_bytes",
                          "Resident set size of this process in bytes (/proc/self/statm)."};
  Family<Counter>& api_family =
      prometheus::BuildCounter()
          .Name("tqserve_api_requests_total")
          .Help("Number of API requests answered, by protocol, route and status code.")
          .Register(process_registry);

  Family<Counter>& refused_family =
      prometheus::BuildCounter()
          .Name("tqserve_requests_refused_total")
          .Help(
              "Number of API requests refused by a request limit or guard, by protocol and "
              "reason.")
          .Register(process_registry);

  std::mutex api_mutex;  // guards api_counters and refused_counters
  std::map<Labels, Counter*> api_counters;
  std::map<Labels, Counter*> refused_counters;
  std::mutex render_mutex;  // guards the GaugeSets and serializes Render

  void SetEngineGauges(const EngineStats& stats, const EngineInfo& info,
                       const std::string& served_model_name);
  void SetProcessGauges(const EngineInfo& info);
};

void ServerMetrics::Impl::SetEngineGauges(const EngineStats& stats, const EngineInfo& info,
                                          const std::string& served_model_name) {
  num_running.Set(CountOrZero(stats.num_running));
  num_waiting.Set(CountOrZero(stats.num_waiting));
  const double total_blocks = CountOrZero(info.num_kv_blocks);
  // Used blocks are clamped to [0, total]: a fraction above 1 or negative free
  // bytes would only repeat an engine bug as a nonsense gauge.
  const double used_blocks = std::min(CountOrZero(stats.kv_blocks_used), total_blocks);
  kv_blocks.Set(total_blocks);
  kv_blocks_used.Set(used_blocks);
  kv_usage.Set(total_blocks > 0 ? used_blocks / total_blocks : 0.0);
  kv_capacity.Set(CountOrZero(info.kv_capacity_tokens));
  const double cached_blocks =
      std::min(CountOrZero(stats.kv_blocks_cached), total_blocks - used_blocks);
  kv_blocks_by_state.Assign({{{{"state", "used"}}, used_blocks},
                             {{{"state", "cached"}}, cached_blocks},
                             {{{"state", "free"}}, total_blocks - used_blocks - cached_blocks}});

  // Per tensor-parallel rank (rank="0" alone without TP): every rank's pool
  // has the same blocks, each block holding that rank's KV heads.
  std::vector<RankMemory> ranks = info.ranks;
  if (ranks.empty()) {  // an EngineInfo built without ranks: one rank holds everything
    ranks.push_back({0, info.weight_bytes, info.kv_cache_bytes, info.kv_capacity_tokens});
  }
  std::vector<std::pair<Labels, double>> kv, weights;
  for (const RankMemory& r : ranks) {
    const std::string rank = std::to_string(r.rank);
    const double pool = static_cast<double>(r.kv_cache_bytes);
    const double used = total_blocks > 0 ? pool * used_blocks / total_blocks : 0.0;
    kv.push_back({{{"state", "used"}, {"rank", rank}}, used});
    kv.push_back({{{"state", "free"}, {"rank", rank}}, std::max(pool - used, 0.0)});
    for (const auto& [precision, bytes] : r.weight_bytes) {
      weights.push_back({{{"precision", precision}, {"rank", rank}}, static_cast<double>(bytes)});
    }
  }
  kv_bytes.Assign(kv);
  weight_bytes.Assign(weights);

  info_labels.Assign({{{{"version", TQ_VERSION},
                        {"model", served_model_name},
                        {"kv_cache_dtype", info.kv_cache_dtype},
                        {"device", info.device},
                        {"cpu_isa", info.cpu_isa}},
                       1.0}});
  cache_config.Assign({{{{"block_size", std::to_string(info.block_size)},
                         {"num_blocks", std::to_string(info.num_kv_blocks)},
                         {"kv_cache_dtype", info.kv_cache_dtype},
                         {"kv_bytes_per_block", std::to_string(info.kv_bytes_per_block)},
                         {"kv_calibration", info.kv_calibration_source}},
                        1.0}});
  std::vector<std::pair<Labels, double>> ratios;
  for (const auto& [dtype, ratio] : info.kv_quality_ratios)
    ratios.push_back({{{"dtype", dtype}}, ratio});
  kv_quality_ratio.Assign(ratios);
}

void ServerMetrics::Impl::SetProcessGauges(const EngineInfo& info) {
  const std::optional<uint64_t> rss = ProcessResidentBytes();
  std::vector<std::pair<Labels, double>> resident;
  if (rss) resident.push_back({{}, static_cast<double>(*rss)});
  resident_bytes.Assign(resident);

  std::vector<std::pair<Labels, double>> device;
  if (info.device == "cuda") {
    // One series pair per tensor-parallel rank, each of its own GPU
    // (cudaMemGetInfo: the whole device, as nvidia-smi's memory.used).
    std::vector<std::pair<int, int>> rank_devices;  // (rank, CUDA device)
    for (const RankMemory& r : info.ranks) {
      if (r.cuda_device >= 0) rank_devices.push_back({r.rank, r.cuda_device});
    }
    if (info.ranks.empty()) rank_devices.push_back({0, 0});
    for (const auto& [rank, index] : rank_devices) {
      kernels::DeviceMemoryInfo gpu;
      if (!kernels::QueryCudaDeviceMemory(index, &gpu)) continue;
      const std::string r = std::to_string(rank);
      device.push_back({{{"device", "cuda"}, {"kind", "total"}, {"rank", r}},
                        static_cast<double>(gpu.total_bytes)});
      device.push_back({{{"device", "cuda"}, {"kind", "used"}, {"rank", r}},
                        static_cast<double>(gpu.total_bytes - gpu.free_bytes)});
    }
  } else if (info.device == "cpu") {
    if (std::optional<uint64_t> total = HostMemTotalBytes()) {
      device.push_back({{{"device", "cpu"}, {"kind", "total"}}, static_cast<double>(*total)});
    }
    if (rss) device.push_back({{{"device", "cpu"}, {"kind", "used"}}, static_cast<double>(*rss)});
  }
  device_bytes.Assign(device);
}

ServerMetrics::ServerMetrics() : impl_(std::make_unique<Impl>()) {}

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::OnStep(int32_t prompt_tokens, int32_t generated_tokens) {
  impl_->prompt_tokens.Increment(CountOrZero(prompt_tokens));
  impl_->generation_tokens.Increment(CountOrZero(generated_tokens));
}

void ServerMetrics::OnFirstToken(double ttft_seconds) {
  ObserveSeconds(impl_->ttft, ttft_seconds);
}

void ServerMetrics::OnInterToken(double itl_seconds) {
  ObserveSeconds(impl_->itl, itl_seconds);
}

void ServerMetrics::OnPrefixCache(int32_t queried_tokens, int32_t hit_tokens) {
  if (queried_tokens > 0) impl_->prefix_queries.Increment(queried_tokens);
  if (hit_tokens > 0) impl_->prefix_hits.Increment(hit_tokens);
}

void ServerMetrics::OnPreemption() {
  impl_->preemptions.Increment();
}

void ServerMetrics::OnRequestFinished(const FinishedRequestStats& stats) {
  Counter* success = nullptr;
  switch (stats.finish) {
    case FinishReason::kStop:
      success = impl_->success_by_reason[0];
      break;
    case FinishReason::kLength:
      success = impl_->success_by_reason[1];
      break;
    case FinishReason::kAbort:
      success = impl_->success_by_reason[2];
      break;
    case FinishReason::kError:
    case FinishReason::kNone:  // not a finish at all: an engine bug, counted as a failure
      impl_->failures.Increment();
      return;
  }
  success->Increment();
  // As vLLM: every counted request is observed, aborts and zero-token ones too.
  const std::array<double, kNumPhases> seconds = {stats.e2e_seconds, stats.queue_seconds,
                                                  stats.prefill_seconds, stats.decode_seconds,
                                                  stats.prefill_seconds + stats.decode_seconds};
  for (size_t i = 0; i < kNumPhases; ++i) ObserveSeconds(*impl_->phases[i], seconds[i]);
  impl_->request_prompt_tokens.Observe(CountOrZero(stats.num_prompt_tokens));
  impl_->request_generation_tokens.Observe(CountOrZero(stats.num_output_tokens));
}

void ServerMetrics::OnApiRequest(const std::string& protocol, const std::string& route,
                                 const std::string& code) {
  Labels labels = {{"protocol", protocol}, {"route", route}, {"code", code}};
  std::lock_guard<std::mutex> lock(impl_->api_mutex);
  auto it = impl_->api_counters.find(labels);
  if (it == impl_->api_counters.end() && impl_->api_counters.size() >= kMaxApiSeries) {
    labels["route"] = "other";
    it = impl_->api_counters.find(labels);
  }
  if (it == impl_->api_counters.end()) {
    it = impl_->api_counters.emplace(labels, &impl_->api_family.Add(labels)).first;
  }
  it->second->Increment();
}

void ServerMetrics::OnRefused(const std::string& protocol, const std::string& reason) {
  const Labels labels = {{"protocol", protocol}, {"reason", reason}};
  std::lock_guard<std::mutex> lock(impl_->api_mutex);
  auto it = impl_->refused_counters.find(labels);
  if (it == impl_->refused_counters.end()) {
    // The reasons are a fixed set chosen by the code, never client text.
    it = impl_->refused_counters.emplace(labels, &impl_->refused_family.Add(labels)).first;
  }
  it->second->Increment();
}

std::string ServerMetrics::Render(const EngineStats& stats, const EngineInfo& info,
                                  const std::string& served_model_name) {
  std::lock_guard<std::mutex> lock(impl_->render_mutex);
  impl_->SetEngineGauges(stats, info, served_model_name);
  impl_->SetProcessGauges(info);

  std::vector<prometheus::MetricFamily> families = impl_->model_registry.Collect();
  for (prometheus::MetricFamily& family : families) {
    for (prometheus::ClientMetric& metric : family.metric) {
      metric.label.insert(metric.label.begin(), {"model_name", served_model_name});
    }
  }
  std::vector<prometheus::MetricFamily> process = impl_->process_registry.Collect();
  families.insert(families.end(), std::make_move_iterator(process.begin()),
                  std::make_move_iterator(process.end()));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace tq
