// The engine thread behind Engine: concurrent submitters get exactly
// what tq::OfflineEngine gives alone; aborts free every KV block; draining and
// shutdown end every stream; bad requests are refused with a message.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engine/common/error.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/offline_engine.h"
#include "watchdog.h"

namespace tq {
namespace {

// "r3" (built by append: GCC 12 -O3 warns on "r" + std::to_string, a false -Wrestrict).
std::string Id(const char* prefix, int i) {
  std::string id(prefix);
  id.append(std::to_string(i));
  return id;
}

using std::chrono::milliseconds;

EngineOptions ClientOptions() {
  EngineOptions o;
  o.model_dir = TQ_MODEL_DIR;
  o.num_threads = 1;
  o.kv_cache_dtype = kernels::KvDtype::kF32;
  o.kv_cache_memory = 4 << 20;
  return o;
}

// Reads a stream to its end (or fails after `limit`).
EngineOutput Drain(RequestStream& stream, std::chrono::seconds limit = std::chrono::seconds(60)) {
  EngineOutput all;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!all.finished() && std::chrono::steady_clock::now() < deadline) {
    if (auto out = stream.Next(milliseconds(50))) all.Merge(std::move(*out));
  }
  return all;
}

EngineRequest Greedy(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_ids = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  return r;
}

// Waits until `pred(stats)` or the deadline; returns the last stats.
template <typename Pred>
EngineStats WaitFor(const Engine& c, Pred pred, milliseconds limit = milliseconds(1000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  EngineStats s = c.Stats();
  while (!pred(s) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
    s = c.Stats();
  }
  return s;
}

TEST(Engine, ConcurrentSubmittersGetTheirOwnOutputs) {
  testing::Watchdog watchdog("ConcurrentSubmitters", std::chrono::seconds(120));
  Engine client(ClientOptions());
  OfflineEngine alone(ClientOptions());
  const char* prompts[] = {"Once upon a time", "The dog",      "Lily saw a bird",  "Tom was sad",
                           "One day",          "The big tree", "A girl named Sue", "They played"};
  constexpr int kThreads = 8;
  std::vector<EngineOutput> got(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto stream =
          client.Submit(Greedy(Id("t", i), client.tokenizer().Encode(prompts[i]), 30 + 7 * i));
      got[i] = Drain(*stream);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    const EngineRequest r = Greedy("", alone.tokenizer().Encode(prompts[i]), 30 + 7 * i);
    const GenerationResult want = alone.Generate(r.prompt_ids, r.sampling);
    EXPECT_EQ(got[i].token_ids, want.output_ids) << prompts[i];
    EXPECT_EQ(FinishReasonName(got[i].finish), want.finish_reason);
  }
  const EngineStats s = WaitFor(client, [](const EngineStats& s) { return s.num_running == 0; });
  EXPECT_TRUE(s.alive);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_GT(s.num_steps, 0);
}

TEST(Engine, AbortMidStreamFreesEveryBlock) {
  testing::Watchdog watchdog("AbortMidStream", std::chrono::seconds(60));
  Engine client(ClientOptions());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 20; ++i) {
    EngineRequest r = Greedy(Id("a", i), client.tokenizer().Encode("Once upon"), 400);
    r.sampling.ignore_eos = true;
    streams.push_back(client.Submit(std::move(r)));
  }
  // Wait for some tokens, then abort all (some running, maybe some waiting).
  auto first = streams[0]->Next(milliseconds(10000));
  ASSERT_TRUE(first.has_value());
  for (int i = 0; i < 20; ++i) client.Abort(Id("a", i));
  for (auto& s : streams) {
    const EngineOutput out = Drain(*s, std::chrono::seconds(5));
    EXPECT_EQ(out.finish, FinishReason::kAbort);
    EXPECT_LT(out.num_output_tokens, 400);
  }
  const EngineStats s = WaitFor(
      client, [](const EngineStats& s) { return s.kv_blocks_used == 0 && s.num_running == 0; });
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_waiting, 0);
  // A stop string found by the front end ends a request as "stop".
  EngineRequest stopped = Greedy("st", client.tokenizer().Encode("Once upon"), 400);
  stopped.sampling.ignore_eos = true;
  auto stop_stream = client.Submit(std::move(stopped));
  ASSERT_TRUE(stop_stream->Next(milliseconds(10000)).has_value());
  client.Abort("st", FinishReason::kStop);
  EXPECT_EQ(Drain(*stop_stream, std::chrono::seconds(5)).finish, FinishReason::kStop);
  // Aborting unknown or finished ids is harmless, and the engine still serves.
  client.Abort("a0");
  client.Abort("never-existed");
  const EngineOutput after = Drain(*client.Submit(Greedy("b", {1, 403}, 3)));
  EXPECT_EQ(after.token_ids.size(), 3u);
}

