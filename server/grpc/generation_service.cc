// tqserve.v1.GenerationService handlers (see generation_service.h).
#include "server/grpc/generation_service.h"

#include <google/protobuf/stubs/common.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "engine/common/error.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/grpc/generate_response.h"
#include "server/grpc/grpc_status.h"
#include "server/grpc/wire_request.h"
#include "server/guard/log_field.h"
#include "server/session/request_session.h"

#ifndef TQ_VERSION
#define TQ_VERSION "0.0.0"
#endif

namespace tq::grpc_api {
namespace {

namespace pb = tqserve::v1;
using Clock = std::chrono::steady_clock;

// Engine request ids: unique in the process (the HTTP API's start with
// "cmpl-"/"chatcmpl-").
std::string NewRequestId() {
  static std::atomic<uint64_t> next{1};
  return "gen-" + std::to_string(next.fetch_add(1));
}

// Runs `body`, turning RpcError into its status (a refusal counted in
// `metrics`, which may be null) and anything else into INTERNAL.
template <typename Body>
grpc::Status Guarded(ServerMetrics* metrics, Body&& body) {
  try {
    return body();
  } catch (const RpcError& e) {
    if (metrics != nullptr && !e.reason().empty()) metrics->OnRefused("grpc", e.reason());
    return e.status();
  } catch (const std::exception& e) {
    // A bug or out of memory: the call fails, the server keeps serving.
    return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  }
}

// UNAUTHENTICATED unless the call's `authorization` metadata is
// "Bearer <an accepted key>" (when keys are set; the HTTP API's rule).
void CheckApiKey(const guard::ApiKeys& keys, const grpc::ServerContextBase* context) {
  if (!keys.enabled()) return;
  const auto& metadata = context->client_metadata();
  const auto it = metadata.find("authorization");
  std::optional<std::string_view> value;
  if (it != metadata.end()) value = std::string_view(it->second.data(), it->second.size());
  if (!keys.Accepts(value)) {
    throw RpcError(grpc::StatusCode::UNAUTHENTICATED,
                   value ? "Incorrect API key provided."
                         : "no API key: send metadata 'authorization: Bearer YOUR_KEY'",
                   "unauthorized");
  }
}

}  // namespace

// Counts one Generate call for the drain and the stream limit.
class GenerationServiceImpl::InFlight {
 public:
  explicit InFlight(GenerationServiceImpl* service) : service_(service) {
    std::lock_guard<std::mutex> lock(service_->mu_);
    if (service_->in_flight_ >= service_->options_.max_concurrent_streams) {
      throw RpcError(grpc::StatusCode::RESOURCE_EXHAUSTED,
                     "too many concurrent Generate streams (limit " +
                         std::to_string(service_->options_.max_concurrent_streams) +
                         "); retry later");
    }
    ++service_->in_flight_;
  }
  ~InFlight() {
    std::lock_guard<std::mutex> lock(service_->mu_);
    if (--service_->in_flight_ == 0) service_->idle_cv_.notify_all();
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  GenerationServiceImpl* service_;
};

GenerationServiceImpl::GenerationServiceImpl(GrpcOptions options, ServerMetrics* metrics)
    : options_(std::move(options)), metrics_(metrics) {}

void GenerationServiceImpl::SetEngine(Engine* engine) {
  limits_ = guard::ServedModelLimits(*engine, options_.served_model_name);
  created_unix_s_ = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  engine_.store(engine, std::memory_order_release);  // publishes limits_ too
}

bool GenerationServiceImpl::WaitIdle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [this] { return in_flight_ == 0; });
}

int64_t GenerationServiceImpl::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

Engine& GenerationServiceImpl::ReadyEngine(bool allow_draining) const {
  if (!allow_draining && draining()) throw Unavailable("the server is shutting down");
  Engine* engine = this->engine();
  if (engine == nullptr) throw Unavailable("the model is loading; retry shortly");
  return *engine;
}

grpc::Status GenerationServiceImpl::Record(const char* method, const grpc::Status& status) const {
  if (metrics_ != nullptr)
    metrics_->OnApiRequest("grpc", method, StatusCodeName(status.error_code()));
  return status;
}

