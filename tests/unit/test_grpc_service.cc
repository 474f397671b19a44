// tqserve.v1.GenerationService through a real gRPC client (the generated C++
// stub) against an in-process server on the bundled model with an fp32 KV
// cache. References: tq::OfflineEngine (the request alone on the engine core,
// stepped in the test's thread), llama2.c's published greedy output, the
// Python sentencepiece library, log-softmax computed here from the model's
// logits (OfflineEngine::PromptLogits), the gRPC spec's
// health and reflection protocols, and the byte sizes derived from the model
// config.
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/version_info.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "grpc_test_util.h"
#include "kernels/cpu/cpu_isa.h"

namespace tq::testing {
namespace {

constexpr int32_t kBos = 1;

std::string PublishedText() {
  std::ifstream in(std::string(TQ_TEST_DATA_DIR) + "/reference_greedy_once_upon_a_time.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class GrpcService : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new TestServer();
    generator_ = new OfflineEngine(Fp32Options());
  }
  static void TearDownTestSuite() {
    delete generator_;
    delete server_;
  }

  // Continuation text of `out` after `prompt`, as a client sees it: the
  // decoded whole minus the decoded prompt (SentencePiece spacing).
  static std::string Continuation(const std::vector<int32_t>& prompt,
                                  const std::vector<int32_t>& out) {
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), out.begin(), out.end());
    return generator_->tokenizer().Decode(all).substr(
        generator_->tokenizer().Decode(prompt).size());
  }

  static GenerationResult GreedyAlone(const std::string& text, int32_t max_tokens) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    return generator_->Generate(generator_->tokenizer().Encode(text), p);
  }

  static TestServer* server_;
  static OfflineEngine* generator_;
};

TestServer* GrpcService::server_ = nullptr;
OfflineEngine* GrpcService::generator_ = nullptr;

TEST_F(GrpcService, GreedyGenerateMatchesGeneratorAndPublishedOutput) {
  const Streamed got = RunGenerate(*server_->stub, GreedyRequest("Once upon a time", 100));
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  const GenerationResult alone = GreedyAlone("Once upon a time", 100);
  EXPECT_EQ(got.token_ids, alone.output_ids);
  // The published story starts with the prompt; ours continues it.
  const std::string story = PublishedText();
  ASSERT_EQ(story.rfind("Once upon a time", 0), 0u);
  EXPECT_EQ(story.substr(16, got.text.size()), got.text);
  EXPECT_EQ(got.text.rfind(", there was a little girl named Lily.", 0), 0u) << got.text;

  ASSERT_GT(got.messages.size(), 1u) << "the output must stream";
  for (const auto& m : got.messages) EXPECT_EQ(m.id(), got.messages[0].id());
  EXPECT_EQ(got.messages[0].id().rfind("gen-", 0), 0u);
  const pb::GenerateResponse& last = got.last();
  EXPECT_EQ(last.finish_reason(), pb::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().prompt_tokens(), 5);  // BOS + 4
  EXPECT_EQ(last.usage().completion_tokens(), 100);
  EXPECT_EQ(last.usage().total_tokens(), 105);
}

TEST_F(GrpcService, StreamedDeltasConcatenateToTheFullText) {
  const std::vector<int32_t> prompt = generator_->tokenizer().Encode("The little dog");
  const GenerationResult alone = GreedyAlone("The little dog", 60);
  pb::GenerateRequest r;
  for (int32_t id : prompt) r.mutable_token_ids()->add_ids(id);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_max_tokens(60);
  const Streamed got = RunGenerate(*server_->stub, r);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.token_ids, alone.output_ids);
  EXPECT_EQ(got.text, Continuation(prompt, alone.output_ids));
  for (const auto& m : got.messages) {
    EXPECT_TRUE(!m.text().empty() || m.token_ids_size() > 0 || m.finish_reason() != 0)
        << "an empty message was sent";
  }
}

