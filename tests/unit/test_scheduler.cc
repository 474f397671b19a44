// The scheduler's plan step by step, against tables worked out by hand from
// the token-budget rule (DESIGN.md "Data flow"), with a fake model runner
// whose next token depends only on the sequence's tokens so far (so a
// recomputed sequence must continue exactly as an uninterrupted one;
// scheduler_harness.h). Prefix caching is off here (test_prefix_cache.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/scheduler_harness.h"

namespace tq {
namespace {

using namespace testing_harness;

TEST(Scheduler, AdmissionChunkingAndFinish) {
  // Budget 8 tokens, 2 sequences at most, 4-token blocks.
  SchedulerHarness h(Config(8, 2, 16));
  h.Add(Request("A", 10, 3));
  h.Add(Request("B", 3, 2));
  h.Add(Request("C", 2, 1));
  h.Run({
      // A's 10-token prompt is chunked: 8 now (2 blocks), B and C wait.
      {{"A8"}, 1, 2, 2},
      // A's last 2 prompt tokens (3 blocks) + sample; B admitted whole (1 block).
      {{"A2s", "B3s"}, 2, 1, 4},
      // Decode one token each: A at position 10 (3 blocks), B at 3 (still 1).
      // B reaches max_tokens 2 and finishes: its block is freed.
      {{"A1s", "B1s"}, 1, 1, 3},
      // A decodes its 3rd token and finishes; C admitted (1 block) and finishes.
      {{"A1s", "C2s"}, 0, 0, 0},
  });
  EXPECT_EQ(h.outputs_["A"], Expect(10, 3));
  EXPECT_EQ(h.outputs_["B"], Expect(3, 2));
  EXPECT_EQ(h.outputs_["C"], Expect(2, 1));
  EXPECT_EQ(h.finish_["A"], FinishReason::kLength);
  EXPECT_FALSE(h.sched_.has_work());
}

TEST(Scheduler, PreemptsNewestWhenBlocksRunOutAndRecomputes) {
  // 4 blocks of 4 tokens = 16 slots; each prompt of 7 needs 2 blocks.
  SchedulerHarness h(Config(64, 8, 4));
  h.Add(Request("A", 7, 4));
  h.Add(Request("B", 7, 4));
  h.Run({
      {{"A7s", "B7s"}, 2, 0, 4},
      // Position 7 still fits in 2 blocks for both.
      {{"A1s", "B1s"}, 2, 0, 4},
      // Position 8 needs a 3rd block each: none free. A (older) preempts B.
      {{"A1s"}, 1, 1, 3, {"B"}},
      // A's 4th token (position 9 fits its 3 blocks) ends it (max_tokens 4);
      // B cannot come back yet: its recompute needs 3 blocks, 1 is free.
      {{"A1s"}, 0, 1, 0},
      // B recomputes prompt + 2 outputs (9 tokens) and samples its 3rd.
      {{"B9s"}, 1, 0, 3},
      {{"B1s"}, 0, 0, 0},
  });
  // Recompute changes nothing in the outputs.
  EXPECT_EQ(h.outputs_["A"], Expect(7, 4));
  EXPECT_EQ(h.outputs_["B"], Expect(7, 4));
}

TEST(Scheduler, BudgetSharedBetweenDecodeAndChunkedPrefill) {
  // Budget 6: decoding sequences take 1 each, a new prompt gets the rest.
  SchedulerHarness h(Config(6, 4, 32));
  h.Add(Request("A", 2, 5));
  h.Add(Request("B", 2, 5));
  h.Run({{{"A2s", "B2s"}, 2, 0, 2}});
  h.Add(Request("C", 9, 1));
  h.Run({
      {{"A1s", "B1s", "C4"}, 3, 0, 3},   // positions 2 of A, B: still 1 block each
      {{"A1s", "B1s", "C4"}, 3, 0, 4},   // C's 8 tokens take 2 blocks
      {{"A1s", "B1s", "C1s"}, 2, 0, 4},  // A, B reach position 4 (2nd block);
                                         // C samples, finishes and frees 3
  });
  EXPECT_EQ(h.outputs_["C"], Expect(9, 1));
}

TEST(Scheduler, AbortFreesBlocksAtOnceAndTellsTheRunner) {
  SchedulerHarness h(Config(64, 8, 16));
  const SeqId a = h.Add(Request("A", 6, 10));
  h.Add(Request("B", 3, 10));
  h.Run({{{"A6s", "B3s"}, 2, 0, 3}});
  std::optional<RequestUpdate> u = h.sched_.Abort("A", Scheduler::Clock::now());
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->output.finish, FinishReason::kAbort);
  EXPECT_EQ(u->output.num_output_tokens, 1);
  EXPECT_EQ(h.sched_.block_pool().num_used(), 1);  // only B's block
  EXPECT_FALSE(h.sched_.Abort("A", Scheduler::Clock::now()).has_value());
  EXPECT_FALSE(h.sched_.Abort("nope", Scheduler::Clock::now()).has_value());
  ScheduleOutput s = h.sched_.Schedule(Scheduler::Clock::now());
  EXPECT_EQ(s.finished_ids, std::vector<SeqId>{a});
  // A waiting request can be aborted too (never seen by the runner).
  h.Add(Request("W", 3, 1));
  ASSERT_TRUE(h.sched_.Abort("W", Scheduler::Clock::now()).has_value());
  EXPECT_EQ(h.sched_.num_waiting(), 0);
}

TEST(Scheduler, StopReasons) {
  SchedulerHarness h(Config(64, 8, 64, 4, 12));
  const SeqId eos = h.Add(Request("eos", 3, 10));
  EngineRequest stop_id = Request("stop_id", 3, 10);
  stop_id.sampling.stop_token_ids = {777};
  const SeqId sid = h.Add(std::move(stop_id));
  EngineRequest ignore = Request("ignore", 3, 2);
  ignore.sampling.ignore_eos = true;
  const SeqId ign = h.Add(std::move(ignore));
  h.Add(Request("maxlen", 10, 100));  // max_model_len 12: 2 outputs at most
  h.runner_.ForceNext(eos, kEos);
  h.runner_.ForceNext(sid, 777);
  h.runner_.ForceNext(ign, kEos);
  h.Step({{"eos3s", "stop_id3s", "ignore3s", "maxlen10s"}, 2, 0, 4}, 1);
  h.Step({{"ignore1s", "maxlen1s"}, 0, 0, 0}, 2);
  EXPECT_EQ(h.finish_["eos"], FinishReason::kStop);
  EXPECT_EQ(h.finish_["stop_id"], FinishReason::kStop);
  EXPECT_EQ(h.finish_["ignore"], FinishReason::kLength);
  EXPECT_EQ(h.outputs_["ignore"].size(), 2u);
  EXPECT_EQ(h.finish_["maxlen"], FinishReason::kLength);
  EXPECT_EQ(h.outputs_["maxlen"].size(), 2u);
}

TEST(Scheduler, PriorityOrdersAdmissionAndPreemption) {
  // Room for one sequence at a time (2 blocks of 4, prompts of 5 + 2 outputs).
  SchedulerHarness h(Config(64, 8, 2));
  h.Add(Request("low", 5, 2, /*priority=*/5));
  h.Add(Request("high", 5, 2, /*priority=*/-1));
  h.Run({
      {{"high5s"}, 1, 1, 2},
      {{"high1s"}, 0, 1, 0},
      {{"low5s"}, 1, 0, 2},
      {{"low1s"}, 0, 0, 0},
  });
  // Among running ones, the lowest priority is the victim even if older.
  SchedulerHarness p(Config(64, 8, 4));
  p.Add(Request("old_low", 7, 4, 3));
  p.Add(Request("new_high", 7, 4, 0));
  p.Run({
      {{"new_high7s", "old_low7s"}, 2, 0, 4},
      {{"new_high1s", "old_low1s"}, 2, 0, 4},
      {{"new_high1s"}, 1, 1, 3, {"old_low"}},
  });
}

TEST(Scheduler, MaxNumSeqsCapsRunning) {
  SchedulerHarness h(Config(100, 3, 64));
  for (const char* id : {"a", "b", "c", "d", "e"}) h.Add(Request(id, 2, 3));
  h.Step({{"a2s", "b2s", "c2s"}, 3, 2, 3}, 1);
}

}  // namespace
}  // namespace tq