template <typename Request, typename Response, typename Body>
grpc::ServerUnaryReactor* GenerationServiceImpl::Unary(grpc::CallbackServerContext* context,
                                                       const char* method,
                                                       const grpc::ByteBuffer* bytes,
                                                       grpc::ByteBuffer* out, Body&& body) {
  const grpc::Status status = Record(method, Guarded(metrics_, [&] {
                                       CheckApiKey(options_.api_keys, context);
                                       Request request;
                                       ParseRequest(*bytes, &request);
                                       Response response;
                                       const grpc::Status s = body(request, &response);
                                       if (s.ok()) SerializeResponse(response, out);
                                       return s;
                                     }));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationServiceImpl::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* bytes) {
  const auto start = Clock::now();
  std::string id;
  int32_t prompt_tokens = 0;
  GenerateStream* stream = nullptr;
  const grpc::Status refused = Guarded(metrics_, [&] {
    CheckApiKey(options_.api_keys, context);
    pb::GenerateRequest request;
    ParseRequest(*bytes, &request);
    Engine& engine = ReadyEngine();
    auto in_flight = std::make_shared<InFlight>(this);
    GenerateParams params = ParseGenerateRequest(request, limits_, engine.tokenizer());
    ReadStructuredOutput(request, engine.grammars(), &params);
    id = NewRequestId();
    params.request.request_id = id;
    prompt_tokens = static_cast<int32_t>(params.request.prompt_ids.size());
    // Until the engine has ended the request, destroying the session (the
    // stream does on cancel, deadline, failed write) aborts it: its KV
    // blocks are freed in the engine's next step.
    auto session =
        std::make_unique<RequestSession>(SessionEngine::Of(engine), engine.tokenizer(),
                                         std::vector<EngineRequest>{params.request}, params.stop);
    try {
      session->Submit();
    } catch (const EngineUnavailable& e) {
      throw Unavailable(e.what());
    } catch (const Error& e) {
      // What the engine validates beyond the parser (messages name the field).
      throw RpcError(grpc::StatusCode::INVALID_ARGUMENT, e.what());
    }
    stream = GenerateStream::Start(
        context, &waker_, std::move(session), engine.tokenizer(), params,
        [this, id, prompt_tokens, start](const StreamEnd& end) {
          EndGenerate(id, prompt_tokens, end, start);
        },
        [in_flight]() mutable { in_flight.reset(); });
    return grpc::Status::OK;
  });
  guard::ReleaseFreedMemory(bytes->Length());  // a big prompt's freed heap
  if (stream != nullptr) return stream;
  EndGenerate(id, prompt_tokens, {refused}, start);
  return new RefusedStream(refused);
}

