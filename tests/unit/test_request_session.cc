// RequestSession on a fake engine: the owner is woken through SetNotify
// when any choice has output (whichever speaks first; also output pushed
// before the notify was set), a stop string aborts with kStop and is
// reported as the stream matched it, server aborts and engine
// errors become failures. Expected texts come from whole-sequence
// Tokenizer::Decode, or from the Python sentencepiece library
// (tests/reference/sp_ref.py); the engine finish -> choice finish / failure /
// abort mapping is checked as a table.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "engine/runtime/engine.h"
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
          auto s = std::make_shared<RequestStream>();
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

TEST_F(SessionTest, NotifyWakesOnAnyChoice) {
  std::mutex mu;
  std::condition_variable cv;
  bool woken = false;
  RequestSession session(engine_.Calls(), *tok_, {Request("a"), Request("b")}, {});
  session.Submit();
  session.SetNotify([&] {
    std::lock_guard<std::mutex> lock(mu);
    woken = true;
    cv.notify_all();
  });
  std::thread engine([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    engine_.streams["b"]->Push(Out({5}));
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return woken; });
  }
  engine.join();
  const std::vector<SessionDelta> deltas = session.Take();
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

// The Python sentencepiece library's encoding of `text` (sp_ref.py, run as a
// CTest fixture before this test).
nlohmann::json SpEncoding(const std::string& text) {
  std::ifstream in(TQ_REF_DIR "/sp_reference.json");
  if (!in) return nullptr;
  const nlohmann::json reference = nlohmann::json::parse(in);
  for (const auto& e : reference["encode"]) {
    if (e["text"] == text) return e;
  }
  return nullptr;
}

TEST_F(SessionTest, StopStringTextAndTokensMatchPythonSentencepiece) {
  const nlohmann::json e = SpEncoding("Once upon a time, there was a little girl named Lily.");
  ASSERT_TRUE(e.is_object()) << "run `ctest -R reference.sentencepiece` first";
  const Ids ids = e["ids"];
  const std::string decoded = e["decoded"];
  // The first Python piece at which the decoded text (pieces with "▁" as a
  // space, the first one dropped after BOS) contains "girl": that token
  // completes both stop strings.
  size_t k = 0;
  std::string pieces;
  while (k < ids.size() && pieces.find("girl") == std::string::npos) {
    std::string piece = e["pieces"][k++];
    for (size_t at; (at = piece.find("\xe2\x96\x81")) != std::string::npos;)
      piece.replace(at, 3, " ");
    pieces += piece;
  }
  ASSERT_LT(k, ids.size());

  EngineRequest r = Request("a");
  r.prompt_ids = {tok_->bos_id()};
  RequestSession session(engine_.Calls(), *tok_, {r}, {"zebra", "girl", "little girl"});
  session.Submit();
  std::string sent;
  std::string stop;
  Ids tokens;
  for (size_t i = 0; i < ids.size() && !session.done(); i += 3) {
    const size_t end = std::min(ids.size(), i + 3);
    engine_.streams["a"]->Push(Out(Ids(ids.begin() + i, ids.begin() + end)));
    for (const SessionDelta& d : session.Take()) {
      sent += d.text;
      for (const TokenStep& t : d.tokens) tokens.push_back(t.id);
      if (d.finished()) {
        EXPECT_EQ(d.finish, ChoiceFinish::kStop);
        stop = d.stop_string;
      }
    }
  }
  // The stop string that starts first wins, and is not sent.
  EXPECT_EQ(stop, "little girl");
  EXPECT_EQ(sent, decoded.substr(0, decoded.find("little girl")));
  EXPECT_EQ(sent, "Once upon a time, there was a ");
  // Tokens after the one that completed it are dropped and not counted.
  EXPECT_EQ(tokens, Ids(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k)));
  EXPECT_EQ(session.completion_tokens(0), static_cast<int32_t>(k));
  ASSERT_EQ(engine_.aborts.size(), 1u);
  EXPECT_EQ(engine_.aborts[0], std::make_pair(std::string("a"), FinishReason::kStop));
}

