// How Generate streams end other than normally, through a real gRPC client:
// client cancels, 50 ms deadlines and a client process killed mid-stream all
// abort the engine request (no running sequence, no used KV block
// afterwards); loading, draining and shutdown; the stream limit.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "engine/common/error.h"
#include "grpc_test_util.h"
#include "sanitizer_build.h"
#include "watchdog.h"

extern char** environ;

namespace tq::testing {
namespace {

using std::chrono::milliseconds;

// A long greedy request: runs for many engine steps unless it is aborted.
pb::GenerateRequest LongRequest() {
  pb::GenerateRequest r = GreedyRequest("Once upon a time", 500);
  r.mutable_sampling()->set_ignore_eos(true);
  return r;
}

// Waits until `pred()` or `limit`; returns pred().
template <typename Pred>
bool WaitUntil(Pred pred, milliseconds limit = milliseconds(2000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  return pred();
}

void ExpectEngineIdle(const Engine& engine) {
  const EngineStats s = WaitEngineIdle(engine, milliseconds(1000));
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_waiting, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

// Runs `body(i)` for i in [0, n) on `threads` threads.
template <typename Body>
void Parallel(int n, int threads, Body body) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) body(i);
    });
  }
  for (std::thread& t : pool) t.join();
}

TEST(GrpcLifecycle, HundredClientCancelsLeaveNothingRunning) {
  Watchdog watchdog("HundredClientCancels", std::chrono::seconds(120));
  TestServer s;
  std::atomic<int> cancelled{0}, started{0};
  Parallel(100, 10, [&](int) {
    grpc::ClientContext context;
    auto reader = s.stub->Generate(&context, LongRequest());
    pb::GenerateResponse m;
    if (reader->Read(&m)) ++started;  // mid-generation: tokens are flowing
    context.TryCancel();
    while (reader->Read(&m)) {
    }
    if (reader->Finish().error_code() == grpc::StatusCode::CANCELLED) ++cancelled;
  });
  EXPECT_EQ(started.load(), 100);
  EXPECT_EQ(cancelled.load(), 100);
  ExpectEngineIdle(*s.engine);
  // Every handler saw its call cancelled (and aborted the engine request).
  EXPECT_TRUE(WaitUntil([&] { return GrpcRequests(s, "Generate", "CANCELLED") == 100; }))
      << GrpcRequests(s, "Generate", "CANCELLED");
  EXPECT_EQ(s.server->service().in_flight(), 0);
}

TEST(GrpcLifecycle, HundredDeadlinesOf50msLeaveNothingRunning) {
  Watchdog watchdog("HundredDeadlines", std::chrono::seconds(120));
  TestServer s;
  // Under TSan no stream reached its first token within 50 ms (2026-12-05);
  // the 500-token requests still outlast 250 ms there.
  const milliseconds deadline = kSanitizerBuild ? milliseconds(250) : milliseconds(50);
  std::atomic<int> expired{0}, got_tokens{0};
  Parallel(100, 10, [&](int) {
    const Streamed got = RunGenerate(*s.stub, LongRequest(), deadline);
    if (got.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) ++expired;
    if (!got.token_ids.empty()) ++got_tokens;
  });
  EXPECT_EQ(expired.load(), 100);
  EXPECT_GT(got_tokens.load(), 0) << "no stream got as far as generating";
  ExpectEngineIdle(*s.engine);
  EXPECT_TRUE(WaitUntil([&] { return s.server->service().in_flight() == 0; }));
}

