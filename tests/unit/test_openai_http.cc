// The HTTP routes on a real socket (cpp-httplib as the client): status codes, the
// OpenAI error JSON of 404/405/413/503, /health while loading, /version,
// /metrics content type and request counting. The engine is not loaded here
// (the integration tests drive a loaded daemon with the `openai` client).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/runtime/engine.h"
#include "engine/runtime/offline_engine.h"
#include "kernels/cpu/cpu_isa.h"
#include "server/http/http_server.h"

namespace tq::http {
namespace {

using nlohmann::json;

class HttpRoutes : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.served_model_name = "stories260K";
    options.max_connections = 8;
    options.log_requests = false;
    options.max_body_bytes = 4096;
    server_ = std::make_unique<HttpServer>(options, &metrics_);
    port_ = server_->Bind();
    ASSERT_GT(port_, 0);
    server_->Start();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(10, 0);
  }
  void TearDown() override { server_->Stop(); }

  // Status and parsed body of an OpenAI error response.
  static json ErrorBody(const httplib::Result& res) {
    EXPECT_TRUE(res);
    if (!res) return {};
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    json body = json::parse(res->body);
    EXPECT_TRUE(body.contains("error"));
    for (const char* key : {"message", "type", "param", "code"}) {
      EXPECT_TRUE(body["error"].contains(key)) << key;
    }
    return body["error"];
  }

  ServerMetrics metrics_;
  std::unique_ptr<Engine> engine_;  // outlives server_ (declared before it)
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
  int port_ = 0;
};

TEST_F(HttpRoutes, HealthIs503WhileLoading) {
  auto res = client_->Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(json::parse(res->body), (json{{"status", "loading"}}));
}

TEST_F(HttpRoutes, LivezIs200WhileLoading) {
  auto res = client_->Get("/livez");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body), (json{{"status", "alive"}}));
}

// Readiness and liveness around an engine that stops without a drain (what a
// crashed engine loop looks like from the front end): /health turns 503
// "unhealthy" and /livez 503 "dead", so that Kubernetes restarts the pod
// rather than only taking it out of the Service.
TEST_F(HttpRoutes, LivezIs503OnlyOnceTheEngineLoopIsGone) {
  EngineOptions options;
  options.model_dir = TQ_MODEL_DIR;
  options.num_threads = 1;
  options.kv_cache_memory = 4 << 20;
  engine_ = std::make_unique<Engine>(options);
  Engine& engine = *engine_;
  server_->state().SetEngine(&engine);
  auto health = client_->Get("/health");
  auto livez = client_->Get("/livez");
  ASSERT_TRUE(health && livez);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(livez->status, 200);

  engine.Shutdown();
  health = client_->Get("/health");
  livez = client_->Get("/livez");
  ASSERT_TRUE(health && livez);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(json::parse(health->body), (json{{"status", "unhealthy"}}));
  EXPECT_EQ(livez->status, 503);
  EXPECT_EQ(json::parse(livez->body), (json{{"status", "dead"}}));
}

TEST_F(HttpRoutes, ApiCallsAre503WhileLoading) {
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize"}) {
    auto res = client_->Post(path, R"({"prompt": "x"})", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 503) << path;
    const json error = ErrorBody(res);
    EXPECT_EQ(error["type"], "server_error");
  }
  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 503);
}

TEST_F(HttpRoutes, UnknownRouteIs404AndWrongMethod405) {
  auto missing = client_->Get("/v1/engines");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(ErrorBody(missing)["type"], "invalid_request_error");

  auto wrong = client_->Get("/v1/completions");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->get_header_value("Allow"), "POST");
  ErrorBody(wrong);

  auto post_health = client_->Post("/health", "{}", "application/json");
  ASSERT_TRUE(post_health);
  EXPECT_EQ(post_health->status, 405);
  EXPECT_EQ(post_health->get_header_value("Allow"), "GET");
}

TEST_F(HttpRoutes, OversizedBodyIs413Json) {
  auto res = client_->Post("/v1/completions", std::string(8192, ' '), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  ErrorBody(res);
}

// A POST without Content-Length is refused before any route runs;
// the error says what is missing (it used to be "HTTP error 400").
TEST_F(HttpRoutes, PostWithoutLengthIs400Json) {
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(send(sock, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = recv(sock, buf, sizeof(buf), 0)) > 0;) reply.append(buf, n);
  close(sock);
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
  const json body = json::parse(reply.substr(reply.find("\r\n\r\n") + 4));
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["message"],
            "the request has no body: send a JSON body with a Content-Length");
}

TEST_F(HttpRoutes, VersionAndMetrics) {
  auto version = client_->Get("/version");
  ASSERT_TRUE(version);
  EXPECT_EQ(version->status, 200);
  // The CMake project VERSION, and the level the kernels of this process run.
  EXPECT_EQ(json::parse(version->body),
            (json{{"version", "0.1.0"},
                  {"cpu_isa", kernels::cpu::CpuIsaName(kernels::cpu::ActiveCpuIsa())}}));

  client_->Get("/nope");
  // A response is counted right after it was written (httplib's logger), so
  // the count may trail the client by a moment: scrape until it shows.
  const std::string version_series =
      R"(tqserve_api_requests_total{code="200",protocol="http",route="/version"} 1)";
  const std::string other_series = R"(code="404",protocol="http",route="other"} 1)";
  std::string body;
  // Up to 10 s: on a loaded 2-core machine 1 s was once not enough.
  auto counted = [&] {
    return body.find(other_series) != std::string::npos &&
           body.find(version_series) != std::string::npos;
  };
  for (int i = 0; i < 2000 && !counted(); ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto metrics = client_->Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_EQ(metrics->status, 200);
    // Prometheus text exposition format 0.0.4.
    EXPECT_EQ(metrics->get_header_value("Content-Type"),
              "text/plain; version=0.0.4; charset=utf-8");
    body = metrics->body;
  }
  // The earlier responses were counted, unknown paths under route "other".
  EXPECT_NE(body.find(version_series), std::string::npos) << body;
  EXPECT_NE(body.find(other_series), std::string::npos) << body;
}

TEST_F(HttpRoutes, BindingATakenPortFails) {
  HttpOptions options;
  options.host = "127.0.0.1";
  options.port = port_;
  HttpServer second(options, &metrics_);
  EXPECT_THROW(second.Bind(), std::exception);
}

}  // namespace
}  // namespace tq::http