// One row: what the engine sends choice "a" (choice "b" stays silent), and
// what the session makes of it.
struct FinishRow {
  const char* name;
  Ids tokens;
  FinishReason engine_finish;
  ChoiceFinish finish;                          // of choice "a"'s last delta (kNone: no delta)
  std::optional<int32_t> stop_token_id;         // reported as vLLM's stop_reason
  std::optional<SessionFailure::Kind> failure;  // the whole request failed
  std::string message;                          // the failure's message
  std::vector<std::pair<std::string, FinishReason>> aborts;  // engine aborts after Take
};

TEST_F(SessionTest, EngineFinishMapsToChoiceFinishFailureAndAborts) {
  const int32_t eos = tok_->eos_id();
  const std::vector<FinishRow> table = {
      {"length", {407, 408}, FinishReason::kLength, ChoiceFinish::kLength, {}, {}, "", {}},
      {"eos", {407, eos}, FinishReason::kStop, ChoiceFinish::kStop, {}, {}, "", {}},
      {"stop token id", {407, 403}, FinishReason::kStop, ChoiceFinish::kStop, 403, {}, "", {}},
      {"server abort",
       {407},
       FinishReason::kAbort,
       ChoiceFinish::kNone,
       {},
       SessionFailure::Kind::kServerAborted,
       "the request was aborted: the server is shutting down",
       {{"b", FinishReason::kAbort}}},
      {"engine error",
       {},
       FinishReason::kError,
       ChoiceFinish::kNone,
       {},
       SessionFailure::Kind::kEngineError,
       "the engine failed: out of blocks",
       {{"b", FinishReason::kAbort}}},
  };
  for (const FinishRow& row : table) {
    SCOPED_TRACE(row.name);
    FakeEngine engine;
    EngineRequest a = Request("a");
    a.sampling.stop_token_ids = {403};
    RequestSession session(engine.Calls(), *tok_, {a, Request("b")}, {});
    session.Submit();
    EngineOutput out = Out(row.tokens, row.engine_finish);
    if (row.engine_finish == FinishReason::kError) out.error = "out of blocks";
    engine.streams["a"]->Push(std::move(out));
    const std::vector<SessionDelta> deltas = session.Take();
    if (row.finish == ChoiceFinish::kNone) {
      EXPECT_TRUE(deltas.empty()) << "a failed request sends nothing more";
    } else {
      ASSERT_EQ(deltas.size(), 1u);
      EXPECT_EQ(deltas[0].finish, row.finish);
      EXPECT_EQ(deltas[0].stop_token_id, row.stop_token_id);
      EXPECT_EQ(deltas[0].stop_string, "");
      EXPECT_EQ(deltas[0].completion_tokens, static_cast<int32_t>(row.tokens.size()));
    }
    ASSERT_EQ(session.failure().has_value(), row.failure.has_value());
    if (row.failure) {
      EXPECT_EQ(session.failure()->kind, *row.failure);
      EXPECT_EQ(session.failure()->message, row.message);
      EXPECT_TRUE(session.done());
    } else {
      EXPECT_FALSE(session.done()) << "choice b is still running";
    }
    EXPECT_EQ(engine.aborts, row.aborts);
  }
}

TEST_F(SessionTest, ClientAbortAndDestructionAbortOnlyUnfinishedChoices) {
  {
    RequestSession session(engine_.Calls(), *tok_, {Request("a"), Request("b")}, {});
    session.Submit();
    engine_.streams["a"]->Push(Out({407}, FinishReason::kLength));
    ASSERT_EQ(session.Take().size(), 1u);
    session.AbortAll();  // the client went away
    EXPECT_TRUE(session.done());
    EXPECT_FALSE(session.failure().has_value()) << "a client abort is not a failure";
    engine_.streams["b"]->Push(Out({408}));
    EXPECT_TRUE(session.Take().empty()) << "nothing after an abort";
  }
  {
    RequestSession dropped(engine_.Calls(), *tok_, {Request("c")}, {});
    dropped.Submit();
  }
  const std::vector<std::pair<std::string, FinishReason>> want = {{"b", FinishReason::kAbort},
                                                                  {"c", FinishReason::kAbort}};
  EXPECT_EQ(engine_.aborts, want);
}

}  // namespace
}  // namespace tq
