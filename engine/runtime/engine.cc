// The engine thread and the thread-safe client in front of it (see
// engine.h). Commands travel one way, client -> engine thread, through
// a mutex-guarded queue; outputs travel back through each RequestStream.
#include "engine/runtime/engine.h"

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <variant>

#include "engine/common/error.h"
#include "engine/runtime/engine_core.h"
#include "engine/runtime/engine_options.h"
#include "engine/runtime/model_loader.h"
#include "engine/structured/grammar_cache.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/cpu_isa.h"

namespace tq {
namespace {

struct AddCommand {
  EngineRequest request;
  std::shared_ptr<RequestStream> stream;
  std::chrono::steady_clock::time_point arrival;
};
struct AbortCommand {
  std::string request_id;  // empty: abort all
  FinishReason reason = FinishReason::kAbort;
};
using Command = std::variant<AddCommand, AbortCommand>;

EngineInfo DescribeEngine(const EngineOptions& options, const LoadedModel& m) {
  EngineInfo info;
  const PagedKvCache& cache = m.executor->cache();
  const kernels::KvLayout& layout = cache.layout();
  info.model_dir = options.model_dir;
  info.kv_cache_dtype = std::string(kernels::KvDtypeName(layout.dtype));
  info.block_size = layout.block_size;
  info.num_kv_blocks = layout.num_blocks;
  // Every rank's pool has the same layout (its own KV heads).
  const int world = m.executor->world_size();
  info.kv_bytes_per_block =
      world * PagedKvCache::BytesPerBlock(cache.num_layers(), layout, cache.sink_tokens());
  info.kv_cache_bytes = world * cache.total_bytes();
  info.kv_capacity_tokens = static_cast<int64_t>(layout.num_blocks) * layout.block_size;
  info.max_model_len = m.max_model_len;
  info.max_num_seqs = options.max_num_seqs;
  info.max_num_batched_tokens = options.max_num_batched_tokens;
  info.enable_prefix_caching = options.enable_prefix_caching;
  info.vocab_size = m.files.config.vocab_size;
  info.max_logprobs = options.max_logprobs;
  info.ranks = DescribeRanks(m);
  for (const RankMemory& r : info.ranks) {
    for (const auto& [precision, bytes] : r.weight_bytes) info.weight_bytes[precision] += bytes;
  }
  info.weights_summary = WeightsSummary(m.executor->model());
  info.kv_calibration_source = m.kv_calibration_source;
  info.kv_dtype_choice = m.kv_dtype_choice.Describe();
  for (const KvQualityScore& s : m.kv_dtype_choice.scores) {
    info.kv_quality_ratios.emplace_back(std::string(kernels::KvDtypeName(s.dtype)), s.ratio);
  }
  info.device = std::string(m.executor->backend().Name());
  info.device_note = m.device_note;
  info.cpu_isa = kernels::cpu::CpuIsaName(kernels::cpu::ActiveCpuIsa());
  return info;
}

}  // namespace

struct Engine::State {
  explicit State(const EngineOptions& o) : options(o), model(LoadModel(o)) {}

  EngineOptions options;
  LoadedModel model;
  EngineInfo info;
  std::unique_ptr<EngineCore> core;  // engine thread only
  std::thread thread;
  std::once_flag grammars_once;
  std::unique_ptr<structured::GrammarCache> grammars;  // built on first use

  std::mutex mu;  // guards everything below
  std::condition_variable cv;
  std::deque<Command> commands;
  bool stop = false;
  bool draining = false;
  bool failed = false;
  bool stopped = false;
  // The engine thread sleeps for want of work (or has ended); else
  // `iteration_start` is when its current loop iteration began (busy_seconds).
  bool idle = true;
  std::chrono::steady_clock::time_point iteration_start;
  EngineStats stats;

