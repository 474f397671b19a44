// tq_bench_serving: a load generator for an OpenAI-compatible completions
// server (tqserve serve, or vLLM & co. for comparison). Runs each requested
// concurrency level in one process, side by side (levels interleaved repeat
// by repeat), with `concurrency` client threads that each send one request at
// a time over a keep-alive connection until `num-requests` are done.
//
// Reports per run: requests/s, output tokens/s (usage.completion_tokens over
// the run's wall time), TTFT p50/p99 (request sent -> first generated token),
// ITL p50/p99 (gap between successive token-bearing chunks, divided among the
// chunk's tokens, as vLLM's benchmark_serving does), E2E p50. Usage and
// results: docs/PERFORMANCE.md ("Serving"); bench/run_serving_bench.sh.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Options {
  std::string url = "http://127.0.0.1:8000";
  std::string model;  // default: the first of GET /v1/models
  std::vector<int> concurrency{1};
  std::vector<int> num_requests{16};
  int prompt_len = 128;
  int output_len = 128;
  bool stream = false;
  int repeats = 1;
  int vocab = 512;  // prompt ids are drawn from [3, vocab): valid for the bundled tokenizer too
  uint64_t seed = 0;
  double temperature = 0.0;
  int timeout_s = 600;
};

/// One request's timeline, seconds since the run started.
struct RequestResult {
  bool ok = false;
  std::string error;
  double sent = 0, first_token = -1, done = 0;
  std::vector<double> itl;  // seconds per token between token-bearing chunks
  int64_t output_tokens = 0;
};

/// Accumulates a streamed response body and parses complete SSE events.
class SseParser {
 public:
  /// Feeds bytes; calls on_data(payload) for each complete `data:` event.
  template <typename F>
  void Feed(const char* data, size_t len, F&& on_data) {
    buffer_.append(data, len);
    size_t end;
    while ((end = buffer_.find("\n\n")) != std::string::npos) {
      std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      std::istringstream lines(event);
      std::string line, payload;
      while (std::getline(lines, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) == 0)
          payload += line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
      }
      if (!payload.empty()) on_data(payload);
    }
  }
  const std::string& rest() const { return buffer_; }

 private:
  std::string buffer_;
};

/// Tokens in one completions chunk: its logprobs.tokens when present (we ask
/// for logprobs=0 so that chunks whose text is empty still count), else 1 per
/// chunk with text.
int64_t TokensInChunk(const json& chunk) {
  int64_t n = 0;
  if (!chunk.contains("choices")) return 0;
  for (const auto& c : chunk["choices"]) {
    if (c.contains("logprobs") && c["logprobs"].is_object() && c["logprobs"].contains("tokens")) {
      n += static_cast<int64_t>(c["logprobs"]["tokens"].size());
    } else if (c.contains("text") && !c["text"].get<std::string>().empty()) {
      n += 1;
    }
  }
  return n;
}

/// Sends one completion request and times it.
RequestResult RunRequest(httplib::Client& cli, const Options& o, const std::string& model,
                         const std::vector<int>& prompt, Clock::time_point t0) {
  RequestResult r;
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  json body = {{"model", model},
               {"prompt", prompt},
               {"max_tokens", o.output_len},
               {"ignore_eos", true},
               {"temperature", o.temperature},
               {"stream", o.stream}};
  if (o.stream) {
    body["stream_options"] = {{"include_usage", true}};
    body["logprobs"] = 0;
  }
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  std::string raw;
  SseParser sse;
  double last_chunk = -1;
  std::string parse_error;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    if (!o.stream) {
      raw.append(data, len);
      return true;
    }
    sse.Feed(data, len, [&](const std::string& payload) {
      if (payload == "[DONE]") return;
      const double t = now();
      json chunk = json::parse(payload, nullptr, false);
      if (chunk.is_discarded()) {
        parse_error = "unparsable SSE data: " + payload.substr(0, 200);
        return;
      }
      if (chunk.contains("error")) parse_error = chunk["error"].dump();
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        r.output_tokens = chunk["usage"].value("completion_tokens", int64_t{0});
      }
      const int64_t tokens = TokensInChunk(chunk);
      if (tokens == 0) return;
      if (r.first_token < 0) {
        r.first_token = t;
        if (tokens > 1) r.itl.insert(r.itl.end(), tokens - 1, 0.0);
      } else {
        r.itl.insert(r.itl.end(), tokens, (t - last_chunk) / double(tokens));
      }
      last_chunk = t;
    });
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  r.sent = now();
  const bool sent = cli.send(req, res, err);
  r.done = now();
  if (!sent) {
    char when[96];
    std::snprintf(when, sizeof when, " (sent at %.3f s, failed %.3f s later)", r.sent,
                  r.done - r.sent);
    r.error = "HTTP request failed: " + httplib::to_string(err) + when;
  } else if (res.status != 200) {
    r.error =
        "HTTP " + std::to_string(res.status) + ": " + (o.stream ? sse.rest() : raw).substr(0, 300);
  } else if (!parse_error.empty()) {
    r.error = parse_error;
  } else if (!o.stream) {
    json j = json::parse(raw, nullptr, false);
    if (j.is_discarded() || !j.contains("usage")) {
      r.error = "bad response: " + raw.substr(0, 300);
    } else {
      r.output_tokens = j["usage"].value("completion_tokens", int64_t{0});
    }
  }
  r.ok = r.error.empty();
  return r;
}

