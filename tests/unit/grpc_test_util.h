// Helpers of the gRPC tests: an in-process server on the bundled model, a
// Generate client that collects a whole stream, and raw (hand-encoded
// protobuf) calls to grpc.health.v1 and server reflection, whose generated
// code the project does not have (nor need: the server side is gRPC's own).
#pragma once

#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/support/sync_stream.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/runtime/offline_engine.h"
#include "server/grpc/grpc_server.h"
#include "server/metrics/server_metrics.h"
#include "tqserve/v1/generation.grpc.pb.h"

namespace tq::testing {

namespace pb = tqserve::v1;

/// tests/reference/sp_ref.py's output: the Python sentencepiece library's ids,
/// pieces and decodings of fixed texts for the bundled tokenizer.
/// An empty object when the file is missing (run `ctest -R reference.sentencepiece`).
inline nlohmann::json LoadSpReference() {
  std::ifstream in(TQ_REF_DIR "/sp_reference.json");
  return in ? nlohmann::json::parse(in) : nlohmann::json::object();
}

/// The bundled model with an exact (fp32) KV cache, so that the engine and
/// tq::OfflineEngine agree bit for bit.
inline EngineOptions Fp32Options() {
  EngineOptions o;
  o.model_dir = TQ_MODEL_DIR;
  o.num_threads = 1;
  o.kv_cache_dtype = kernels::KvDtype::kF32;
  o.kv_cache_memory = 16 << 20;
  return o;
}

/// An engine and a GrpcServer on 127.0.0.1 (a free port), with a channel.
struct TestServer {
  explicit TestServer(grpc_api::GrpcOptions options = {}, bool load = true) {
    options.host = "127.0.0.1";
    options.port = 0;
    options.served_model_name = "stories260K";
    options.log_requests = false;
    options.server_details = true;  // GetServerInfo's versions and model_dir are checked
    server = std::make_unique<grpc_api::GrpcServer>(options, &metrics);
    port = server->Start();
    channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                  grpc::InsecureChannelCredentials());
    stub = pb::GenerationService::NewStub(channel);
    if (load) {
      engine = std::make_unique<Engine>(Fp32Options(), &metrics);
      server->SetEngine(engine.get());
    }
  }
  ~TestServer() {
    server->Stop();
    if (engine) engine->Shutdown();
  }

  ServerMetrics metrics;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<grpc_api::GrpcServer> server;
  int port = 0;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::GenerationService::Stub> stub;
};

/// A whole Generate stream as the client saw it.
struct Streamed {
  grpc::Status status;
  std::vector<pb::GenerateResponse> messages;
  std::string text;                // concatenated deltas
  std::vector<int32_t> token_ids;  // concatenated token ids
  const pb::GenerateResponse& last() const { return messages.back(); }
};

/// Runs Generate to its end (optionally with a deadline from now).
inline Streamed RunGenerate(pb::GenerationService::Stub& stub, const pb::GenerateRequest& request,
                            std::chrono::milliseconds deadline = std::chrono::milliseconds(0)) {
  grpc::ClientContext context;
  if (deadline.count() > 0) context.set_deadline(std::chrono::system_clock::now() + deadline);
  auto reader = stub.Generate(&context, request);
  Streamed out;
  pb::GenerateResponse message;
  while (reader->Read(&message)) {
    out.text += message.text();
    out.token_ids.insert(out.token_ids.end(), message.token_ids().begin(),
                         message.token_ids().end());
    out.messages.push_back(message);
  }
  out.status = reader->Finish();
  return out;
}

/// A greedy request for `text` with `max_tokens`.
inline pb::GenerateRequest GreedyRequest(const std::string& text, int32_t max_tokens) {
  pb::GenerateRequest r;
  r.set_text(text);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  return r;
}

/// Polls the engine's stats until nothing runs, waits or holds a KV block,
/// or `limit` passes; returns the last stats.
inline EngineStats WaitEngineIdle(const Engine& engine,
                                  std::chrono::milliseconds limit = std::chrono::seconds(2)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  EngineStats s = engine.Stats();
  while ((s.num_running != 0 || s.num_waiting != 0 || s.kv_blocks_used != 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s = engine.Stats();
  }
  return s;
}

/// The value of tqserve_api_requests_total{protocol="grpc",route,code} in the
/// rendered metrics (0 when the series is absent). prometheus-cpp writes the
/// labels sorted by name: code, protocol, route.
inline double GrpcRequests(TestServer& s, const std::string& route, const std::string& code) {
  const std::string text =
      s.metrics.Render(s.engine ? s.engine->Stats() : EngineStats{},
                       s.engine ? s.engine->info() : EngineInfo{}, "stories260K");
  const std::string series = "tqserve_api_requests_total{code=\"" + code +
                             "\",protocol=\"grpc\",route=\"" + route + "\"} ";
  const size_t at = text.find(series);
  if (at == std::string::npos) return 0;
  return std::stod(text.substr(at + series.size()));
}

// ---- Protocol Buffers wire format by hand (protobuf.dev/programming-guides/encoding).

/// A length-delimited field: tag (field << 3 | 2), varint length, bytes.
inline std::string StringField(int field, const std::string& value) {
  std::string out;
  uint64_t v = static_cast<uint64_t>(field) << 3 | 2;
  for (uint64_t n : {v, static_cast<uint64_t>(value.size())}) {
    while (n >= 0x80) {
      out += static_cast<char>((n & 0x7f) | 0x80);
      n >>= 7;
    }
    out += static_cast<char>(n);
  }
  return out + value;
}

inline grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

inline std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

/// Parses wire bytes into their fields by number (no schema needed).
inline std::unique_ptr<google::protobuf::UnknownFieldSet> ParseFields(const std::string& bytes) {
  auto fields = std::make_unique<google::protobuf::UnknownFieldSet>();
  EXPECT_TRUE(fields->ParseFromString(bytes));
  return fields;
}

/// grpc.health.v1.Health/Check (grpc/src/proto/grpc/health/v1/health.proto:
/// HealthCheckRequest{string service = 1}, HealthCheckResponse{ServingStatus
/// status = 1}, SERVING = 1, NOT_SERVING = 2). Returns the call's status and
/// the serving status number (-1 when the call failed).
inline std::pair<grpc::Status, int> HealthCheck(grpc::Channel& channel,
                                                const std::string& service) {
  const grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                         grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const grpc::ByteBuffer request = ToBuffer(service.empty() ? "" : StringField(1, service));
  grpc::ByteBuffer response;
  const grpc::Status status =
      grpc::internal::BlockingUnaryCall(&channel, method, &context, request, &response);
  if (!status.ok()) return {status, -1};
  int serving = 0;  // proto3: an absent field is 0 (UNKNOWN)
  const auto fields = ParseFields(FromBuffer(response));
  for (int i = 0; i < fields->field_count(); ++i) {
    if (fields->field(i).number() == 1) serving = static_cast<int>(fields->field(i).varint());
  }
  return {status, serving};
}

/// One grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo
/// exchange: sends the request bytes, returns the response bytes.
inline std::string ReflectionCall(grpc::Channel& channel, const std::string& request) {
  const grpc::internal::RpcMethod method(
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      grpc::internal::RpcMethod::BIDI_STREAMING);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          &channel, method, &context));
  grpc::ByteBuffer response;
  EXPECT_TRUE(stream->Write(ToBuffer(request)));
  stream->WritesDone();
  const bool got = stream->Read(&response);
  EXPECT_TRUE(stream->Finish().ok());
  return got ? FromBuffer(response) : std::string();
}

/// Length-delimited values of field `number` in `bytes`.
inline std::vector<std::string> Strings(const std::string& bytes, int number) {
  std::vector<std::string> out;
  const auto fields = ParseFields(bytes);
  for (int i = 0; i < fields->field_count(); ++i) {
    const google::protobuf::UnknownField& f = fields->field(i);
    if (f.number() == number && f.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      out.push_back(f.length_delimited());
    }
  }
  return out;
}

}  // namespace tq::testing