TEST_F(GrpcService, StopStringAndStopTokenEndTheStream) {
  const GenerationResult alone = GreedyAlone("Once upon a time", 100);
  const std::vector<int32_t> prompt = generator_->tokenizer().Encode("Once upon a time");
  const std::string full = Continuation(prompt, alone.output_ids);
  ASSERT_NE(full.find("Lily"), std::string::npos);

  pb::GenerateRequest r = GreedyRequest("Once upon a time", 100);
  r.mutable_sampling()->add_stop("Lily");
  Streamed got = RunGenerate(*server_->stub, r);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.text, full.substr(0, full.find("Lily")));
  EXPECT_EQ(got.last().finish_reason(), pb::FINISH_REASON_STOP);
  EXPECT_EQ(got.last().stop_string(), "Lily");
  EXPECT_EQ(got.last().usage().completion_tokens(), static_cast<int32_t>(got.token_ids.size()));

  // Stop at the 10th generated token's first occurrence (it is part of the output).
  const int32_t stop_id = alone.output_ids[9];
  const auto first = std::find(alone.output_ids.begin(), alone.output_ids.end(), stop_id);
  r = GreedyRequest("Once upon a time", 100);
  r.mutable_sampling()->add_stop_token_ids(stop_id);
  got = RunGenerate(*server_->stub, r);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.token_ids, std::vector<int32_t>(alone.output_ids.begin(), first + 1));
  EXPECT_EQ(got.last().finish_reason(), pb::FINISH_REASON_STOP);
  EXPECT_EQ(got.last().stop_token_id(), stop_id);
}

TEST_F(GrpcService, SeededSamplingIsReproducibleAndMatchesTheEngine) {
  pb::GenerateRequest r;
  r.set_text("One day");
  r.mutable_sampling()->set_temperature(0.9);
  r.mutable_sampling()->set_top_p(0.95);
  r.mutable_sampling()->set_seed(1234);
  r.mutable_sampling()->set_max_tokens(40);
  const Streamed a = RunGenerate(*server_->stub, r);
  const Streamed b = RunGenerate(*server_->stub, r);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.token_ids, b.token_ids);
  EXPECT_EQ(a.text, b.text);

  // The same request submitted to the engine directly (no gRPC).
  EngineRequest direct;
  direct.request_id = "direct-seeded";
  direct.prompt_ids = server_->engine->tokenizer().Encode("One day");
  direct.sampling.temperature = 0.9;
  direct.sampling.top_p = 0.95;
  direct.sampling.seed = 1234;
  direct.sampling.max_tokens = 40;
  auto stream = server_->engine->Submit(direct);
  EngineOutput all;
  while (!all.finished()) {
    if (auto out = stream->Next(std::chrono::milliseconds(100))) all.Merge(std::move(*out));
  }
  EXPECT_EQ(a.token_ids, all.token_ids);
}

TEST_F(GrpcService, LogprobsEqualLogSoftmaxOfTheLogits) {
  constexpr int kTop = 3;
  pb::GenerateRequest r = GreedyRequest("Once upon a time", 8);
  r.mutable_sampling()->set_logprobs(kTop);
  const Streamed got = RunGenerate(*server_->stub, r);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  std::vector<pb::PositionLogprobs> positions;
  for (const auto& m : got.messages) {
    ASSERT_EQ(m.logprobs_size(), m.token_ids_size());
    positions.insert(positions.end(), m.logprobs().begin(), m.logprobs().end());
  }
  ASSERT_EQ(positions.size(), 8u);

  std::vector<int32_t> tokens = generator_->tokenizer().Encode("Once upon a time");
  const size_t prompt_len = tokens.size();
  tokens.insert(tokens.end(), got.token_ids.begin(), got.token_ids.end());
  const std::vector<float> logits = generator_->PromptLogits(tokens);
  const size_t vocab = logits.size() / tokens.size();
  for (size_t i = 0; i < positions.size(); ++i) {
    // log_softmax in double at the position that predicted token i.
    const float* row = logits.data() + (prompt_len - 1 + i) * vocab;
    const double max = *std::max_element(row, row + vocab);
    double sum = 0;
    for (size_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
    const auto logprob = [&](int32_t id) { return row[id] - max - std::log(sum); };
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return row[a] > row[b]; });

    const pb::PositionLogprobs& p = positions[i];
    EXPECT_EQ(p.chosen().token_id(), got.token_ids[i]);
    EXPECT_EQ(p.chosen().token_id(), order[0]) << "greedy picks the most likely token";
    EXPECT_NEAR(p.chosen().logprob(), logprob(p.chosen().token_id()), 1e-4) << i;
    ASSERT_EQ(p.top_logprobs_size(), kTop);
    for (int k = 0; k < kTop; ++k) {
      EXPECT_EQ(p.top_logprobs(k).token_id(), order[k]) << i << "/" << k;
      EXPECT_NEAR(p.top_logprobs(k).logprob(), logprob(order[k]), 1e-4) << i << "/" << k;
    }
  }
}

