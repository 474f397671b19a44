// `tqserve serve`: the OpenAI-compatible HTTP daemon and the gRPC API
// (docs/grpc.md). Flags, start-up order (HTTP and gRPC first, then the model),
// signals and the drain on SIGTERM/SIGINT/SIGHUP.
#include <pthread.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "engine/common/error.h"
#include "engine/kv/kv_cache.h"
#include "engine/parallel/nccl_communicator.h"
#include "engine/parallel/tp_devices.h"
#include "engine/parallel/tp_plan.h"
#include "engine/quant/quant_config.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/offline_engine.h"
#include "kernels/cpu/cpu_isa.h"
#include "server/cli_commands.h"
#include "server/grpc/grpc_server.h"
#include "server/http/http_server.h"
#include "server/metrics/server_metrics.h"
#include "server/tls/tls_credentials.h"

namespace tq {
namespace {

using Clock = std::chrono::steady_clock;

struct ServeArgs {
  EngineOptions engine;
  std::string kv_cache_dtype = kDefaultKvCacheDtype;  // docs/kv-cache.md
  http::HttpOptions http;
  grpc_api::GrpcOptions grpc;  // port 0: no gRPC server
  double shutdown_timeout_s = 30;
  int max_pending_requests = -1;  // -1: 4 x --max-num-seqs
  bool disable_log_requests = false;
  bool kv_cache_memory_set = false;
  std::vector<std::string> api_keys;  // --api-key (repeatable)
  std::string api_key_file;
  std::string config_file;
  tls::TlsFlags tls;  // --ssl-certfile, --ssl-keyfile, --ssl-ca-certs
};

// --config FILE. CLI11 (2.1) reads a set_config file for the main app only,
// so serve applies its own: each TOML key is a long flag name ('_' or '-'),
// at the top level or in a [serve] table; a flag also given on the command
// line keeps the command line's value. Unknown keys are errors (exit 2).
void ApplyConfigFile(CLI::App& cmd, const std::string& path) {
  for (const CLI::ConfigItem& item : CLI::ConfigTOML().from_file(path)) {
    if (item.name == "++" || item.name == "--") continue;  // table open/close markers
    const bool in_serve_table = item.parents.size() == 1 && item.parents[0] == "serve";
    std::string name = item.name;
    std::replace(name.begin(), name.end(), '_', '-');
    CLI::Option* option = cmd.get_option_no_throw("--" + name);
    if ((!item.parents.empty() && !in_serve_table) || option == nullptr || name == "config" ||
        name == "help") {
      throw CLI::ConfigError(path + ": unknown key '" + item.fullname() + "'");
    }
    if (option->count() > 0) continue;
    option->add_result(item.inputs);
    option->run_callback();  // validates (ranges) and stores, as for a command-line flag
  }
}

// The name of a signal SignalWaiter takes.
const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return "SIGTERM";
  }
}

// SIGTERM/SIGINT/SIGHUP (drain) and SIGUSR1/SIGUSR2 (ignored, logged), taken
// synchronously by one thread (sigwait) so that no handler runs in the middle
// of another thread's work. The signals must be blocked before any other
// thread starts (threads inherit the mask). SIGHUP is a hangup of the
// terminal the daemon was started from: it drains as SIGTERM does (tqserve
// has no configuration to reload, as nginx does on SIGHUP). SIGUSR1/2 have no
// use here (no log files to reopen: the log is stderr); their default action
// would kill the daemon without a drain.
class SignalWaiter {
 public:
  SignalWaiter() {
    sigemptyset(&set_);
    for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&set_, sig);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this] { Loop(); });
  }
  ~SignalWaiter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait
    thread_.join();
  }

  /// Blocks until `count` signals have arrived or `timeout` passed; returns
  /// whether they arrived.
  bool WaitFor(int count, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return received_ >= count; });
  }
  int received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

 private:
  void Loop() {
    for (;;) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      if (sig == SIGUSR1 || sig == SIGUSR2) {
        spdlog::info("received {}: ignored (SIGTERM, SIGINT or SIGHUP drain)", SignalName(sig));
        continue;
      }
      ++received_;
      spdlog::info("received {}{}", SignalName(sig),
                   received_ == 1 ? ": draining" : ": aborting what is left");
      cv_.notify_all();
    }
  }

  sigset_t set_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int received_ = 0;
  bool stopping_ = false;
};