  void Run();
  void Apply(Command& command);
  void Publish();
};

void Engine::State::Apply(Command& command) {
  if (auto* add = std::get_if<AddCommand>(&command)) {
    if (core->scheduler().HasRequest(add->request.request_id)) {
      EngineOutput out;
      out.finish = FinishReason::kError;
      out.error = "duplicate request_id " + add->request.request_id;
      add->stream->Push(std::move(out));
      return;
    }
    core->AddRequest(std::move(add->request), std::move(add->stream), add->arrival);
  } else {
    auto& abort = std::get<AbortCommand>(command);
    if (abort.request_id.empty()) {
      core->AbortAll();
    } else {
      core->Abort(abort.request_id, abort.reason);
    }
  }
}

void Engine::State::Publish() {
  EngineStats s = core->Stats();
  std::lock_guard<std::mutex> lock(mu);
  s.alive = !failed && !stopped;
  s.draining = draining;
  stats = s;
}

void Engine::State::Run() {
  std::string failure;
  for (;;) {
    std::deque<Command> batch;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      // Idle: sleep until a command arrives. Busy: take what is queued and step.
      if (!core->has_work()) {
        idle = true;
        cv.wait(lock, [this] { return !commands.empty() || stop; });
      }
      idle = false;
      iteration_start = std::chrono::steady_clock::now();
      batch.swap(commands);
      stopping = stop;
    }
    for (Command& c : batch) Apply(c);
    if (stopping) break;
    try {
      // Published before the step's outputs reach their streams: a client
      // that read its last event then finds /metrics counting it as done.
      if (core->Step([this] { Publish(); })) continue;
    } catch (const std::exception& e) {
      failure = e.what();
      break;
    }
    Publish();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!failure.empty()) failed = true;
    stopped = true;
    idle = true;
  }
  if (!failure.empty()) {
    std::fprintf(stderr, "tqserve: engine step failed: %s\n", failure.c_str());
    core->AbortAll(FinishReason::kError, "engine failure: " + failure);
  } else {
    core->AbortAll();
  }
  // Requests queued after the loop ended get an answer too.
  std::deque<Command> rest;
  {
    std::lock_guard<std::mutex> lock(mu);
    rest.swap(commands);
  }
  for (Command& c : rest) {
    if (auto* add = std::get_if<AddCommand>(&c)) {
      EngineOutput out;
      out.finish = failure.empty() ? FinishReason::kAbort : FinishReason::kError;
      out.error = failure;
      add->stream->Push(std::move(out));
    }
  }
  Publish();
}

Engine::Engine(const EngineOptions& options, EngineObserver* observer)
    : state_(std::make_unique<State>(options)) {
  State& s = *state_;
  s.info = DescribeEngine(options, s.model);
  s.core = MakeEngineCore(options, s.model, observer);
  s.Publish();
  s.thread = std::thread([&s] { s.Run(); });
}

Engine::~Engine() {
  Shutdown();
}

std::shared_ptr<RequestStream> Engine::Submit(EngineRequest request) {
  State& s = *state_;
  if (request.request_id.empty()) throw Error("request_id is empty");
  CheckRequestIds(request.prompt_ids, request.sampling, s.info.max_model_len, s.info.vocab_size);
  if (request.num_logprobs < -1 || request.num_logprobs > s.info.max_logprobs) {
    throw Error("logprobs must be in [0, " + std::to_string(s.info.max_logprobs) + "], got " +
                std::to_string(request.num_logprobs));
  }
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.failed) throw EngineUnavailable("the engine has failed");
    if (s.stop || s.stopped) throw EngineUnavailable("the engine is shut down");
    if (s.draining) throw EngineUnavailable("the server is shutting down");
    s.commands.push_back(AddCommand{std::move(request), stream, std::chrono::steady_clock::now()});
  }
  s.cv.notify_one();
  return stream;
}

void Engine::Abort(const std::string& request_id, FinishReason reason) {
  if (request_id.empty()) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->commands.push_back(AbortCommand{request_id, reason});
  }
  state_->cv.notify_one();
}

void Engine::AbortAll() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->commands.push_back(AbortCommand{});
  }
  state_->cv.notify_one();
}

void Engine::StartDraining() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->draining = true;
  state_->stats.draining = true;
}

void Engine::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_one();
  if (state_->thread.joinable()) state_->thread.join();
}

EngineStats Engine::Stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  EngineStats s = state_->stats;
  // Dead from the moment the loop ends, not only after its last Publish: a
  // client that has read its engine-failure error sees /livez 503 at once.
  s.alive = s.alive && !state_->failed && !state_->stopped;
  s.busy_seconds = state_->idle ? 0.0
                                : std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                                state_->iteration_start)
                                      .count();
  return s;
}

const EngineInfo& Engine::info() const {
  return state_->info;
}
const Tokenizer& Engine::tokenizer() const {
  return *state_->model.tokenizer;
}
const ModelFiles& Engine::files() const {
  return state_->model.files;
}

structured::GrammarCache& Engine::grammars() const {
  State& s = *state_;
  std::call_once(s.grammars_once, [&s] {
    std::vector<int32_t> eos = s.model.files.config.eos_token_ids;
    if (s.model.tokenizer->eos_id() >= 0) eos.push_back(s.model.tokenizer->eos_id());
    s.grammars = std::make_unique<structured::GrammarCache>(
        structured::TokenizerVocabulary(*s.model.tokenizer, std::move(eos)));
  });
  return *s.grammars;
}

}  // namespace tq
