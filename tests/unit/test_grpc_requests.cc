// The gRPC front end without a server: Generate request validation (status
// codes, messages naming the field) and the stream messages built from engine
// outputs (stop strings, UTF-8, stop reasons, logprobs, usage). Expected token
// ids, pieces and texts come from the Python sentencepiece library
// (tests/reference/sp_ref.py) and from the literal strings themselves.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/structured/token_mask.h"
#include "engine/tokenizer/tokenizer.h"
#include "grpc_test_util.h"
#include "server/grpc/generate_request.h"
#include "server/grpc/generate_response.h"
#include "server/grpc/grpc_status.h"

namespace tq::grpc_api {
namespace {

namespace pb = tqserve::v1;
using testing::LoadSpReference;

constexpr int32_t kBos = 1;  // the bundled tokenizer's <s> and </s>
constexpr int32_t kEos = 2;

void ExpectSamplingEq(const SamplingParams& got, const SamplingParams& want) {
  EXPECT_EQ(got.temperature, want.temperature);
  EXPECT_EQ(got.top_p, want.top_p);
  EXPECT_EQ(got.top_k, want.top_k);
  EXPECT_EQ(got.min_p, want.min_p);
  EXPECT_EQ(got.repetition_penalty, want.repetition_penalty);
  EXPECT_EQ(got.presence_penalty, want.presence_penalty);
  EXPECT_EQ(got.frequency_penalty, want.frequency_penalty);
  EXPECT_EQ(got.seed, want.seed);
  EXPECT_EQ(got.max_tokens, want.max_tokens);
  EXPECT_EQ(got.stop_token_ids, want.stop_token_ids);
  EXPECT_EQ(got.ignore_eos, want.ignore_eos);
}

class GrpcRequests : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = Tokenizer::Load(TQ_MODEL_DIR, LoadModelFiles(TQ_MODEL_DIR).tokenizer).release();
    reference_ = new nlohmann::json(LoadSpReference());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete reference_;
  }

  static guard::ModelLimits Limits() {
    guard::ModelLimits l;
    l.served_model_name = "stories260K";
    l.max_model_len = 512;
    l.vocab_size = 512;
    return l;
  }

  // The sentencepiece reference entry for `text`.
  static const nlohmann::json& Encoding(const std::string& text) {
    for (const auto& e : (*reference_)["encode"]) {
      if (e["text"] == text) return e;
    }
    static const nlohmann::json kNone = {{"ids", nlohmann::json::array()},
                                         {"pieces", nlohmann::json::array()}};
    ADD_FAILURE() << "no reference for " << text;
    return kNone;
  }

  // The RpcError ParseGenerateRequest throws for `r` (OK when none).
  static RpcError ErrorOf(const pb::GenerateRequest& r) {
    try {
      ParseGenerateRequest(r, Limits(), *tokenizer_);
    } catch (const RpcError& e) {
      return e;
    }
    return RpcError(grpc::StatusCode::OK, "");
  }

  static Tokenizer* tokenizer_;
  static nlohmann::json* reference_;
};

Tokenizer* GrpcRequests::tokenizer_ = nullptr;
nlohmann::json* GrpcRequests::reference_ = nullptr;

TEST_F(GrpcRequests, TextIsTokenizedWithBosAndDefaultsApply) {
  pb::GenerateRequest r;
  r.set_text("Once upon a time");
  const GenerateParams p = ParseGenerateRequest(r, Limits(), *tokenizer_);
  std::vector<int32_t> expected = {kBos};
  for (int32_t id : Encoding("Once upon a time")["ids"]) expected.push_back(id);
  EXPECT_EQ(p.request.prompt_ids, expected);
  // OpenAI's defaults (the bundled generation_config.json sets none).
  SamplingParams want;
  want.temperature = 1.0;
  want.top_p = 1.0;
  want.top_k = 0;
  want.min_p = 0.0;
  want.repetition_penalty = 1.0;
  want.presence_penalty = 0.0;
  want.frequency_penalty = 0.0;
  want.seed = std::nullopt;
  want.max_tokens = 16;
  want.stop_token_ids = {};
  want.ignore_eos = false;
  ExpectSamplingEq(p.request.sampling, want);
  EXPECT_EQ(p.request.num_logprobs, -1);
  EXPECT_FALSE(p.want_logprobs);
  EXPECT_TRUE(p.stop.empty());
  EXPECT_TRUE(p.request.request_id.empty());

  r.set_add_special_tokens(false);
  const GenerateParams no_bos = ParseGenerateRequest(r, Limits(), *tokenizer_);
  EXPECT_EQ(no_bos.request.prompt_ids, std::vector<int32_t>(expected.begin() + 1, expected.end()));
}

