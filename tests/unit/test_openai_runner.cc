// RequestRunner on a fake engine: stop strings (text cut before the match,
// abort sent, tokens counted up to the match, as vLLM), finish reasons, stop
// token ids, echo with prompt logprobs, usage over n choices, errors, and
// aborts of every unfinished engine request. Expected texts are computed
// here from whole-sequence Tokenizer::Decode and std::string::find.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/common/error.h"
#include "engine/runtime/engine.h"
#include "server/http/request_runner.h"

namespace tq::http {
namespace {

using Ids = std::vector<int32_t>;

// Records submits and aborts; the test pushes outputs into the streams.
struct FakeEngine {
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  std::vector<std::string> aborts;
  std::vector<FinishReason> reasons;  // of each abort
  int fail_on_submit = -1;            // throw EngineUnavailable on this submit (0-based)

  SessionEngine Calls() {
    return {[this](EngineRequest r) {
              if (static_cast<int>(streams.size()) == fail_on_submit) {
                throw EngineUnavailable("draining");
              }
              auto s = std::make_shared<RequestStream>();
              streams[r.request_id] = s;
              return s;
            },
            [this](const std::string& id, FinishReason reason) {
              aborts.push_back(id);
              reasons.push_back(reason);
            }};
  }
};

EngineOutput Out(Ids tokens, FinishReason finish = FinishReason::kNone, int32_t num_output = 0) {
  EngineOutput o;
  o.token_ids = std::move(tokens);
  o.finish = finish;
  o.num_output_tokens = num_output;
  return o;
}

class RunnerTest : public ::testing::Test {
 protected:
  ChoiceSpec Spec(int32_t index, const Ids& prompt, int32_t prompt_index = 0) {
    ChoiceSpec s;
    s.index = index;
    s.prompt_index = prompt_index;
    s.request.request_id = "req-" + std::to_string(index);
    s.request.prompt_ids = prompt;
    return s;
  }
  // Text the client should see for `out` after `prompt` (the detokenizer's
  // convention: Decode(prompt + out) minus Decode(prompt)).
  static std::string TextOf(const Ids& prompt, const Ids& out) {
    Ids all = prompt;
    all.insert(all.end(), out.begin(), out.end());
    return tok_->Decode(all).substr(tok_->Decode(prompt).size());
  }
  // Takes until done (bounded), concatenating each choice's deltas.
  static std::map<int32_t, ChoiceResult> Drain(RequestRunner& runner) {
    std::map<int32_t, ChoiceResult> results;
    for (int i = 0; i < 100 && !runner.done(); ++i) {
      for (ChoiceDelta& d : runner.Take()) {
        results[d.index].Append(std::move(d));
      }
    }
    return results;
  }