// Disabled because it is not a test on its own: KilledClientProcessAbortsTheRequest
// runs it as a child process (--gtest_also_run_disabled_tests). It opens a
// stream, reports on stdout once tokens flow, then waits to be killed.
TEST(GrpcClientProcess, DISABLED_HoldStreamOpen) {
  const char* port = std::getenv("TQ_GRPC_TEST_PORT");
  ASSERT_NE(port, nullptr);
  auto channel =
      grpc::CreateChannel(std::string("127.0.0.1:") + port, grpc::InsecureChannelCredentials());
  auto stub = pb::GenerationService::NewStub(channel);
  grpc::ClientContext context;
  auto reader = stub->Generate(&context, LongRequest());
  pb::GenerateResponse m;
  ASSERT_TRUE(reader->Read(&m));
  std::printf("streaming\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

TEST(GrpcLifecycle, KilledClientProcessAbortsTheRequest) {
  Watchdog watchdog("KilledClientProcess", std::chrono::seconds(60));
  TestServer s;
  // Background streams make every engine step a batch of 17, so that the
  // child's 500 tokens take many times longer than spawning and killing it.
  constexpr int kBackground = 16;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::thread> background;
  for (int i = 0; i < kBackground; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    background.emplace_back([&s, context = contexts.back().get()] {
      auto reader = s.stub->Generate(context, LongRequest());
      pb::GenerateResponse m;
      while (reader->Read(&m)) {
      }
      reader->Finish();
    });
  }
  ASSERT_TRUE(WaitUntil([&] { return s.engine->Stats().num_running == kBackground; }));

  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  const std::string port_env = "TQ_GRPC_TEST_PORT=" + std::to_string(s.port);
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  env.push_back(const_cast<char*>(port_env.c_str()));
  env.push_back(nullptr);
  std::string self = "/proc/self/exe", filter = "--gtest_filter=GrpcClientProcess.*",
              disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), filter.data(), disabled.data(), nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, "/proc/self/exe", &actions, nullptr, argv, env.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);

  // The child's gtest output ends with our line once its stream has tokens.
  std::string seen;
  char buf[256];
  for (ssize_t n;
       seen.find("streaming\n") == std::string::npos && (n = read(out[0], buf, sizeof(buf))) > 0;) {
    seen.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  kill(child, SIGKILL);  // the connection drops without a cancel
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_NE(seen.find("streaming\n"), std::string::npos) << seen;

  // The child's handler saw the dropped call while its request was live (a
  // request that had finished would count as OK) and aborted it.
  EXPECT_TRUE(WaitUntil([&] { return GrpcRequests(s, "Generate", "CANCELLED") == 1; }))
      << "CANCELLED " << GrpcRequests(s, "Generate", "CANCELLED") << ", OK "
      << GrpcRequests(s, "Generate", "OK");
  for (auto& context : contexts) context->TryCancel();
  for (std::thread& t : background) t.join();
  ExpectEngineIdle(*s.engine);
}

TEST(GrpcLifecycle, LoadingThenServingThenDraining) {
  Watchdog watchdog("LoadingServingDraining", std::chrono::seconds(120));
  TestServer s({}, /*load=*/false);
  // Loading: NOT_SERVING, calls UNAVAILABLE.
  EXPECT_EQ(HealthCheck(*s.channel, "").second, 2);
  EXPECT_EQ(HealthCheck(*s.channel, grpc_api::kGenerationServiceName).second, 2);
  const Streamed loading = RunGenerate(*s.stub, GreedyRequest("Hi", 1));
  EXPECT_EQ(loading.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  pb::GetServerInfoResponse info;
  grpc::ClientContext c0;
  EXPECT_EQ(s.stub->GetServerInfo(&c0, {}, &info).error_code(), grpc::StatusCode::UNAVAILABLE);

  s.engine = std::make_unique<Engine>(Fp32Options(), &s.metrics);
  s.server->SetEngine(s.engine.get());
  EXPECT_TRUE(WaitUntil([&] { return HealthCheck(*s.channel, "").second == 1; }));
  EXPECT_EQ(HealthCheck(*s.channel, grpc_api::kGenerationServiceName).second, 1);

  // A stream in flight when the drain starts runs to its end.
  grpc::ClientContext context;
  pb::GenerateRequest long_request = GreedyRequest("Once upon a time", 300);
  long_request.mutable_sampling()->set_ignore_eos(true);
  auto reader = s.stub->Generate(&context, long_request);
  pb::GenerateResponse m;
  ASSERT_TRUE(reader->Read(&m));
  int32_t tokens = m.token_ids_size();
  s.server->StartDraining();
  s.engine->StartDraining();
  EXPECT_TRUE(WaitUntil([&] { return HealthCheck(*s.channel, "").second == 2; }));
  EXPECT_EQ(HealthCheck(*s.channel, grpc_api::kGenerationServiceName).second, 2);
  const Streamed refused = RunGenerate(*s.stub, GreedyRequest("Hi", 1));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  pb::TokenizeRequest tokenize;
  tokenize.set_text("Hi");
  pb::TokenizeResponse ids;
  grpc::ClientContext c1;
  EXPECT_EQ(s.stub->Tokenize(&c1, tokenize, &ids).error_code(), grpc::StatusCode::UNAVAILABLE);
  grpc::ClientContext c2;
  ASSERT_TRUE(s.stub->GetServerInfo(&c2, {}, &info).ok()) << "info answers while draining";
  EXPECT_TRUE(info.state().draining());
  EXPECT_EQ(s.server->service().in_flight(), 1);
  EXPECT_FALSE(s.server->service().WaitIdle(std::chrono::steady_clock::now()));

  while (reader->Read(&m)) tokens += m.token_ids_size();
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 300);
  EXPECT_EQ(m.finish_reason(), pb::FINISH_REASON_LENGTH);
  EXPECT_TRUE(
      s.server->service().WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(2)));
}

