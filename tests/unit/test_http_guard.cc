// The pre-body HTTP guard (server/guard/http_guard.h) and API keys
// (api_keys.h) as plain functions: which requests each check answers, with
// which status, reason and headers; keys from flags, the environment and a
// file; the Bearer scheme. The same checks on a real daemon:
// tests/integration/auth.test.mjs, browser.test.mjs, limits.test.mjs.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "engine/common/error.h"
#include "server/guard/http_guard.h"
#include "tests/unit/temp_dir_test.h"

namespace tq::guard {
namespace {

struct Head {
  std::string method = "POST";
  std::string path = "/v1/completions";
  std::map<std::string, std::string> headers = {
      {"content-type", "application/json"}, {"content-length", "10"}, {"host", "localhost:8000"}};
  int version = 11;
  size_t extra_hosts = 0;  // Host lines beyond the one in `headers`
  std::string authority;   // an absolute-form target's
  RequestHead view() const {
    return {method,
            path,
            [this](std::string_view name) -> std::optional<std::string> {
              std::string key(name);
              for (char& c : key)
                c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
              const auto it = headers.find(key);
              if (it == headers.end()) return std::nullopt;
              return it->second;
            },
            version,
            headers.count("host") + extra_hosts,
            authority};
  }
};

std::optional<HttpRefusal> Check(const HttpGuardOptions& options, const Head& head) {
  return CheckRequestHead(options, head.view());
}

using ApiKeysFile = tq::testing::TempDirTest;

TEST_F(ApiKeysFile, BearerKeysFromFlagsEnvAndFile) {
  const std::string file = Path("key");
  std::ofstream(file) << "from-file\r\n\n";
  const ApiKeys keys = ApiKeys::Load({"k1", "k2"}, "from-env", file);
  EXPECT_EQ(keys.size(), 4u);
  for (const char* key : {"k1", "k2", "from-env", "from-file"}) {
    EXPECT_TRUE(keys.Accepts("Bearer " + std::string(key))) << key;
  }
  for (const char* bad : {"k1", "Bearer k", "Bearer k11", "bearer k1", "Basic k1", "Bearer ", ""}) {
    EXPECT_FALSE(keys.Accepts(std::string_view(bad))) << bad;
  }
  EXPECT_FALSE(keys.Accepts(std::nullopt));
  EXPECT_FALSE(ApiKeys().enabled());
  EXPECT_THROW(ApiKeys::Load({""}, "", ""), Error);
  EXPECT_THROW(ApiKeys::Load({}, "", Path("missing")), Error);
  std::ofstream(Path("empty")) << "\n";
  EXPECT_THROW(ApiKeys::Load({}, "", Path("empty")), Error);
}

TEST(HttpGuard, ApiKeyGuardsTheApiRoutesOnly) {
  HttpGuardOptions options;
  options.api_keys = ApiKeys::Load({"secret"}, "", "");
  Head head;
  auto r = Check(options, head);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->code, "invalid_api_key");
  EXPECT_EQ(r->reason, "unauthorized");
  ASSERT_EQ(r->headers.size(), 1u);
  EXPECT_EQ(r->headers[0].first, "WWW-Authenticate");
  head.headers["authorization"] = "Bearer secret";
  EXPECT_FALSE(Check(options, head));
  head.headers["authorization"] = "Bearer secreT";
  EXPECT_EQ(Check(options, head)->status, 401);
  head.headers.erase("authorization");
  for (const char* path :
       {"/v1/models", "/v1", "/tokenize", "/detokenize", "/v1/chat/completions"}) {
    head.path = path;
    EXPECT_TRUE(NeedsApiKey(path)) << path;
    EXPECT_EQ(Check(options, head)->status, 401) << path;
  }
  head.method = "GET";
  for (const char* path : {"/health", "/livez", "/metrics", "/version", "/v1x", "/nope"}) {
    head.path = path;
    EXPECT_FALSE(NeedsApiKey(path)) << path;
    EXPECT_FALSE(Check(options, head)) << path;
  }
}

TEST(HttpGuard, PostsMustBeJson) {
  const HttpGuardOptions options;
  Head head;
  EXPECT_FALSE(Check(options, head));
  head.headers["content-type"] = "Application/JSON; charset=utf-8";
  EXPECT_FALSE(Check(options, head));
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                           "application/jsonx", ""}) {
    head.headers["content-type"] = type;
    const auto r = Check(options, head);
    ASSERT_TRUE(r) << type;
    EXPECT_EQ(r->status, 415);
    EXPECT_EQ(r->reason, "content_type");
  }
  head.headers.erase("content-type");
  EXPECT_EQ(Check(options, head)->status, 415);
  head.method = "GET";
  EXPECT_FALSE(Check(options, head));
}

TEST(HttpGuard, BodySizeBeforeTheBody) {
  HttpGuardOptions options;
  options.max_body_bytes = 100;
  Head head;
  head.headers["content-length"] = "100";
  EXPECT_FALSE(Check(options, head));
  head.headers["content-length"] = "101";
  EXPECT_EQ(Check(options, head)->reason, "body_too_large");
  head.headers["content-length"] = "99999999999999999999999";
  EXPECT_EQ(Check(options, head)->status, 413);
  head.headers["content-length"] = "12x";
  EXPECT_EQ(Check(options, head)->reason, "bad_content_length");
  head.headers["content-length"] = "10";
  head.headers["transfer-encoding"] = "chunked";
  EXPECT_EQ(Check(options, head)->status, 411);
}

