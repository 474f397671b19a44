// A short gRPC load test: 64 concurrent Generate streams (greedy and seeded
// sampling, different prompts and lengths) give exactly what the same
// requests give one at a time, and leave the engine empty.
#include <gtest/gtest.h>

#include <thread>

#include "grpc_test_util.h"
#include "watchdog.h"

namespace tq::testing {
namespace {

std::vector<pb::GenerateRequest> Requests() {
  const char* prompts[] = {"Once upon a time", "The dog",      "Lily saw a bird",  "Tom was sad",
                           "One day",          "The big tree", "A girl named Sue", "They played"};
  std::vector<pb::GenerateRequest> requests;
  for (int i = 0; i < 64; ++i) {
    pb::GenerateRequest r;
    r.set_text(prompts[i % 8]);
    pb::SamplingParameters* s = r.mutable_sampling();
    s->set_max_tokens(8 + (i * 7) % 57);
    if (i % 2 == 0) {
      s->set_temperature(0);
    } else {
      s->set_temperature(0.8);
      s->set_top_k(40);
      s->set_seed(1000 + i);
    }
    if (i % 5 == 0) s->add_stop(".");
    requests.push_back(r);
  }
  return requests;
}

TEST(GrpcConcurrency, SixtyFourConcurrentStreamsEqualTheSameRequestsAlone) {
  Watchdog watchdog("SixtyFourStreams", std::chrono::seconds(240));
  TestServer s;
  const std::vector<pb::GenerateRequest> requests = Requests();
  std::vector<Streamed> alone;
  for (const auto& r : requests) alone.push_back(RunGenerate(*s.stub, r));

  std::vector<Streamed> together(requests.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < requests.size(); ++i) {
    clients.emplace_back([&, i] { together[i] = RunGenerate(*s.stub, requests[i]); });
  }
  for (std::thread& t : clients) t.join();

  int stopped_by_string = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(alone[i].status.ok()) << i << ": " << alone[i].status.error_message();
    ASSERT_TRUE(together[i].status.ok()) << i << ": " << together[i].status.error_message();
    EXPECT_FALSE(alone[i].token_ids.empty()) << i;
    EXPECT_EQ(together[i].token_ids, alone[i].token_ids) << "request " << i;
    EXPECT_EQ(together[i].text, alone[i].text) << "request " << i;
    EXPECT_EQ(together[i].last().finish_reason(), alone[i].last().finish_reason()) << i;
    EXPECT_EQ(together[i].last().usage().completion_tokens(),
              alone[i].last().usage().completion_tokens())
        << i;
    if (together[i].last().stop_reason_case() == pb::GenerateResponse::kStopString) {
      ++stopped_by_string;
    }
  }
  EXPECT_GT(stopped_by_string, 0) << "the stop-string path was not exercised";
  EXPECT_EQ(GrpcRequests(s, "Generate", "OK"), 128);
  const EngineStats idle = WaitEngineIdle(*s.engine);
  EXPECT_EQ(idle.num_running, 0);
  EXPECT_EQ(idle.kv_blocks_used, 0);
}

}  // namespace
}  // namespace tq::testing