  // The bundled model's tokenizer, loaded once for the suite.
  static inline const Tokenizer* tok_ = Tokenizer::Load(TQ_MODEL_DIR, {}).release();
  FakeEngine engine_;
  const Ids prompt_ = tok_->Encode("Once upon a time", true);
  // A continuation as the model writes it (ids independent of the runner).
  Ids Continuation() const {
    const Ids whole = tok_->Encode("Once upon a time, there was a little girl named Lily.", true);
    EXPECT_TRUE(std::equal(prompt_.begin(), prompt_.end(), whole.begin()));
    return Ids(whole.begin() + static_cast<std::ptrdiff_t>(prompt_.size()), whole.end());
  }
};

TEST_F(RunnerTest, StopStringCutsTextAbortsAndCountsTokens) {
  const Ids out = Continuation();
  const std::string full = TextOf(prompt_, out);
  const std::string stop = "little";
  ASSERT_NE(full.find(stop), std::string::npos);
  // The first k tokens whose text contains the stop string.
  size_t k = 1;
  while (TextOf(prompt_, Ids(out.begin(), out.begin() + k)).find(stop) == std::string::npos) ++k;

  RequestRunner runner(engine_.Calls(), *tok_, {Spec(0, prompt_)}, {"zebra", stop}, false);
  runner.Submit();
  engine_.streams["req-0"]->Push(Out(out));  // all tokens, and more after the stop
  auto results = Drain(runner);
  ASSERT_TRUE(runner.done());
  EXPECT_FALSE(runner.error().has_value());
  EXPECT_EQ(results[0].text, full.substr(0, full.find(stop)));
  EXPECT_EQ(results[0].finish_reason, "stop");
  EXPECT_EQ(results[0].stop_reason, stop);
  EXPECT_EQ(engine_.aborts, std::vector<std::string>{"req-0"});
  EXPECT_EQ(engine_.reasons, std::vector<FinishReason>{FinishReason::kStop});
  EXPECT_EQ(runner.usage().completion_tokens, static_cast<int32_t>(k));
  EXPECT_EQ(runner.usage().prompt_tokens, static_cast<int32_t>(prompt_.size()));
}

TEST_F(RunnerTest, DeltasConcatenateToTheWholeTextOnLength) {
  const Ids out = Continuation();
  RequestRunner runner(engine_.Calls(), *tok_, {Spec(0, prompt_)}, {}, false);
  runner.Submit();
  const size_t half = out.size() / 2;
  engine_.streams["req-0"]->Push(
      Out(Ids(out.begin(), out.begin() + half), FinishReason::kNone, static_cast<int32_t>(half)));
  std::string text;
  for (ChoiceDelta& d : runner.Take()) text += d.text;
  engine_.streams["req-0"]->Push(Out(Ids(out.begin() + half, out.end()), FinishReason::kLength,
                                     static_cast<int32_t>(out.size())));
  auto results = Drain(runner);
  EXPECT_EQ(text + results[0].text, TextOf(prompt_, out));
  EXPECT_EQ(results[0].finish_reason, "length");
  EXPECT_TRUE(results[0].stop_reason.is_null());
  EXPECT_TRUE(engine_.aborts.empty());
  EXPECT_EQ(runner.usage().completion_tokens, static_cast<int32_t>(out.size()));
}

TEST_F(RunnerTest, Utf8CharacterSplitOverByteTokensIsHeldBack) {
  // "é" is U+00E9 = C3 A9; byte-fallback pieces <0xNN> have id NN + 3.
  RequestRunner runner(engine_.Calls(), *tok_, {Spec(0, prompt_)}, {}, false);
  runner.Submit();
  engine_.streams["req-0"]->Push(Out({0xC3 + 3}));
  const auto first = runner.Take();
  EXPECT_TRUE(first.empty() || first[0].text.empty());
  engine_.streams["req-0"]->Push(Out({0xA9 + 3}, FinishReason::kLength, 2));
  auto results = Drain(runner);
  EXPECT_EQ(results[0].text, TextOf(prompt_, {0xC3 + 3, 0xA9 + 3}));
  EXPECT_NE(results[0].text.find("\xc3\xa9"), std::string::npos);
}

TEST_F(RunnerTest, StopTokenIdIsTheStopReason) {
  const Ids out = Continuation();
  ChoiceSpec spec = Spec(0, prompt_);
  spec.request.sampling.stop_token_ids = {out[2]};
  RequestRunner runner(engine_.Calls(), *tok_, {spec}, {}, false);
  runner.Submit();
  engine_.streams["req-0"]->Push(Out(Ids(out.begin(), out.begin() + 3), FinishReason::kStop, 3));
  auto results = Drain(runner);
  EXPECT_EQ(results[0].finish_reason, "stop");
  EXPECT_EQ(results[0].stop_reason, out[2]);
  // EOS: finish "stop" without a stop_reason.
  RequestRunner eos(engine_.Calls(), *tok_, {Spec(1, prompt_)}, {}, false);
  eos.Submit();
  engine_.streams["req-1"]->Push(Out({out[0], 2}, FinishReason::kStop, 2));
  auto r2 = Drain(eos);
  EXPECT_EQ(r2[1].finish_reason, "stop");
  EXPECT_TRUE(r2[1].stop_reason.is_null());
}

TEST_F(RunnerTest, EchoWithPromptLogprobs) {
  ChoiceSpec spec = Spec(0, prompt_);
  spec.echo = true;
  spec.echo_text = "Once upon a time";
  spec.request.num_logprobs = 1;
  spec.request.prompt_logprobs = true;
  RequestRunner runner(engine_.Calls(), *tok_, {spec}, {}, true);
  runner.Submit();
  const Ids out = Continuation();
  EngineOutput o = Out({out[0]}, FinishReason::kLength, 1);
  for (size_t i = 1; i < prompt_.size(); ++i) {
    o.prompt_logprobs.push_back({{prompt_[i], -0.5f * static_cast<float>(i)}, {}});
  }
  o.logprobs.push_back({{out[0], -0.25f}, {{out[0], -0.25f}}});
  engine_.streams["req-0"]->Push(std::move(o));
  auto results = Drain(runner);
  const ChoiceResult& r = results[0];
  EXPECT_EQ(r.text, "Once upon a time" + TextOf(prompt_, {out[0]}));
  ASSERT_EQ(r.logprobs.size(), prompt_.size() + 1);
  EXPECT_FALSE(r.logprobs[0].logprob.has_value());  // BOS: null, as OpenAI's echo
  EXPECT_EQ(r.logprobs[2].logprob, -1.0f);          // prompt_logprobs[1] is for token 2
  EXPECT_EQ(r.logprobs.back().token, out[0]);
  EXPECT_EQ(r.logprobs.back().logprob, -0.25f);
  // Offsets in code points of "Once upon a time": <s> 0, Once 0, upon 4, a 9, time 11; then 16.
  std::vector<int64_t> offsets;
  for (const LogprobEntry& e : r.logprobs) offsets.push_back(e.text_offset);
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 0, 4, 9, 11, 16}));
}