TEST_F(GrpcRequests, TokenIdsAreUsedAsTheyAre) {
  pb::GenerateRequest r;
  for (int32_t id : {403, 407, 0, 511}) r.mutable_token_ids()->add_ids(id);
  EXPECT_EQ(ParseGenerateRequest(r, Limits(), *tokenizer_).request.prompt_ids,
            (std::vector<int32_t>{403, 407, 0, 511}));
}

TEST_F(GrpcRequests, EveryFieldReachesTheEngineRequest) {
  pb::GenerateRequest r;
  r.set_model("stories260K");
  r.set_text("Hi");
  r.set_priority(-2);
  pb::SamplingParameters* s = r.mutable_sampling();
  s->set_temperature(0.7);
  s->set_top_p(0.9);
  s->set_top_k(40);
  s->set_min_p(0.05);
  s->set_repetition_penalty(1.1);
  s->set_presence_penalty(0.5);
  s->set_frequency_penalty(-0.5);
  s->set_seed(-1);
  s->set_max_tokens(32);
  s->add_stop("");
  s->add_stop("x");
  s->add_stop_token_ids(kEos);
  s->set_ignore_eos(true);
  s->set_logprobs(3);
  const GenerateParams p = ParseGenerateRequest(r, Limits(), *tokenizer_);
  SamplingParams want;
  want.temperature = 0.7;
  want.top_p = 0.9;
  want.top_k = 40;
  want.min_p = 0.05;
  want.repetition_penalty = 1.1;
  want.presence_penalty = 0.5;
  want.frequency_penalty = -0.5;
  want.seed = UINT64_MAX;  // -1 as a 64-bit two's complement number, as the HTTP API reads it
  want.max_tokens = 32;
  want.stop_token_ids = {kEos};
  want.ignore_eos = true;
  ExpectSamplingEq(p.request.sampling, want);
  EXPECT_EQ(p.stop, std::vector<std::string>{"x"});  // empty stop strings are dropped
  EXPECT_EQ(p.request.num_logprobs, 3);
  EXPECT_TRUE(p.want_logprobs);
  EXPECT_EQ(p.request.priority, -2);
}

TEST_F(GrpcRequests, UnsetFieldsTakeGenerationConfigDefaults) {
  guard::ModelLimits limits = Limits();
  limits.defaults.temperature = 0.6;
  limits.defaults.top_p = 0.95;
  limits.defaults.top_k = 20;
  limits.defaults.repetition_penalty = 1.05;
  pb::GenerateRequest r;
  r.set_text("Hi");
  GenerateParams p = ParseGenerateRequest(r, limits, *tokenizer_);
  EXPECT_EQ(p.request.sampling.temperature, 0.6);
  EXPECT_EQ(p.request.sampling.top_p, 0.95);
  EXPECT_EQ(p.request.sampling.top_k, 20);
  EXPECT_EQ(p.request.sampling.repetition_penalty, 1.05);
  // A value that is set wins, also when it is proto3's zero value.
  r.mutable_sampling()->set_temperature(0);
  r.mutable_sampling()->set_top_k(0);
  p = ParseGenerateRequest(r, limits, *tokenizer_);
  EXPECT_EQ(p.request.sampling.temperature, 0.0);
  EXPECT_EQ(p.request.sampling.top_k, 0);
}