/// numpy.percentile's default (linear interpolation between closest ranks).
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * double(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

struct RunSummary {
  int concurrency = 0;
  int requests = 0, failed = 0;
  double wall_s = 0, req_per_s = 0, out_tok_per_s = 0;
  double ttft_p50 = NAN, ttft_p99 = NAN, itl_p50 = NAN, itl_p99 = NAN, e2e_p50 = NAN;
  int64_t output_tokens = 0;
  std::string first_error;
};

/// One run: `concurrency` threads share `num_requests` requests.
RunSummary RunLevel(const Options& o, const std::string& model, int concurrency, int num_requests,
                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> id(3, o.vocab - 1);
  std::vector<std::vector<int>> prompts(num_requests, std::vector<int>(o.prompt_len));
  for (auto& p : prompts)
    for (auto& t : p) t = id(rng);

  std::vector<RequestResult> results(num_requests);
  std::atomic<int> next{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < concurrency; ++c) {
    threads.emplace_back([&] {
      httplib::Client cli(o.url);
      cli.set_keep_alive(true);
      cli.set_read_timeout(o.timeout_s, 0);
      cli.set_write_timeout(o.timeout_s, 0);
      for (int i, on_connection = 0; (i = next.fetch_add(1)) < num_requests; ++on_connection) {
        results[i] = RunRequest(cli, o, model, prompts[i], t0);
        if (!results[i].ok) {
          results[i].error += "; request " + std::to_string(on_connection + 1) + " of its client";
        }
      }
    });
  }
  for (auto& t : threads) t.join();

  RunSummary s;
  s.concurrency = concurrency;
  s.requests = num_requests;
  std::vector<double> ttft, itl, e2e;
  double end = 0;
  for (const auto& r : results) {
    if (!r.ok) {
      if (s.failed++ == 0) s.first_error = r.error;
      continue;
    }
    end = std::max(end, r.done);
    s.output_tokens += r.output_tokens;
    e2e.push_back(r.done - r.sent);
    if (r.first_token >= 0) ttft.push_back(r.first_token - r.sent);
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
  }
  s.wall_s = end;
  if (end > 0) {
    s.req_per_s = double(num_requests - s.failed) / end;
    s.out_tok_per_s = double(s.output_tokens) / end;
  }
  s.ttft_p50 = Percentile(ttft, 50);
  s.ttft_p99 = Percentile(ttft, 99);
  s.itl_p50 = Percentile(itl, 50);
  s.itl_p99 = Percentile(itl, 99);
  s.e2e_p50 = Percentile(e2e, 50);
  return s;
}

std::string FirstModel(const Options& o) {
  httplib::Client cli(o.url);
  auto res = cli.Get("/v1/models");
  if (!res || res->status != 200) {
    throw std::runtime_error("GET " + o.url + "/v1/models failed" +
                             (res ? ": HTTP " + std::to_string(res->status) : ""));
  }
  return json::parse(res->body).at("data").at(0).at("id").get<std::string>();
}

void PrintRun(const RunSummary& s, int repeat) {
  std::printf("%11d %6d %4d %7d %8.2f %8.2f %10.1f %9.1f %9.1f %9.2f %9.2f %8.2f\n", s.concurrency,
              repeat, s.requests, s.failed, s.wall_s, s.req_per_s, s.out_tok_per_s,
              s.ttft_p50 * 1e3, s.ttft_p99 * 1e3, s.itl_p50 * 1e3, s.itl_p99 * 1e3, s.e2e_p50);
  if (s.failed > 0) std::printf("    first error: %s\n", s.first_error.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("tq_bench_serving: load generator for /v1/completions (TTFT, ITL, tokens/s)");
  app.add_option("--url", o.url, "Server root URL")->capture_default_str();
  app.add_option("--model", o.model, "Model name (default: the first of /v1/models)");
  app.add_option("--concurrency", o.concurrency, "Client threads; several values run side by side")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--num-requests", o.num_requests,
                 "Requests per run: one value, or one per --concurrency value")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--prompt-len", o.prompt_len, "Prompt length in tokens (random ids)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--output-len", o.output_len, "Generated tokens per request (ignore_eos)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--stream", o.stream, "Stream (needed for TTFT and ITL)");
  app.add_option("--repeats", o.repeats, "Runs per concurrency, interleaved")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--vocab", o.vocab, "Prompt ids are drawn from [3, vocab)")
      ->check(CLI::Range(4, 1 << 30))
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "Sampling temperature")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the random prompts")->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "Per-request read timeout, seconds")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.num_requests.size() != 1 && o.num_requests.size() != o.concurrency.size()) {
    std::fprintf(stderr, "--num-requests: give one value or one per --concurrency value\n");
    return 2;
  }
  for (int c : o.concurrency) {
    if (c < 1) {
      std::fprintf(stderr, "--concurrency: values must be >= 1\n");
      return 2;
    }
  }

  try {
    const std::string model = o.model.empty() ? FirstModel(o) : o.model;
    std::printf("tq_bench_serving: %s model %s, prompt %d, output %d tokens, %s, %d repeat(s)\n",
                o.url.c_str(), model.c_str(), o.prompt_len, o.output_len,
                o.stream ? "stream" : "no stream", o.repeats);
    // Warm-up: one request (first-touch allocations, thread start-up).
    Options warm = o;
    warm.output_len = std::min(o.output_len, 8);
    RunLevel(warm, model, 1, 1, o.seed + 999);

    std::printf("%11s %6s %4s %7s %8s %8s %10s %9s %9s %9s %9s %8s\n", "concurrency", "repeat",
                "reqs", "failed", "wall s", "req/s", "out tok/s", "TTFT p50", "TTFT p99", "ITL p50",
                "ITL p99", "E2E p50");
    std::printf("%11s %6s %4s %7s %8s %8s %10s %9s %9s %9s %9s %8s\n", "", "", "", "", "", "", "",
                "ms", "ms", "ms", "ms", "s");
    std::map<int, std::vector<double>> throughput;
    int failures = 0;
    for (int rep = 0; rep < o.repeats; ++rep) {
      for (size_t k = 0; k < o.concurrency.size(); ++k) {
        const int n = o.num_requests.size() == 1 ? o.num_requests[0] : o.num_requests[k];
        const RunSummary s = RunLevel(o, model, o.concurrency[k], n, o.seed + 7919 * k + rep);
        PrintRun(s, rep);
        failures += s.failed;
        throughput[o.concurrency[k]].push_back(s.out_tok_per_s);
      }
    }
    if (o.concurrency.size() >= 2) {
      auto median = [](std::vector<double> v) { return Percentile(std::move(v), 50); };
      const double base = median(throughput[o.concurrency.front()]);
      for (size_t k = 1; k < o.concurrency.size(); ++k) {
        std::printf("throughput ratio concurrency %d / %d: %.2fx (median out tok/s %.1f / %.1f)\n",
                    o.concurrency[k], o.concurrency.front(),
                    median(throughput[o.concurrency[k]]) / base,
                    median(throughput[o.concurrency[k]]), base);
      }
    }
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tq_bench_serving: %s\n", e.what());
    return 1;
  }
}