void GenerationServiceImpl::EndGenerate(const std::string& id, int32_t prompt_tokens,
                                        const StreamEnd& end, Clock::time_point start) const {
  if (options_.log_requests) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (end.status.ok()) {
      spdlog::info("grpc Generate {}: {} prompt + {} completion tokens, {}, {:.3f} s", id,
                   prompt_tokens, end.completion_tokens,
                   end.finish == pb::FINISH_REASON_LENGTH ? "length" : "stop", seconds);
    } else {
      spdlog::info("grpc Generate {}: {} ({}), {:.3f} s", id.empty() ? "-" : id,
                   StatusCodeName(end.status.error_code()),
                   guard::LogField(end.status.error_message()), seconds);
    }
  }
  Record("Generate", end.status);
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Tokenize(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* bytes,
                                                          grpc::ByteBuffer* out) {
  return Unary<pb::TokenizeRequest, pb::TokenizeResponse>(
      context, "Tokenize", bytes, out,
      [&](const pb::TokenizeRequest& request, pb::TokenizeResponse* response) {
        Engine& engine = ReadyEngine();
        CheckModel(request.model(), limits_);
        CheckPromptText(request.text(), limits_, "text");
        const bool add_special =
            request.has_add_special_tokens() ? request.add_special_tokens() : true;
        const std::vector<int32_t> ids = engine.tokenizer().Encode(request.text(), add_special);
        response->mutable_token_ids()->Add(ids.begin(), ids.end());
        response->set_count(static_cast<int32_t>(ids.size()));
        response->set_max_model_len(limits_.max_model_len);
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* GenerationServiceImpl::Detokenize(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* bytes,
                                                            grpc::ByteBuffer* out) {
  return Unary<pb::DetokenizeRequest, pb::DetokenizeResponse>(
      context, "Detokenize", bytes, out,
      [&](const pb::DetokenizeRequest& request, pb::DetokenizeResponse* response) {
        Engine& engine = ReadyEngine();
        CheckModel(request.model(), limits_);
        const auto& ids = request.token_ids();
        const std::span<const int32_t> span(ids.data(), static_cast<size_t>(ids.size()));
        CheckTokenIds(span, limits_.vocab_size, "token_ids");
        response->set_text(engine.tokenizer().Decode(span));
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* GenerationServiceImpl::ListModels(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* bytes,
                                                            grpc::ByteBuffer* out) {
  return Unary<pb::ListModelsRequest, pb::ListModelsResponse>(
      context, "ListModels", bytes, out,
      [&](const pb::ListModelsRequest&, pb::ListModelsResponse* response) {
        Engine& engine = ReadyEngine();
        pb::ModelCard* card = response->add_models();
        card->set_id(limits_.served_model_name);
        card->set_owned_by("tqserve");
        card->set_created(created_unix_s_);
        card->set_root(engine.info().model_dir);
        card->set_max_model_len(limits_.max_model_len);
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* GenerationServiceImpl::GetServerInfo(grpc::CallbackServerContext* context,
                                                               const grpc::ByteBuffer* bytes,
                                                               grpc::ByteBuffer* out) {
  return Unary<pb::GetServerInfoRequest, pb::GetServerInfoResponse>(
      context, "GetServerInfo", bytes, out,
      [&](const pb::GetServerInfoRequest&, pb::GetServerInfoResponse* response) {
        // Answers while draining too: EngineState.draining says so.
        Engine& engine = ReadyEngine(/*allow_draining=*/true);
        const EngineInfo& info = engine.info();
        response->set_model(limits_.served_model_name);
        // The directory path and library versions only when asked for
        // (--expose-server-details): they help an attacker more than a client.
        if (options_.server_details) response->set_model_dir(info.model_dir);
        response->set_device(info.device);
        response->set_cpu_isa(info.cpu_isa);
        pb::KvCacheInfo* kv = response->mutable_kv_cache();
        kv->set_dtype(info.kv_cache_dtype);
        kv->set_block_size(info.block_size);
        kv->set_num_blocks(info.num_kv_blocks);
        kv->set_bytes_per_block(info.kv_bytes_per_block);
        kv->set_total_bytes(info.kv_cache_bytes);
        kv->set_capacity_tokens(info.kv_capacity_tokens);
        kv->set_calibration(info.kv_calibration_source);
        response->set_max_model_len(info.max_model_len);
        response->set_max_num_seqs(info.max_num_seqs);
        response->set_max_num_batched_tokens(info.max_num_batched_tokens);
        response->set_vocab_size(info.vocab_size);
        for (const auto& [precision, bytes] : info.weight_bytes) {
          (*response->mutable_weight_bytes())[precision] = bytes;
        }
        pb::Versions* versions = response->mutable_versions();
        versions->set_tqserve(TQ_VERSION);
        if (options_.server_details) {
          versions->set_grpc(grpc::Version());
          versions->set_protobuf(
              google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION));
        }
        versions->set_api("tqserve.v1");
        const EngineStats stats = engine.Stats();
        pb::EngineState* state = response->mutable_state();
        state->set_alive(stats.alive);
        state->set_draining(draining() || stats.draining);
        state->set_num_requests_running(stats.num_running);
        state->set_num_requests_waiting(stats.num_waiting);
        state->set_kv_cache_blocks_used(stats.kv_blocks_used);
        return grpc::Status::OK;
      });
}

}  // namespace tq::grpc_api