TEST(GrpcLifecycle, DrainTimeoutAbortEndsStreamsUnavailable) {
  Watchdog watchdog("DrainTimeoutAbort", std::chrono::seconds(60));
  TestServer s;
  grpc::ClientContext context;
  auto reader = s.stub->Generate(&context, LongRequest());
  pb::GenerateResponse m;
  ASSERT_TRUE(reader->Read(&m));
  s.server->StartDraining();
  s.engine->StartDraining();
  s.engine->AbortAll();  // what `serve` does when --shutdown-timeout passes
  while (reader->Read(&m)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  ExpectEngineIdle(*s.engine);
}

TEST(GrpcLifecycle, StopCancelsStreamsInFlight) {
  Watchdog watchdog("StopCancels", std::chrono::seconds(60));
  TestServer s;
  std::vector<std::thread> clients;
  std::atomic<int> started{0}, ended_not_ok{0};
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&] {
      grpc::ClientContext context;
      auto reader = s.stub->Generate(&context, LongRequest());
      pb::GenerateResponse m;
      if (reader->Read(&m)) ++started;
      while (reader->Read(&m)) {
      }
      if (!reader->Finish().ok()) ++ended_not_ok;
    });
  }
  ASSERT_TRUE(WaitUntil([&] { return started.load() == 4; }));
  s.server->Stop(milliseconds(0));
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ended_not_ok.load(), 4);
  ExpectEngineIdle(*s.engine);
}

TEST(GrpcLifecycle, StreamsBeyondTheLimitAreResourceExhausted) {
  Watchdog watchdog("StreamLimit", std::chrono::seconds(60));
  grpc_api::GrpcOptions options;
  options.max_concurrent_streams = 2;
  TestServer s(options);
  grpc::ClientContext c1, c2;
  auto r1 = s.stub->Generate(&c1, LongRequest());
  auto r2 = s.stub->Generate(&c2, LongRequest());
  pb::GenerateResponse m;
  ASSERT_TRUE(r1->Read(&m));
  ASSERT_TRUE(r2->Read(&m));
  const Streamed third = RunGenerate(*s.stub, GreedyRequest("Hi", 1));
  EXPECT_EQ(third.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(third.status.error_message(),
            "too many concurrent Generate streams (limit 2); retry later");
  // Unary calls are not limited by it.
  pb::TokenizeRequest tokenize;
  tokenize.set_text("Hi");
  pb::TokenizeResponse ids;
  grpc::ClientContext c3;
  EXPECT_TRUE(s.stub->Tokenize(&c3, tokenize, &ids).ok());
  c1.TryCancel();
  c2.TryCancel();
  while (r1->Read(&m)) {
  }
  while (r2->Read(&m)) {
  }
  r1->Finish();
  r2->Finish();
  ASSERT_TRUE(WaitUntil([&] { return s.server->service().in_flight() == 0; }));
  EXPECT_TRUE(RunGenerate(*s.stub, GreedyRequest("Hi", 1)).status.ok());
  ExpectEngineIdle(*s.engine);
}

TEST(GrpcLifecycle, ASecondServerOnTheSamePortFails) {
  TestServer s;
  grpc_api::GrpcOptions options;
  options.host = "127.0.0.1";
  options.port = s.port;
  grpc_api::GrpcServer second(options, nullptr);
  try {
    second.Start();
    ADD_FAILURE() << "a second server started on port " << s.port;
  } catch (const Error& e) {
    // One line with the kernel's reason (strerror(EADDRINUSE)), as for the HTTP port.
    const std::string port = std::to_string(s.port);
    EXPECT_EQ(std::string(e.what()), "--grpc-port " + port + ": cannot listen on 127.0.0.1:" +
                                         port + " (" + std::strerror(EADDRINUSE) + ")");
  }
  EXPECT_EQ(HealthCheck(*s.channel, "").second, 1) << "the first server still answers";
}

}  // namespace
}  // namespace tq::testing