TEST_F(GrpcService, TokenizeAndDetokenizeMatchSentencepiece) {
  const nlohmann::json ref = LoadSpReference();
  ASSERT_FALSE(ref["encode"].empty());
  for (const auto& e : ref["encode"]) {
    const std::string text = e["text"];
    const std::vector<int32_t> ids = e["ids"];
    pb::TokenizeRequest request;
    request.set_text(text);
    request.set_add_special_tokens(false);
    pb::TokenizeResponse response;
    grpc::ClientContext c1;
    ASSERT_TRUE(server_->stub->Tokenize(&c1, request, &response).ok());
    EXPECT_EQ(std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end()), ids)
        << text;
    EXPECT_EQ(response.count(), static_cast<int32_t>(ids.size()));
    EXPECT_EQ(response.max_model_len(), 512);

    request.clear_add_special_tokens();  // default: BOS first, as /tokenize
    grpc::ClientContext c2;
    ASSERT_TRUE(server_->stub->Tokenize(&c2, request, &response).ok());
    std::vector<int32_t> with_bos = {kBos};
    with_bos.insert(with_bos.end(), ids.begin(), ids.end());
    EXPECT_EQ(std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end()),
              with_bos)
        << text;

    pb::DetokenizeRequest back;
    back.mutable_token_ids()->Add(ids.begin(), ids.end());
    pb::DetokenizeResponse decoded;
    grpc::ClientContext c3;
    ASSERT_TRUE(server_->stub->Detokenize(&c3, back, &decoded).ok());
    EXPECT_EQ(decoded.text(), e["decoded"].get<std::string>()) << text;
  }
  for (const auto& d : ref["decode"]) {
    const std::vector<int32_t> ids = d["ids"];
    pb::DetokenizeRequest request;
    request.mutable_token_ids()->Add(ids.begin(), ids.end());
    pb::DetokenizeResponse decoded;
    grpc::ClientContext c;
    ASSERT_TRUE(server_->stub->Detokenize(&c, request, &decoded).ok());
    EXPECT_EQ(decoded.text(), d["text"].get<std::string>());
  }
}

TEST_F(GrpcService, ListModelsAndServerInfo) {
  pb::ListModelsResponse models;
  grpc::ClientContext c1;
  ASSERT_TRUE(server_->stub->ListModels(&c1, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).id(), "stories260K");
  EXPECT_EQ(models.models(0).owned_by(), "tqserve");
  EXPECT_EQ(models.models(0).root(), TQ_MODEL_DIR);
  EXPECT_EQ(models.models(0).max_model_len(), 512);
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  EXPECT_LE(models.models(0).created(), now);
  EXPECT_GT(models.models(0).created(), now - 600);

  pb::GetServerInfoResponse info;
  grpc::ClientContext c2;
  ASSERT_TRUE(server_->stub->GetServerInfo(&c2, {}, &info).ok());
  EXPECT_EQ(info.model(), "stories260K");
  EXPECT_EQ(info.model_dir(), TQ_MODEL_DIR);
  EXPECT_EQ(info.device(), "cpu");
  // The level the kernels of this process run (TQ_CPU_ISA or detected).
  EXPECT_EQ(info.cpu_isa(), kernels::cpu::CpuIsaName(kernels::cpu::ActiveCpuIsa()));
  EXPECT_EQ(info.kv_cache().dtype(), "fp32");
  EXPECT_EQ(info.kv_cache().block_size(), 16);
  // fp32 K and V for 5 layers x 4 KV heads x head_dim 8 x 16 tokens (config.json).
  EXPECT_EQ(info.kv_cache().bytes_per_block(), 5u * 2 * 4 * 8 * 16 * 4);
  EXPECT_EQ(info.kv_cache().total_bytes(),
            info.kv_cache().bytes_per_block() * info.kv_cache().num_blocks());
  EXPECT_LE(info.kv_cache().total_bytes(), 16u << 20);  // the configured budget
  EXPECT_GT(info.kv_cache().total_bytes(), (16u << 20) - info.kv_cache().bytes_per_block());
  EXPECT_EQ(info.kv_cache().capacity_tokens(), 16 * info.kv_cache().num_blocks());
  EXPECT_EQ(info.max_model_len(), 512);
  EXPECT_EQ(info.vocab_size(), 512);
  EXPECT_EQ(info.max_num_seqs(), server_->engine->info().max_num_seqs);
  EXPECT_EQ(info.max_num_batched_tokens(), server_->engine->info().max_num_batched_tokens);
  // 260,032 fp32 parameters (config.json): tied embeddings 512 x 64, per layer
  // q 64x64, k and v 64x32, o 64x64, gate and up 64x172, down 172x64, two
  // norms of 64; the final norm of 64.
  ASSERT_EQ(info.weight_bytes().count("fp32"), 1u);
  EXPECT_EQ(info.weight_bytes().at("fp32"),
            4u * (512 * 64 + 5 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 172 + 2 * 64) + 64));
  EXPECT_EQ(info.versions().tqserve(), TQ_PROJECT_VERSION);
  EXPECT_EQ(info.versions().grpc(), GRPC_CPP_VERSION_STRING);
  EXPECT_EQ(info.versions().protobuf(), "3.21.12");  // Debian 12's libprotobuf-dev
  EXPECT_EQ(info.versions().api(), "tqserve.v1");
  EXPECT_TRUE(info.state().alive());
  EXPECT_FALSE(info.state().draining());
}

TEST_F(GrpcService, HealthReportsServingForTheServerAndTheService) {
  // grpc.health.v1: SERVING = 1; an unknown service is NOT_FOUND.
  for (const std::string service : {"", "tqserve.v1.GenerationService"}) {
    const auto [status, serving] = HealthCheck(*server_->channel, service);
    EXPECT_TRUE(status.ok()) << service << ": " << status.error_message();
    EXPECT_EQ(serving, 1) << service;
  }
  EXPECT_EQ(HealthCheck(*server_->channel, "no.such.Service").first.error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcService, ReflectionDescribesTheService) {
  // grpc.reflection.v1alpha: ServerReflectionRequest.list_services = 7;
  // response.list_services_response = 6 { repeated ServiceResponse service = 1
  // { string name = 1 } }.
  const std::string listed = ReflectionCall(*server_->channel, StringField(7, ""));
  std::vector<std::string> names;
  for (const std::string& list : Strings(listed, 6)) {
    for (const std::string& service : Strings(list, 1)) {
      for (const std::string& name : Strings(service, 1)) names.push_back(name);
    }
  }
  for (const char* want : {"tqserve.v1.GenerationService", "grpc.health.v1.Health",
                           "grpc.reflection.v1alpha.ServerReflection"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }

  // file_containing_symbol = 4; response.file_descriptor_response = 4 {
  // repeated bytes file_descriptor_proto = 1 }.
  const std::string file =
      ReflectionCall(*server_->channel, StringField(4, "tqserve.v1.GenerationService"));
  const std::vector<std::string> responses = Strings(file, 4);
  ASSERT_EQ(responses.size(), 1u);
  const std::vector<std::string> protos = Strings(responses[0], 1);
  ASSERT_FALSE(protos.empty());
  google::protobuf::FileDescriptorProto fd;
  ASSERT_TRUE(fd.ParseFromString(protos[0]));
  EXPECT_EQ(fd.name(), "tqserve/v1/generation.proto");
  EXPECT_EQ(fd.package(), "tqserve.v1");
  ASSERT_EQ(fd.service_size(), 1);
  EXPECT_EQ(fd.service(0).name(), "GenerationService");
  std::vector<std::string> methods;
  for (const auto& m : fd.service(0).method()) methods.push_back(m.name());
  EXPECT_EQ(methods, (std::vector<std::string>{"Generate", "Tokenize", "Detokenize", "ListModels",
                                               "GetServerInfo"}));
  EXPECT_TRUE(fd.service(0).method(0).server_streaming());
  EXPECT_FALSE(fd.service(0).method(0).client_streaming());
}

TEST_F(GrpcService, InvalidRequestsGetTheirCodesAndTheServerStaysUp) {
  struct Case {
    const char* name;
    pb::GenerateRequest request;
    grpc::StatusCode code;
    const char* message_start;
  };
  std::vector<Case> cases;
  cases.push_back({"empty input", {}, grpc::StatusCode::INVALID_ARGUMENT, "input "});
  pb::GenerateRequest empty_text;
  empty_text.set_text("");
  cases.push_back({"empty text", empty_text, grpc::StatusCode::INVALID_ARGUMENT, "text "});
  pb::GenerateRequest negative = GreedyRequest("Hi", 1);
  negative.mutable_sampling()->set_max_tokens(-1);
  cases.push_back(
      {"max_tokens -1", negative, grpc::StatusCode::INVALID_ARGUMENT, "sampling.max_tokens "});
  pb::GenerateRequest top_p = GreedyRequest("Hi", 1);
  top_p.mutable_sampling()->set_top_p(2.0);
  cases.push_back({"top_p 2.0", top_p, grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_p "});
  pb::GenerateRequest model = GreedyRequest("Hi", 1);
  model.set_model("no-such-model");
  cases.push_back({"unknown model", model, grpc::StatusCode::NOT_FOUND, "model: "});

  const double invalid_before = GrpcRequests(*server_, "Generate", "INVALID_ARGUMENT");
  const double not_found_before = GrpcRequests(*server_, "Generate", "NOT_FOUND");
  for (const Case& c : cases) {
    const Streamed got = RunGenerate(*server_->stub, c.request);
    EXPECT_EQ(got.status.error_code(), c.code) << c.name << ": " << got.status.error_message();
    EXPECT_EQ(got.status.error_message().rfind(c.message_start, 0), 0u)
        << c.name << ": " << got.status.error_message();
    EXPECT_TRUE(got.messages.empty()) << c.name;
  }
  EXPECT_EQ(GrpcRequests(*server_, "Generate", "INVALID_ARGUMENT") - invalid_before, 4);
  EXPECT_EQ(GrpcRequests(*server_, "Generate", "NOT_FOUND") - not_found_before, 1);

  pb::TokenizeRequest tokenize;
  tokenize.set_model("no-such-model");
  pb::TokenizeResponse tokens;
  grpc::ClientContext c1;
  EXPECT_EQ(server_->stub->Tokenize(&c1, tokenize, &tokens).error_code(),
            grpc::StatusCode::NOT_FOUND);
  pb::DetokenizeRequest detokenize;
  detokenize.add_token_ids(5);
  detokenize.add_token_ids(512);
  pb::DetokenizeResponse text;
  grpc::ClientContext c2;
  const grpc::Status bad_id = server_->stub->Detokenize(&c2, detokenize, &text);
  EXPECT_EQ(bad_id.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad_id.error_message(), "token_ids[1] must be in [0, 512), got 512");

  // Still serving, and nothing was left in the engine.
  const double ok_before = GrpcRequests(*server_, "Generate", "OK");
  const Streamed after = RunGenerate(*server_->stub, GreedyRequest("Once upon a time", 5));
  EXPECT_TRUE(after.status.ok());
  EXPECT_EQ(after.token_ids.size(), 5u);
  EXPECT_EQ(GrpcRequests(*server_, "Generate", "OK") - ok_before, 1);
  const EngineStats s = WaitEngineIdle(*server_->engine);
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

}  // namespace
}  // namespace tq::testing