// The default --kv-cache-memory: room for max_num_seqs sequences of
// max_model_len tokens, capped at 1 GiB, never less than one sequence (the
// engine's minimum). Per tensor-parallel rank, each holding its KV heads.
size_t DefaultKvCacheMemory(const ModelConfig& config, const EngineOptions& options) {
  kernels::KvLayout layout;
  layout.dtype = options.kv_cache_dtype;
  layout.block_size = options.block_size;
  layout.num_kv_heads = MakeTpPlan(config, 0, options.tensor_parallel_size).num_kv_heads;
  layout.head_dim = config.head_dim;
  const size_t block_bytes =
      PagedKvCache::BytesPerBlock(config.num_hidden_layers, layout, options.kv_sink_tokens);
  const int64_t max_len = options.max_model_len > 0 ? options.max_model_len : config.MaxContext();
  const size_t one_sequence =
      block_bytes * static_cast<size_t>((max_len + options.block_size - 1) / options.block_size);
  const size_t all = one_sequence * static_cast<size_t>(std::max(1, options.max_num_seqs));
  return std::max(std::min(all, size_t{1} << 30), one_sequence);
}

// Drain (issue 4, and issue 5 for gRPC): /health and new requests 503, gRPC
// health NOT_SERVING and new calls UNAVAILABLE at once; in-flight requests of
// both get --shutdown-timeout to finish (a second signal cuts it short), then
// are aborted; then the servers and the engine stop. `grpc` may be null.
void Drain(http::HttpServer& server, grpc_api::GrpcServer* grpc, Engine& engine,
           SignalWaiter& signals, double timeout_s) {
  server.StartDraining();  // closes idle keep-alive connections; new requests 503
  if (grpc != nullptr) grpc->StartDraining();
  engine.StartDraining();
  const auto in_flight = [&] {
    return server.state().in_flight() + (grpc != nullptr ? grpc->service().in_flight() : 0);
  };
  // Both idle by `until` (gRPC only checked once HTTP is).
  const auto wait_idle = [&](Clock::time_point until) {
    return server.state().WaitIdle(until) && (grpc == nullptr || grpc->service().WaitIdle(until));
  };
  spdlog::info("draining: {} request(s) in flight, up to {} s", in_flight(), timeout_s);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::max(0.0, timeout_s)));
  bool idle = false;
  while (!idle && Clock::now() < deadline && signals.received() < 2) {
    idle = wait_idle(std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
  if (!idle && !wait_idle(Clock::now())) {
    spdlog::warn("drain: aborting {} request(s) still in flight", in_flight());
    engine.AbortAll();
    // Aborted streams end with an error event (gRPC: UNAVAILABLE); give them
    // a moment to be written (the exit stays within shutdown-timeout + 2 s).
    wait_idle(Clock::now() + std::chrono::milliseconds(500));
  }
  server.Stop();
  if (grpc != nullptr) grpc->Stop(std::chrono::seconds(1));
  engine.Shutdown();
  spdlog::info("stopped");
}

// After an engine failure (the engine thread threw; issue 20 item 9) the
// engine has ended every request with an error and takes no new ones (503,
// gRPC UNAVAILABLE); /livez and /health answer 503. The front ends get up
// to kFailureWriteSeconds to write those errors, probes see the 503 for at
// least kFailureProbeSeconds, then the servers stop and this throws, so the
// process exits non-zero within ~3 s and Kubernetes (or any supervisor)
// restarts it instead of leaving a daemon that can only refuse work.
constexpr double kFailureWriteSeconds = 2.0;
constexpr double kFailureProbeSeconds = 1.0;

[[noreturn]] void StopAfterEngineFailure(http::HttpServer& server, grpc_api::GrpcServer* grpc,
                                         Engine& engine) {
  const auto failed_at = Clock::now();
  const auto seconds = [&](double s) {
    return failed_at +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  spdlog::critical("the engine failed; exiting within {} s so that the daemon is restarted",
                   kFailureWriteSeconds + 1.5);
  const auto write_deadline = seconds(kFailureWriteSeconds);
  const bool idle = server.state().WaitIdle(write_deadline) &&
                    (grpc == nullptr || grpc->service().WaitIdle(write_deadline));
  if (!idle)
    spdlog::warn("engine failure: {} request(s) left unanswered", server.state().in_flight());
  std::this_thread::sleep_until(std::max(Clock::now(), seconds(kFailureProbeSeconds)));
  server.Stop();
  if (grpc != nullptr) grpc->Stop(std::chrono::seconds(1));
  engine.Shutdown();
  throw Error("the engine failed (see the log above); exiting for a restart");
}

void RunServe(ServeArgs& args) {
  // A daemon logs to stderr (stdout stays free); set before any thread logs.
  spdlog::set_default_logger(spdlog::stderr_color_mt("tqserve"));
  SignalWaiter signals;           // before any other thread starts
  std::signal(SIGPIPE, SIG_IGN);  // a closed connection is a failed write, not a kill

  ApplyKvDtypeFlag(args.kv_cache_dtype, &args.engine);
  // The CPU kernels' level, chosen once here (a bad TQ_CPU_ISA fails before
  // the ports open) and logged with the other start-up lines once the model
  // has loaded (a start-up error stays one stderr line), so a slow deployment
  // shows why.
  std::string cpu_isa_line;
  try {
    const kernels::cpu::CpuIsa isa = kernels::cpu::ActiveCpuIsa();
    std::string supported;
    for (kernels::cpu::CpuIsa s : kernels::cpu::SupportedCpuIsas()) {
      supported += std::string(supported.empty() ? "" : ", ") + kernels::cpu::CpuIsaName(s);
    }
    const char* env_isa = std::getenv("TQ_CPU_ISA");
    cpu_isa_line = fmt::format(
        "CPU kernels: {} ({}; this CPU and build support {})", kernels::cpu::CpuIsaName(isa),
        env_isa != nullptr && *env_isa != '\0' ? "TQ_CPU_ISA=" + std::string(env_isa)
                                               : std::string("detected"),
        supported);
  } catch (const std::invalid_argument& e) {
    throw Error(e.what());
  }
  const ModelFiles files = LoadModelFiles(args.engine.model_dir);  // fail fast on a bad directory
  // Flag mistakes that need no weights fail here, as one line before the port
  // opens; the load itself runs after listening so that /livez answers during it.
  MakeTpPlan(files.config, 0, args.engine.tensor_parallel_size, args.engine.enable_expert_parallel);
  if (!args.engine.quantization_config.empty()) {
    quant::PlanFormats(quant::QuantConfig::Load(args.engine.quantization_config), files.config);
  }
  if (args.http.served_model_name.empty()) {
    // The directory's own name also for "models/stories260K/", "." or "x/..".
    std::filesystem::path dir = std::filesystem::absolute(args.engine.model_dir).lexically_normal();
    if (!dir.has_filename()) dir = dir.parent_path();
    args.http.served_model_name = dir.filename().string();
  }
  // Where the ranks will run (a --device cuda machine with too few GPUs fails
  // here). On GPUs the pool is sized by --gpu-memory-utilization (kv_cache_memory 0).
  bool on_cuda = kernels::ResolvesToCuda(args.engine.device);
  if (args.engine.tensor_parallel_size == 1) {
    try {
      kernels::CheckDeviceAvailable(args.engine.device);  // one line, before the ports open
    } catch (const std::runtime_error& e) {
      throw Error(e.what());
    }
  } else {
    std::string why;
    on_cuda = ChooseTpDevices(args.engine.device, args.engine.tensor_parallel_size,
                              kernels::CudaDeviceCount(&why), NcclBuilt(), why)
                  .cuda;
  }
  if (!args.kv_cache_memory_set && !on_cuda) {
    args.engine.kv_cache_memory = DefaultKvCacheMemory(files.config, args.engine);
  }
  args.http.log_requests = !args.disable_log_requests;
  const char* env_key = std::getenv("TQSERVE_API_KEY");
  args.http.guard.api_keys =
      guard::ApiKeys::Load(args.api_keys, env_key != nullptr ? env_key : "", args.api_key_file);
  // TLS files are read and checked once, before any port opens; HTTP and
  // gRPC serve the same certificate.
  args.http.tls = tls::LoadTlsCredentials(args.tls);
  args.grpc.tls = args.http.tls;

  // Thousands of connections need as many descriptors: raise the soft limit
  // to the hard one (as nginx's worker_rlimit_nofile).
  rlimit descriptors{};
  if (getrlimit(RLIMIT_NOFILE, &descriptors) == 0 && descriptors.rlim_cur < descriptors.rlim_max) {
    descriptors.rlim_cur = descriptors.rlim_max;
    setrlimit(RLIMIT_NOFILE, &descriptors);
  }
  const int64_t max_pending = args.max_pending_requests >= 0
                                  ? args.max_pending_requests
                                  : 4 * int64_t{args.engine.max_num_seqs};
  args.http.max_admitted_sequences = args.engine.max_num_seqs + max_pending;

  ServerMetrics metrics;
  // Declared before the server: destroyed after it (the server's
  // connections abort their engine requests as they go).
  std::unique_ptr<Engine> engine;
  http::HttpServer server(args.http, &metrics);
  const int port = server.Bind();
  server.Start();
  // Integration tests read the port (--port 0) from this line.
  std::fprintf(stderr, "tqserve: listening on %s://%s:%d\n",
               args.http.tls.enabled() ? "https" : "http", args.http.host.c_str(), port);
  std::fflush(stderr);

  std::unique_ptr<grpc_api::GrpcServer> grpc;
  try {
    if (args.grpc.port != 0) {
      args.grpc.host = args.http.host;
      args.grpc.served_model_name = args.http.served_model_name;
      args.grpc.log_requests = args.http.log_requests;
      args.grpc.api_keys = args.http.guard.api_keys;
      args.grpc.liveness = [&server] { return server.state().Liveness().alive; };
      grpc = std::make_unique<grpc_api::GrpcServer>(args.grpc, &metrics);
      const int grpc_port = grpc->Start();
      // Integration tests read the gRPC port from this line.
      std::fprintf(stderr, "tqserve: gRPC listening on %s:%d%s\n", args.http.host.c_str(),
                   grpc_port, args.grpc.tls.enabled() ? " (TLS)" : "");
      std::fflush(stderr);
    }
    const auto load_start = Clock::now();
    engine = std::make_unique<Engine>(args.engine, &metrics);
    server.state().SetEngine(engine.get());
    if (grpc != nullptr) grpc->SetEngine(engine.get());
    spdlog::info("model {} loaded in {:.2f} s as \"{}\" (max_model_len {})",
                 engine->info().model_dir,
                 std::chrono::duration<double>(Clock::now() - load_start).count(),
                 args.http.served_model_name, engine->info().max_model_len);
    if (!engine->info().device_note.empty()) spdlog::info("{}", engine->info().device_note);
    spdlog::info("{}", cpu_isa_line);
    spdlog::info("{}", engine->info().weights_summary);
    const EngineInfo& info = engine->info();
    spdlog::info("{}{}",
                 KvCacheLine(ParseKvDtypeFlag(info.kv_cache_dtype), files.config.head_dim,
                             info.num_kv_blocks, info.block_size, info.kv_cache_bytes,
                             info.kv_calibration_source, info.kv_dtype_choice),
                 info.enable_prefix_caching ? "; prefix caching on" : "; prefix caching off");
    for (const RankMemory& r : engine->info().ranks) {
      size_t weights = 0;
      for (const auto& [precision, bytes] : r.weight_bytes) weights += bytes;
      const std::string device =
          r.cuda_device >= 0 ? "cuda:" + std::to_string(r.cuda_device) : "cpu";
      spdlog::info("rank {}/{} on {}: weights {} bytes, KV pool {} bytes, {} tokens", r.rank,
                   engine->info().ranks.size(), device, weights, r.kv_cache_bytes,
                   r.kv_capacity_tokens);
    }
  } catch (...) {
    server.Stop();
    throw;
  }
  // Until SIGTERM/SIGINT, or until the engine thread dies (checked every
  // 50 ms: a snapshot under a lock).
  while (!signals.WaitFor(1, std::chrono::milliseconds(50))) {
    if (!engine->Stats().alive) StopAfterEngineFailure(server, grpc.get(), *engine);
  }
  Drain(server, grpc.get(), *engine, signals, args.shutdown_timeout_s);
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  args->engine.model_dir = TQ_DEFAULT_MODEL_DIR;
  args->engine.max_num_seqs = 256;
  args->engine.max_num_batched_tokens = 512;
  args->engine.enable_prefix_caching = true;
  auto* cmd = app.add_subcommand("serve", "Run the OpenAI-compatible HTTP server and the gRPC API");
  cmd->add_option("--config", args->config_file,
                  "TOML file setting any of these flags by their long names (top level or a "
                  "[serve] table); flags on the command line win");
  cmd->add_option("--model", args->engine.model_dir, "Hugging Face model directory")
      ->capture_default_str();
  cmd->add_option("--host", args->http.host, "Address to listen on")->capture_default_str();
  AddRangedOption(cmd, "--port", args->http.port, "Port to listen on (0 = any free port)", 0,
                  65535);
  AddRangedOption(cmd, "--grpc-port", args->grpc.port,
                  "gRPC port (tqserve.v1, grpc.health.v1, reflection; 0 = no gRPC server)", 0,
                  65535);
  cmd->add_option("--served-model-name", args->http.served_model_name,
                  "Model name in the API (default: the model directory's name)");
  AddRangedOption(cmd, "--max-model-len", args->engine.max_model_len,
                  "Context length in tokens (0 = the model's)", 0, 1 << 24);
  AddRangedOption(cmd, "--max-num-seqs", args->engine.max_num_seqs, "Sequences running at once", 1,
                  1 << 16);
  AddRangedOption(cmd, "--max-num-batched-tokens", args->engine.max_num_batched_tokens,
                  "Tokens per engine step (prefill chunk size)", 1, 1 << 24);
  AddRangedOption(cmd, "--threads", args->engine.num_threads,
                  "CPU compute threads (0 = all cores; capped at the core count)", 0, 4096);
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching",
                args->engine.enable_prefix_caching,
                "Reuse the KV blocks of prompt prefixes computed before (automatic prefix "
                "caching, docs/engine.md); default on")
      ->capture_default_str();
  AddKvCacheFlags(cmd, &args->engine, &args->kv_cache_dtype);
  AddWeightFlags(cmd, &args->engine);
  CLI::Option* kv_memory = cmd->get_option("--kv-cache-memory");
  kv_memory->description(
      "KV pool size in bytes (default: --max-num-seqs sequences of --max-model-len tokens, at "
      "most 1 GiB, at least one sequence)");
  AddRangedOption(cmd, "--max-logprobs", args->engine.max_logprobs,
                  "Most logprobs (completions) / top_logprobs (chat) a request may ask for", 0,
                  1024);
  AddRangedOption(cmd, "--max-body-bytes", args->http.max_body_bytes,
                  "Largest HTTP request body in bytes (413 beyond, refused before it is read)",
                  size_t{1} << 10, size_t{1} << 32);
  cmd->add_option("--api-key", args->api_keys,
                  "API key clients must send as 'Authorization: Bearer KEY' on /v1/*, /tokenize, "
                  "/detokenize and gRPC (repeatable; also TQSERVE_API_KEY; /health, /livez, "
                  "/metrics, /version and gRPC health stay open)");
  cmd->add_option("--api-key-file", args->api_key_file,
                  "File with API keys, one a line (e.g. a mounted Kubernetes Secret)");
  cmd->add_option("--ssl-certfile", args->tls.certfile,
                  "PEM certificate chain (leaf first): HTTPS on --port and TLS on --grpc-port "
                  "(needs --ssl-keyfile)");
  cmd->add_option("--ssl-keyfile", args->tls.keyfile,
                  "PEM private key (unencrypted) of --ssl-certfile's certificate");
  cmd->add_option("--ssl-ca-certs", args->tls.ca_certs,
                  "PEM CA certificates: clients must present a certificate they signed (mutual "
                  "TLS, HTTP and gRPC; needs --ssl-certfile)");
  cmd->add_option("--allowed-origins", args->http.guard.allowed_origins,
                  "Browser origins allowed to call the API (CORS; '*' for any; default: none, no "
                  "CORS headers)")
      ->delimiter(',');
  cmd->add_option("--allowed-hosts", args->http.guard.allowed_hosts,
                  "Host header names accepted (against DNS rebinding; default: any)")
      ->delimiter(',');
  cmd->add_flag("--expose-server-details", args->grpc.server_details,
                "gRPC GetServerInfo also reports the model directory and library versions");
  AddRangedOption(cmd, "--shutdown-timeout", args->shutdown_timeout_s,
                  "Seconds in-flight requests get to finish after SIGTERM, SIGINT or SIGHUP", 0.0,
                  86400.0);
  AddRangedOption(cmd, "--max-pending-requests", args->max_pending_requests,
                  "Generation sequences that may wait beyond --max-num-seqs running; more get "
                  "503 with Retry-After (-1 = 4 x --max-num-seqs)",
                  -1, 1 << 24);
  AddRangedOption(cmd, "--max-connections", args->http.max_connections,
                  "Open HTTP connections; more get 503 and are closed", 1, 1 << 20);
  AddRangedOption(cmd, "--http-io-threads", args->http.io_threads,
                  "HTTP event-loop threads (connections, probes, streams)", 1, 64);
  AddRangedOption(cmd, "--http-worker-threads", args->http.worker_threads,
                  "HTTP threads that parse, template and tokenize POST requests", 1, 64);
  AddRangedOption(cmd, "--http-read-timeout", args->http.read_timeout_s,
                  "Seconds a request's head and body may take to arrive, from its first byte",
                  0.001, 86400.0);
  AddRangedOption(cmd, "--http-keep-alive-timeout", args->http.keep_alive_timeout_s,
                  "Seconds an idle keep-alive connection stays open", 0.001, 86400.0);
  AddRangedOption(cmd, "--http-write-timeout", args->http.write_timeout_s,
                  "Seconds a response write may make no progress (a client that stopped "
                  "reading) before the request is aborted",
                  0.001, 86400.0);
  AddRangedOption(cmd, "--stall-timeout", args->http.stall_timeout_s,
                  "Seconds the engine may spend in one step while it has work, or a request may "
                  "wait for a free HTTP worker thread, before /livez and gRPC health 'liveness' "
                  "report the daemon stalled (503 / NOT_SERVING; 0 = never)",
                  0.0, 86400.0);
  cmd->add_flag("--disable-log-requests", args->disable_log_requests,
                "Do not log one line per request");
  cmd->callback([args, cmd, kv_memory] {
    if (!args->config_file.empty()) ApplyConfigFile(*cmd, args->config_file);
    args->kv_cache_memory_set = kv_memory->count() > 0;
    if (args->tls.certfile.empty() != args->tls.keyfile.empty()) {
      throw CLI::ValidationError(
          args->tls.certfile.empty() ? "--ssl-keyfile" : "--ssl-certfile",
          "needs --ssl-certfile and --ssl-keyfile together (TLS needs both)");
    }
    if (!args->tls.ca_certs.empty() && args->tls.certfile.empty()) {
      throw CLI::ValidationError("--ssl-ca-certs", "needs --ssl-certfile and --ssl-keyfile");
    }
    RunServe(*args);
  });
}

}  // namespace tq