TEST_F(GrpcRequests, InvalidRequestsNameTheField) {
  using Mutate = std::function<void(pb::GenerateRequest&)>;
  const auto ids = [](pb::GenerateRequest& r, int n) {
    for (int i = 0; i < n; ++i) r.mutable_token_ids()->add_ids(400);
  };
  struct Case {
    const char* name;
    Mutate mutate;
    grpc::StatusCode code;
    std::string message;  // the whole message, or its start when ending in "..."
  };
  const std::vector<Case> cases = {
      {"unknown model", [](auto& r) { r.set_model("gpt-4"); }, grpc::StatusCode::NOT_FOUND,
       "model: the model `gpt-4` does not exist"},
      {"no input", [](auto& r) { r.clear_input(); }, grpc::StatusCode::INVALID_ARGUMENT,
       "input is required: set text or token_ids"},
      {"empty text", [](auto& r) { r.set_text(""); }, grpc::StatusCode::INVALID_ARGUMENT,
       "text must not be empty"},
      {"empty ids", [](auto& r) { r.mutable_token_ids(); }, grpc::StatusCode::INVALID_ARGUMENT,
       "token_ids.ids must not be empty"},
      {"id out of range",
       [](auto& r) {
         r.mutable_token_ids()->add_ids(1);
         r.mutable_token_ids()->add_ids(512);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "token_ids.ids[1] must be in [0, 512), got 512"},
      {"negative id", [](auto& r) { r.mutable_token_ids()->add_ids(-3); },
       grpc::StatusCode::INVALID_ARGUMENT, "token_ids.ids[0] must be in [0, 512), got -3"},
      {"top_p 2", [](auto& r) { r.mutable_sampling()->set_top_p(2.0); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_p must be in (0, 1], got 2"},
      {"max_tokens -1", [](auto& r) { r.mutable_sampling()->set_max_tokens(-1); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.max_tokens must be >= 0, got -1"},
      {"temperature -0.5", [](auto& r) { r.mutable_sampling()->set_temperature(-0.5); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.temperature must be..."},
      {"top_k -2", [](auto& r) { r.mutable_sampling()->set_top_k(-2); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_k must be..."},
      {"presence 3", [](auto& r) { r.mutable_sampling()->set_presence_penalty(3); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.presence_penalty must be in [-2, 2], got 3"},
      {"logprobs 21", [](auto& r) { r.mutable_sampling()->set_logprobs(21); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.logprobs must be in [0, 20], got 21"},
      {"logprobs -1", [](auto& r) { r.mutable_sampling()->set_logprobs(-1); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.logprobs must be in [0, 20], got -1"},
      {"stop token 600", [](auto& r) { r.mutable_sampling()->add_stop_token_ids(600); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "sampling.stop_token_ids[0] must be in [0, 512), got 600"},
      {"65 stop strings",
       [](auto& r) {
         for (int i = 0; i < 65; ++i) r.mutable_sampling()->add_stop("s");
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "sampling.stop: 'stop' may have at most 64 entries, got 65"},
      {"prompt too long", [&](auto& r) { ids(r, 513); }, grpc::StatusCode::INVALID_ARGUMENT,
       "token_ids.ids has 513 tokens, but the model's context length is 512 tokens"},
      {"prompt + max_tokens too long",
       [&](auto& r) {
         ids(r, 500);
         r.mutable_sampling()->set_max_tokens(13);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "sampling.max_tokens is 13 and the prompt has 500 tokens, but the model's context length "
       "is 512 tokens (prompt + max_tokens must fit)"},
      {"prompt + default max_tokens (16) too long", [&](auto& r) { ids(r, 497); },
       grpc::StatusCode::INVALID_ARGUMENT, "sampling.max_tokens is 16 and the prompt has 497..."},
      {"prompt + max_tokens fills the context exactly", [&](auto& r) { ids(r, 496); },
       grpc::StatusCode::OK, ""},
      {"max_tokens 0", [](auto& r) { r.mutable_sampling()->set_max_tokens(0); },
       grpc::StatusCode::OK, ""},
  };
  for (const Case& c : cases) {
    pb::GenerateRequest r;
    r.set_text("Once upon a time");
    c.mutate(r);
    const RpcError e = ErrorOf(r);
    EXPECT_EQ(e.code(), c.code) << c.name << ": " << e.what();
    std::string want = c.message;
    if (want.size() > 3 && want.ends_with("...")) {
      want.resize(want.size() - 3);
      EXPECT_TRUE(std::string(e.what()).starts_with(want)) << c.name << ": " << e.what();
    } else {
      EXPECT_EQ(e.what(), want) << c.name;
    }
  }
}

TEST_F(GrpcRequests, StatusCodeNamesFollowTheGrpcSpec) {
  // grpc/doc/statuscodes.md: the numbers are the wire values.
  const std::vector<std::pair<int, std::string>> spec = {{0, "OK"},
                                                         {1, "CANCELLED"},
                                                         {2, "UNKNOWN"},
                                                         {3, "INVALID_ARGUMENT"},
                                                         {4, "DEADLINE_EXCEEDED"},
                                                         {5, "NOT_FOUND"},
                                                         {6, "ALREADY_EXISTS"},
                                                         {7, "PERMISSION_DENIED"},
                                                         {8, "RESOURCE_EXHAUSTED"},
                                                         {9, "FAILED_PRECONDITION"},
                                                         {10, "ABORTED"},
                                                         {11, "OUT_OF_RANGE"},
                                                         {12, "UNIMPLEMENTED"},
                                                         {13, "INTERNAL"},
                                                         {14, "UNAVAILABLE"},
                                                         {15, "DATA_LOSS"},
                                                         {16, "UNAUTHENTICATED"},
                                                         {17, "UNKNOWN"},
                                                         {-1, "UNKNOWN"}};
  for (const auto& [number, name] : spec) {
    EXPECT_EQ(StatusCodeName(static_cast<grpc::StatusCode>(number)), name) << number;
  }
}

// ---- Stream messages.

// An engine delta with `ids`, ending the request with `finish`.
EngineOutput Delta(std::vector<int32_t> ids, FinishReason finish = FinishReason::kNone) {
  EngineOutput out;
  out.token_ids = std::move(ids);
  out.finish = finish;
  return out;
}

// Feeds `ids` to a responder in chunks of `chunk` (the last chunk finishing
// with `finish`) until it finishes; returns the messages it sent.
std::vector<pb::GenerateResponse> Feed(GenerateResponder& responder,
                                       const std::vector<int32_t>& ids, size_t chunk,
                                       FinishReason finish) {
  std::vector<pb::GenerateResponse> sent;
  for (size_t i = 0; i < ids.size() && !responder.finished(); i += chunk) {
    const size_t end = std::min(ids.size(), i + chunk);
    pb::GenerateResponse m;
    if (responder.Add(Delta({ids.begin() + i, ids.begin() + end},
                            end == ids.size() ? finish : FinishReason::kNone),
                      &m)) {
      sent.push_back(m);
    }
  }
  return sent;
}

std::string Text(const std::vector<pb::GenerateResponse>& sent) {
  std::string text;
  for (const auto& m : sent) text += m.text();
  return text;
}

std::vector<int32_t> Tokens(const std::vector<pb::GenerateResponse>& sent) {
  std::vector<int32_t> ids;
  for (const auto& m : sent) ids.insert(ids.end(), m.token_ids().begin(), m.token_ids().end());
  return ids;
}

GenerateParams BosPrompt(std::vector<std::string> stop = {}) {
  GenerateParams p;
  p.request.prompt_ids = {kBos};
  p.stop = std::move(stop);
  return p;
}

const char kSentence[] = "Once upon a time, there was a little girl named Lily.";

// The number of leading pieces whose text (SentencePiece: "▁" is a space,
// the first one dropped after BOS) contains `needle`.
size_t PiecesUntil(const nlohmann::json& pieces, const std::string& needle) {
  std::string text;
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string piece = pieces[i];
    for (size_t at; (at = piece.find("\xe2\x96\x81")) != std::string::npos;) {
      piece.replace(at, 3, " ");
    }
    text += piece;
    if (text.substr(1).find(needle) != std::string::npos) return i + 1;
  }
  return 0;
}

TEST_F(GrpcRequests, StopStringCutsTextAndTokens) {
  const nlohmann::json& e = Encoding(kSentence);
  const std::vector<int32_t> ids = e["ids"];
  GenerateResponder responder(*tokenizer_, "gen-1", BosPrompt({"girl"}));
  const auto sent = Feed(responder, ids, 3, FinishReason::kLength);
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(Text(sent), "Once upon a time, there was a little ");
  const size_t k = PiecesUntil(e["pieces"], "girl");
  ASSERT_GT(k, 0u);
  EXPECT_EQ(Tokens(sent), std::vector<int32_t>(ids.begin(), ids.begin() + k));
  const pb::GenerateResponse& last = sent.back();
  EXPECT_EQ(last.finish_reason(), pb::FINISH_REASON_STOP);
  EXPECT_EQ(last.stop_string(), "girl");
  EXPECT_EQ(last.usage().prompt_tokens(), 1);
  EXPECT_EQ(last.usage().completion_tokens(), static_cast<int32_t>(k));
  EXPECT_EQ(last.usage().total_tokens(), static_cast<int32_t>(k) + 1);
  EXPECT_TRUE(responder.stopped_by_string());
  for (size_t i = 0; i + 1 < sent.size(); ++i) {
    EXPECT_EQ(sent[i].finish_reason(), pb::FINISH_REASON_UNSPECIFIED);
    EXPECT_FALSE(sent[i].has_usage());
    EXPECT_EQ(sent[i].id(), "gen-1");
  }
  pb::GenerateResponse after;
  EXPECT_FALSE(responder.Add(Delta({ids[0]}), &after)) << "nothing follows the last message";
}

TEST_F(GrpcRequests, ShorterStopStringThatCompletesFirstIsReported) {
  const std::vector<int32_t> ids = Encoding(kSentence)["ids"];
  GenerateResponder responder(*tokenizer_, "gen-2", BosPrompt({"a little girl", "a lit"}));
  const auto sent = Feed(responder, ids, 1, FinishReason::kLength);
  EXPECT_EQ(Text(sent), "Once upon a time, there was ");
  EXPECT_EQ(sent.back().stop_string(), "a lit");
}

TEST_F(GrpcRequests, LengthFinishSendsTheWholeText) {
  const nlohmann::json& e = Encoding(kSentence);
  const std::vector<int32_t> ids = e["ids"];
  GenerateResponder responder(*tokenizer_, "gen-3", BosPrompt({"dragon"}));
  const auto sent = Feed(responder, ids, 4, FinishReason::kLength);
  EXPECT_EQ(Text(sent), e["decoded"].get<std::string>());
  EXPECT_EQ(Text(sent), kSentence);
  EXPECT_EQ(Tokens(sent), ids);
  EXPECT_EQ(sent.back().finish_reason(), pb::FINISH_REASON_LENGTH);
  EXPECT_EQ(sent.back().stop_reason_case(), pb::GenerateResponse::STOP_REASON_NOT_SET);
  EXPECT_EQ(sent.back().usage().completion_tokens(), static_cast<int32_t>(ids.size()));
}

TEST_F(GrpcRequests, IncompleteUtf8IsHeldBackButTokensAreSent) {
  std::vector<int32_t> ids;
  for (const auto& d : (*reference_)["decode"]) {
    if (d["text"] == "\xe4\xb8\xad") ids = d["ids"].get<std::vector<int32_t>>();  // 中
  }
  ASSERT_EQ(ids.size(), 3u);
  GenerateResponder responder(*tokenizer_, "gen-4", BosPrompt());
  const auto sent = Feed(responder, ids, 1, FinishReason::kLength);
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].text(), "");
  EXPECT_EQ(sent[1].text(), "");
  EXPECT_EQ(sent[2].text(), "\xe4\xb8\xad");
  EXPECT_EQ(Tokens(sent), ids);
}

TEST_F(GrpcRequests, StopTokenIdIsTheStopReasonButEosIsNot) {
  GenerateParams p = BosPrompt();
  p.request.sampling.stop_token_ids = {403};
  GenerateResponder with_stop_id(*tokenizer_, "gen-5", p);
  auto sent = Feed(with_stop_id, {407, 403}, 2, FinishReason::kStop);
  EXPECT_EQ(sent.back().finish_reason(), pb::FINISH_REASON_STOP);
  EXPECT_EQ(sent.back().stop_token_id(), 403);
  EXPECT_EQ(Tokens(sent), (std::vector<int32_t>{407, 403}));

  GenerateResponder with_eos(*tokenizer_, "gen-6", p);
  sent = Feed(with_eos, {407, kEos}, 2, FinishReason::kStop);
  EXPECT_EQ(sent.back().finish_reason(), pb::FINISH_REASON_STOP);
  EXPECT_EQ(sent.back().stop_reason_case(), pb::GenerateResponse::STOP_REASON_NOT_SET);
}

TEST_F(GrpcRequests, LogprobsCarryIdsValuesAndTokenBytes) {
  GenerateParams p = BosPrompt();
  p.want_logprobs = true;
  const int32_t time_id = Encoding("Once upon a time")["ids"][3];  // "▁time"
  ASSERT_EQ(Encoding("Once upon a time")["pieces"][3], "\xe2\x96\x81time");
  int32_t byte_e4 = -1;
  for (const auto& d : (*reference_)["decode"]) {
    if (d["text"] == "\xe4\xb8\xad") byte_e4 = d["ids"][0];  // "<0xE4>"
  }
  EngineOutput out = Delta({time_id, byte_e4});
  out.logprobs = {PositionLogprobs{{time_id, -0.25f}, {{time_id, -0.25f}, {byte_e4, -2.5f}}},
                  PositionLogprobs{{byte_e4, -1.5f}, {}}};
  GenerateResponder responder(*tokenizer_, "gen-7", p);
  pb::GenerateResponse m;
  ASSERT_TRUE(responder.Add(std::move(out), &m));
  ASSERT_EQ(m.logprobs_size(), 2);
  EXPECT_EQ(m.logprobs(0).chosen().token_id(), time_id);
  EXPECT_EQ(m.logprobs(0).chosen().logprob(), -0.25f);
  EXPECT_EQ(m.logprobs(0).chosen().token(), " time");
  ASSERT_EQ(m.logprobs(0).top_logprobs_size(), 2);
  EXPECT_EQ(m.logprobs(0).top_logprobs(1).token_id(), byte_e4);
  EXPECT_EQ(m.logprobs(0).top_logprobs(1).logprob(), -2.5f);
  EXPECT_EQ(m.logprobs(0).top_logprobs(1).token(), "\xe4");
  EXPECT_EQ(m.logprobs(1).chosen().token(), "\xe4");
  EXPECT_EQ(m.logprobs(1).top_logprobs_size(), 0);
  EXPECT_EQ(TokenBytes(*tokenizer_, kBos), "<s>");
  EXPECT_EQ(TokenBytes(*tokenizer_, 512), "");
}

TEST_F(GrpcRequests, StructuredOutputCompilesOrNamesTheKeyword) {
  structured::GrammarCache cache(
      structured::TokenizerVocabulary(*tokenizer_, std::vector<int32_t>{tokenizer_->eos_id()}));
  // The vocabulary's bytes spell what sentencepiece decodes (its leading
  // dummy-prefix space included).
  const std::vector<int32_t> ids = tokenizer_->Encode("Lily saw a big dog.", false);
  std::string bytes;
  for (int32_t id : ids) bytes += cache.vocab().bytes(id);
  EXPECT_EQ(bytes, " " + tokenizer_->Decode(ids));

  pb::GenerateRequest r;
  r.set_text("x");
  GenerateParams p = ParseGenerateRequest(r, Limits(), *tokenizer_);
  ReadStructuredOutput(r, cache, &p);
  EXPECT_EQ(p.request.sampling.grammar, nullptr);  // unset: free text
  r.mutable_sampling()->mutable_structured_output()->set_regex("[0-9]{2}");
  ReadStructuredOutput(r, cache, &p);
  ASSERT_NE(p.request.sampling.grammar, nullptr);
  structured::GrammarMatcher m(p.request.sampling.grammar);
  EXPECT_FALSE(m.CanEnd());
  r.mutable_sampling()->mutable_structured_output()->set_json_schema(
      R"({"type": "integer", "minimum": 3})");
  try {
    ReadStructuredOutput(r, cache, &p);
    ADD_FAILURE() << "minimum accepted";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(std::string(e.what()).rfind("sampling.structured_output.json_schema", 0), 0u)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("'minimum'"), std::string::npos) << e.what();
  }
  // Issue 41: JSON text nested 100,000 deep crashed the daemon; it is
  // refused before it is parsed.
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  deep += "1";
  deep.append(100000, '}');
  r.mutable_sampling()->mutable_structured_output()->set_json_schema(deep);
  try {
    ReadStructuredOutput(r, cache, &p);
    ADD_FAILURE() << "a schema nested 100000 deep accepted";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(std::string(e.what()),
              "sampling.structured_output.json_schema is nested more than 64 levels deep");
  }
}

}  // namespace
}  // namespace tq::grpc_api