TEST(HttpGuard, CorsIsOffByDefaultAndFollowsAllowedOrigins) {
  HttpGuardOptions options;
  Head head;
  head.headers["origin"] = "https://evil.example";
  EXPECT_FALSE(Check(options, head));  // no policy: no check, no headers
  EXPECT_TRUE(ResponseHeaders(options, head.view()).empty());
  options.allowed_origins = {"https://app.example"};
  auto r = Check(options, head);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(r->reason, "origin");
  head.headers["origin"] = "https://app.example";
  EXPECT_FALSE(Check(options, head));
  const auto headers = ResponseHeaders(options, head.view());
  ASSERT_EQ(headers.size(), 2u);
  EXPECT_EQ(headers[0].second, "https://app.example");
  // A preflight is answered before the key check (browsers send no credentials there).
  options.api_keys = ApiKeys::Load({"secret"}, "", "");
  head.method = "OPTIONS";
  head.headers["access-control-request-method"] = "POST";
  r = Check(options, head);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->reason, "");
  options.allowed_origins = {"*"};
  head.headers["origin"] = "http://any.example";
  EXPECT_EQ(Check(options, head)->status, 204);
}

TEST(HttpGuard, AllowedHosts) {
  HttpGuardOptions options;
  options.allowed_hosts = {"localhost", "127.0.0.1", "[::1]"};
  Head head;
  for (const char* host : {"localhost:8000", "LOCALHOST", "127.0.0.1:1", "[::1]:8000"}) {
    head.headers["host"] = host;
    EXPECT_FALSE(Check(options, head)) << host;
  }
  for (const char* host : {"evil.example", "evil.example:8000", "localhost.evil.example", ""}) {
    head.headers["host"] = host;
    const auto r = Check(options, head);
    ASSERT_TRUE(r) << host;
    EXPECT_EQ(r->status, 403);
    EXPECT_EQ(r->reason, "host");
  }
}

// RFC 9112 section 3.2: "A server MUST respond with a 400 (Bad Request)
// status code to any HTTP/1.1 request message that lacks a Host header field
// and to any request message that contains more than one Host header field
// line or a Host header field with an invalid field value" -- before and
// whatever --allowed-hosts says (a second Host must not pass it by the first).
TEST(HttpGuard, ExactlyOneValidHost) {
  for (const bool restricted : {false, true}) {
    HttpGuardOptions options;
    if (restricted) options.allowed_hosts = {"localhost"};
    Head head;
    EXPECT_FALSE(Check(options, head));
    head.extra_hosts = 1;
    auto r = Check(options, head);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_EQ(r->reason, "host_header");
    EXPECT_NE(r->message.find("2 Host header fields"), std::string::npos) << r->message;
    head.extra_hosts = 0;
    head.headers.erase("host");
    r = Check(options, head);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_EQ(r->reason, "host_header");
    head.version = 10;  // HTTP/1.0 has no Host requirement
    r = Check(options, head);
    if (restricted) {
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 403);  // no host is no allowed host
    } else {
      EXPECT_FALSE(r);
    }
    head.version = 11;
    for (const char* bad : {"local host", "a/b", "a:80x", "[::1", "[::1]x", "a@b", "a:b:c"}) {
      head.headers["host"] = bad;
      r = Check(options, head);
      ASSERT_TRUE(r) << bad;
      EXPECT_EQ(r->status, 400) << bad;
      EXPECT_EQ(r->reason, "host_header") << bad;
    }
    for (const char* good : {"localhost", "localhost:8000", "[::1]:8000", "[fe80::1%25eth0]"}) {
      head.headers["host"] = good;
      r = Check(options, head);
      EXPECT_TRUE(!r || r->status == 403) << good;
    }
  }
}

// RFC 9112 section 3.2.2: an origin server receiving the absolute form "MUST
// ignore the received Host header field (if any) and instead use the host
// information of the request-target".
TEST(HttpGuard, AbsoluteFormAuthorityReplacesHost) {
  HttpGuardOptions options;
  options.allowed_hosts = {"localhost"};
  Head head;
  head.headers["host"] = "evil.example";
  head.authority = "localhost:8000";
  EXPECT_FALSE(Check(options, head));
  head.headers["host"] = "localhost";
  head.authority = "evil.example:8000";
  const auto r = Check(options, head);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(r->reason, "host");
}

TEST(RequestTarget, OriginAndAbsoluteForms) {
  struct Case {
    const char* target;
    const char* path;
    const char* authority;
    bool valid;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"/v1/models?x=1", "/v1/models", "", true},
           {"/health", "/health", "", true},
           {"http://127.0.0.1:8000/health", "/health", "127.0.0.1:8000", true},
           {"HTTPS://Example.COM/v1/models?q", "/v1/models", "Example.COM", true},
           {"http://[::1]:80", "/", "[::1]:80", true},
           {"http://host?q=1", "/", "host", true},
           {"http:///health", "/health", "", false},
           {"http://user@host/health", "/health", "user@host", false},
           {"ftp://host/health", "ftp://host/health", "", true},
           {"*", "*", "", true},
       }) {
    const RequestTarget t = ParseRequestTarget(c.target);
    EXPECT_EQ(t.path, c.path) << c.target;
    EXPECT_EQ(t.authority, c.authority) << c.target;
    EXPECT_EQ(t.valid, c.valid) << c.target;
  }
}

}  // namespace
}  // namespace tq::guard
