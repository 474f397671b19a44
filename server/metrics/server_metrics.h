// Prometheus metrics of the daemon (prometheus-cpp), served at /metrics.
#pragma once

#include <memory>
#include <string>

#include "engine/runtime/engine_stats.h"

namespace tq {

/// All tqserve_* metrics (names and meanings follow vLLM's, DESIGN.md
/// "Configuration and names"; base units). Counters and histograms are fed by
/// engine events (EngineObserver, on the engine thread) and by the front ends
/// (HTTP/gRPC request counts); gauges are read from EngineStats and the
/// process when scraped. Thread-safe: any thread may record or render.
/// Bad input never makes a gauge negative or a counter decrease (negative
/// counts add nothing, NaN/infinite durations are dropped, negative ones count
/// as 0 s). Every metric, label and bucket: docs/metrics.md.
class ServerMetrics : public EngineObserver {
 public:
  ServerMetrics();
  ~ServerMetrics() override;

  // EngineObserver (engine thread).
  void OnStep(int32_t prompt_tokens, int32_t generated_tokens) override;
  void OnFirstToken(double ttft_seconds) override;
  void OnInterToken(double itl_seconds) override;
  void OnPreemption() override;
  void OnPrefixCache(int32_t queried_tokens, int32_t hit_tokens) override;
  void OnRequestFinished(const FinishedRequestStats& stats) override;

  /// A front-end request ended with HTTP status `code` (gRPC: the status code
  /// name) on `route` ("/v1/completions", "Generate", ...); protocol is
  /// "http" or "grpc".
  void OnApiRequest(const std::string& protocol, const std::string& route, const std::string& code);

  /// A request was refused by a limit or guard before it reached the engine
  /// (tqserve_requests_refused_total): `reason` is one of the fixed labels of
  /// docs/metrics.md ("prompt_too_long", "body_too_large", "unauthorized", ...).
  void OnRefused(const std::string& protocol, const std::string& reason);

  /// The Prometheus text exposition format (version 0.0.4) of every metric,
  /// with gauges from `stats`/`info` and process memory read now;
  /// `served_model_name` becomes the model_name label of the engine series.
  std::string Render(const EngineStats& stats, const EngineInfo& info,
                     const std::string& served_model_name);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq
