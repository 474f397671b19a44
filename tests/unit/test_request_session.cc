// RequestSession on a fake engine: the owner is woken through SetNotify
// when any choice has output (also output pushed before the notify was set),
// Poll waits for whichever choice speaks first, a stop string aborts with
// kStop and is reported as the stream matched it, server aborts and engine
// errors become failures. Expected texts come from whole-sequence
// Tokenizer::Decode.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "engine/runtime/engine_client.h"
#include "server/session/request_session.h"

namespace tq {
namespace {

using Ids = std::vector<int32_t>;

struct FakeEngine {
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  std::vector<std::pair<std::string, FinishReason>> aborts;

  SessionEngine Calls() {
    return {
        [this](EngineRequest r) {
          auto s = std::make_shared<RequestStream>(r.request_id);
          streams[r.request_id] = s;
          return s;
        },
        [this](const std::string& id, FinishReason reason) { aborts.emplace_back(id, reason); }};
  }
};

EngineOutput Out(Ids tokens, FinishReason finish = FinishReason::kNone) {
  EngineOutput o;
  o.token_ids = std::move(tokens);
  o.finish = finish;
  o.num_output_tokens = static_cast<int32_t>(o.token_ids.size());
  return o;
}

class SessionTest : public ::testing::Test {
 protected:
  EngineRequest Request(const std::string& id) {
    EngineRequest r;
    r.request_id = id;
    r.prompt_ids = prompt_;
    return r;
  }
  static inline const Tokenizer* tok_ = Tokenizer::Load(TQ_MODEL_DIR, {}).release();
  FakeEngine engine_;
  const Ids prompt_ = tok_->Encode("Once upon a time", true);
};

TEST_F(SessionTest, NotifyFiresForPendingAndNewOutput) {
  RequestSession session(engine_.Calls(), *tok_, {Request("a")}, {});
  session.Submit();
  engine_.streams["a"]->Push(Out({tok_->Encode(" there", false)}));
  std::atomic<int> wakes{0};
  session.SetNotify([&] { ++wakes; });
  EXPECT_EQ(wakes.load(), 1) << "output pushed before SetNotify must wake at once";
  auto deltas = session.Take();
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_TRUE(deltas[0].first);
  EXPECT_TRUE(session.Take().empty());
  std::thread engine([&] { engine_.streams["a"]->Push(Out({5}, FinishReason::kLength)); });
  engine.join();
  EXPECT_EQ(wakes.load(), 2);
  deltas = session.Take();
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].finish, ChoiceFinish::kLength);
  EXPECT_TRUE(session.done());
  EXPECT_TRUE(engine_.aborts.empty());
}

TEST_F(SessionTest, PollWakesOnAnyChoice) {
  RequestSession session(engine_.Calls(), *tok_, {Request("a"), Request("b")}, {});
  session.Submit();
  std::thread engine([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    engine_.streams["b"]->Push(Out({5}));
  });
  std::vector<SessionDelta> deltas;
  for (int i = 0; i < 100 && deltas.empty(); ++i) deltas = session.Poll(std::chrono::seconds(10));
  engine.join();
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].choice, 1u);
}

TEST_F(SessionTest, StopStringAbortsWithStopAndIsReported) {
  const Ids whole = tok_->Encode("Once upon a time, there was a little girl named Lily.", true);
  const Ids out(whole.begin() + static_cast<std::ptrdiff_t>(prompt_.size()), whole.end());
  Ids all = prompt_;
  all.insert(all.end(), out.begin(), out.end());
  const std::string text = tok_->Decode(all).substr(tok_->Decode(prompt_).size());
  RequestSession session(engine_.Calls(), *tok_, {Request("a")}, {"little", "a lit"});
  session.Submit();
  engine_.streams["a"]->Push(Out(out));
  std::string sent;
  std::string stop;
  for (const SessionDelta& d : session.Take()) {
    sent += d.text;
    stop = d.stop_string;
  }
  EXPECT_EQ(sent, text.substr(0, text.find("a lit")));
  EXPECT_EQ(stop, "a lit");
  ASSERT_EQ(engine_.aborts.size(), 1u);
  EXPECT_EQ(engine_.aborts[0].second, FinishReason::kStop);
  EXPECT_TRUE(session.done());
}

TEST_F(SessionTest, ServerAbortAndEngineErrorAreFailures) {
  RequestSession aborted(engine_.Calls(), *tok_, {Request("a"), Request("b")}, {});
  aborted.Submit();
  engine_.streams["a"]->Push(Out({}, FinishReason::kAbort));
  EXPECT_TRUE(aborted.Take().empty());
  ASSERT_TRUE(aborted.failure().has_value());
  EXPECT_EQ(aborted.failure()->kind, SessionFailure::Kind::kServerAborted);
  ASSERT_EQ(engine_.aborts.size(), 1u);  // the other choice
  EXPECT_EQ(engine_.aborts[0].first, "b");

  RequestSession failed(engine_.Calls(), *tok_, {Request("c")}, {});
  failed.Submit();
  EngineOutput bad;
  bad.finish = FinishReason::kError;
  bad.error = "out of blocks";
  engine_.streams["c"]->Push(std::move(bad));
  failed.Take();
  ASSERT_TRUE(failed.failure().has_value());
  EXPECT_EQ(failed.failure()->kind, SessionFailure::Kind::kEngineError);
  EXPECT_NE(failed.failure()->message.find("out of blocks"), std::string::npos);
}

}  // namespace
}  // namespace tq
