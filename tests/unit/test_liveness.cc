// Liveness verdicts (server/guard/liveness.h, issue 41): dead, stalled by
// the engine or by the worker pool's queue, and the queue's oldest wait.
// The end-to-end check with a wedged engine: tests/integration/liveness.test.mjs.
#include <gtest/gtest.h>

#include <chrono>

#include "server/guard/liveness.h"

namespace tq::guard {
namespace {

using std::chrono::milliseconds;

TEST(WaitWatch, OldestWaitingTaskOnly) {
  WaitWatch watch;
  const auto t0 = WaitWatch::Clock::now();
  EXPECT_EQ(watch.OldestWaitSeconds(t0), 0.0);
  const uint64_t a = watch.Enqueued(t0);
  const uint64_t b = watch.Enqueued(t0 + milliseconds(1500));
  EXPECT_DOUBLE_EQ(watch.OldestWaitSeconds(t0 + milliseconds(2000)), 2.0);
  watch.Started(a);  // b is the oldest now
  EXPECT_DOUBLE_EQ(watch.OldestWaitSeconds(t0 + milliseconds(2000)), 0.5);
  watch.Started(b);
  EXPECT_EQ(watch.OldestWaitSeconds(t0 + milliseconds(9000)), 0.0);
  watch.Started(12345);  // unknown: ignored
  EXPECT_EQ(watch.OldestWaitSeconds(t0), 0.0);
}

TEST(Liveness, DeadOnlyForAFailedLoadedEngineOutsideADrain) {
  EngineStats stats;
  stats.alive = true;
  EXPECT_TRUE(JudgeLiveness(nullptr, false, 0, 60).alive);  // loading
  EXPECT_TRUE(JudgeLiveness(&stats, false, 0, 60).alive);
  stats.alive = false;
  Liveness l = JudgeLiveness(&stats, false, 0, 60);
  EXPECT_FALSE(l.alive);
  EXPECT_EQ(l.status, "dead");
  EXPECT_TRUE(JudgeLiveness(&stats, /*draining=*/true, 0, 60).alive);  // a drain's stop
  stats.draining = true;
  EXPECT_TRUE(JudgeLiveness(&stats, false, 0, 60).alive);
}

TEST(Liveness, StalledPastTheTimeoutNotBefore) {
  EngineStats stats;
  stats.alive = true;
  stats.busy_seconds = 59.9;
  EXPECT_TRUE(JudgeLiveness(&stats, false, 59.9, 60).alive);
  stats.busy_seconds = 61.3;
  Liveness l = JudgeLiveness(&stats, false, 0, 60);
  EXPECT_FALSE(l.alive);
  EXPECT_EQ(l.status, "stalled");
  EXPECT_EQ(l.reason, "the engine has been in one step for 61.3 s (--stall-timeout 60.0)");
  EXPECT_FALSE(JudgeLiveness(&stats, /*draining=*/true, 0, 60).alive);  // wedged while draining
  EXPECT_TRUE(JudgeLiveness(&stats, false, 0, /*stall_timeout_s=*/0).alive);  // off
  stats.busy_seconds = 0;
  l = JudgeLiveness(&stats, false, 75, 60);
  EXPECT_FALSE(l.alive);
  EXPECT_EQ(l.reason,
            "a request has waited 75.0 s for an HTTP worker thread (--stall-timeout 60.0)");
  // While loading the pool still counts (tokenize/detokenize wait there too).
  EXPECT_FALSE(JudgeLiveness(nullptr, false, 75, 60).alive);
}

}  // namespace
}  // namespace tq::guard