TEST(Engine, DrainRefusesNewWorkAndFinishesAccepted) {
  testing::Watchdog watchdog("Drain", std::chrono::seconds(60));
  Engine client(ClientOptions());
  auto stream = client.Submit(Greedy("d", client.tokenizer().Encode("Once upon a time"), 50));
  client.StartDraining();
  EXPECT_TRUE(client.Stats().draining);
  EXPECT_THROW(client.Submit(Greedy("late", {1, 403}, 3)), EngineUnavailable);
  const EngineOutput out = Drain(*stream);
  EXPECT_NE(out.finish, FinishReason::kAbort);
  EXPECT_GT(out.token_ids.size(), 0u);
}

TEST(Engine, ShutdownAbortsInFlightRequests) {
  testing::Watchdog watchdog("Shutdown", std::chrono::seconds(60));
  Engine client(ClientOptions());
  EngineRequest r = Greedy("s", {1, 403}, 450);
  r.sampling.ignore_eos = true;
  auto stream = client.Submit(std::move(r));
  ASSERT_TRUE(stream->Next(milliseconds(10000)).has_value());
  client.Shutdown();
  const EngineOutput out = Drain(*stream, std::chrono::seconds(5));
  EXPECT_EQ(out.finish, FinishReason::kAbort);
  EXPECT_FALSE(client.Stats().alive);
  EXPECT_THROW(client.Submit(Greedy("x", {1}, 1)), EngineUnavailable);
  client.Shutdown();  // idempotent
}

TEST(Engine, RefusesBadRequestsWithAMessage) {
  Engine client(ClientOptions());
  auto message = [&](EngineRequest r) -> std::string {
    try {
      client.Submit(std::move(r));
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_EQ(message(Greedy("e", {}, 5)), "prompt is empty");
  EXPECT_NE(message(Greedy("e", {1, 9999}, 5)).find("out of range"), std::string::npos);
  EXPECT_NE(message(Greedy("e", std::vector<int32_t>(513, 5), 5)).find("max_model_len 512"),
            std::string::npos);
  EngineRequest bad_top_p = Greedy("e", {1}, 5);
  bad_top_p.sampling.top_p = 2.0;
  EXPECT_EQ(message(bad_top_p), "top_p must be in (0, 1], got 2");
  EngineRequest bad_logprobs = Greedy("e", {1}, 5);
  bad_logprobs.num_logprobs = 21;
  EXPECT_NE(message(bad_logprobs).find("logprobs"), std::string::npos);
  EXPECT_EQ(message(Greedy("", {1}, 5)), "request_id is empty");
}

TEST(Engine, DuplicateLiveRequestIdIsAnError) {
  testing::Watchdog watchdog("Duplicate", std::chrono::seconds(60));
  Engine client(ClientOptions());
  EngineRequest r = Greedy("dup", {1, 403}, 300);
  r.sampling.ignore_eos = true;
  auto first = client.Submit(r);
  auto second = client.Submit(r);
  const EngineOutput out2 = Drain(*second);
  EXPECT_EQ(out2.finish, FinishReason::kError);
  EXPECT_NE(out2.error.find("duplicate"), std::string::npos);
  const EngineOutput out1 = Drain(*first);
  EXPECT_EQ(out1.token_ids.size(), 300u);
}

}  // namespace
}  // namespace tq