TEST_F(RunnerTest, UsageCountsEachPromptOnceAndEveryChoice) {
  const Ids other = tok_->Encode("The dog", true);
  RequestRunner runner(engine_.Calls(), *tok_,
                       {Spec(0, prompt_, 0), Spec(1, prompt_, 0), Spec(2, other, 1)}, {}, false);
  runner.Submit();
  engine_.streams["req-0"]->Push(Out({5, 6}, FinishReason::kLength, 2));
  engine_.streams["req-1"]->Push(Out({7}, FinishReason::kStop, 1));
  engine_.streams["req-2"]->Push(Out({8, 9, 10}, FinishReason::kLength, 3));
  Drain(runner);
  ASSERT_TRUE(runner.done());
  EXPECT_EQ(runner.usage().prompt_tokens, static_cast<int32_t>(prompt_.size() + other.size()));
  EXPECT_EQ(runner.usage().completion_tokens, 6);
}

TEST_F(RunnerTest, EngineErrorFailsTheRequestAndAbortsTheRest) {
  RequestRunner runner(engine_.Calls(), *tok_, {Spec(0, prompt_), Spec(1, prompt_)}, {}, false);
  runner.Submit();
  EngineOutput bad;
  bad.finish = FinishReason::kError;
  bad.error = "step failed";
  engine_.streams["req-0"]->Push(std::move(bad));
  Drain(runner);
  ASSERT_TRUE(runner.done());
  ASSERT_TRUE(runner.error().has_value());
  EXPECT_EQ(runner.error()->status, 500);
  EXPECT_NE(runner.error()->message.find("step failed"), std::string::npos);
  EXPECT_EQ(engine_.aborts, std::vector<std::string>{"req-1"});
  EXPECT_TRUE(runner.Take().empty());
}

TEST_F(RunnerTest, ServerAbortIs503) {
  RequestRunner runner(engine_.Calls(), *tok_, {Spec(0, prompt_)}, {}, false);
  runner.Submit();
  engine_.streams["req-0"]->Push(Out({}, FinishReason::kAbort));
  Drain(runner);
  ASSERT_TRUE(runner.error().has_value());
  EXPECT_EQ(runner.error()->status, 503);
}

TEST_F(RunnerTest, DestructionAbortsOnlyUnfinishedChoices) {
  {
    RequestRunner runner(engine_.Calls(), *tok_, {Spec(0, prompt_), Spec(1, prompt_)}, {}, false);
    runner.Submit();
    engine_.streams["req-0"]->Push(Out({5}, FinishReason::kLength, 1));
    Drain(runner);  // bounded: choice 1 never finishes
    EXPECT_FALSE(runner.done());
  }
  EXPECT_EQ(engine_.aborts, std::vector<std::string>{"req-1"});
  EXPECT_EQ(engine_.reasons, std::vector<FinishReason>{FinishReason::kAbort});
}

TEST_F(RunnerTest, RefusedSubmitAbortsThoseAlreadySubmitted) {
  engine_.fail_on_submit = 1;
  RequestRunner runner(engine_.Calls(), *tok_, {Spec(0, prompt_), Spec(1, prompt_)}, {}, false);
  EXPECT_THROW(runner.Submit(), EngineUnavailable);
  EXPECT_EQ(engine_.aborts, std::vector<std::string>{"req-0"});
  EXPECT_TRUE(runner.done());
}

}  // namespace
}  // namespace tq::http
