// Pre-body HTTP request checks (see http_guard.h).
#include "server/guard/http_guard.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace tq::guard {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The host name of a Host header: "[::1]:8000" -> "[::1]", "a.b:80" -> "a.b".
std::string HostName(std::string_view host) {
  host = Trim(host);
  if (!host.empty() && host.front() == '[') {
    const size_t end = host.find(']');
    return Lower(end == std::string_view::npos ? host : host.substr(0, end + 1));
  }
  return Lower(host.substr(0, host.find(':')));
}

bool IsDigits(std::string_view s) {
  return std::ranges::all_of(s, [](char c) { return c >= '0' && c <= '9'; });
}

// RFC 3986 unreserved / sub-delims / '%' (pct-encoded): the reg-name bytes.
bool IsRegNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
         std::string_view("-._~!$&'()*+,;=%").find(c) != std::string_view::npos;
}

// Host = uri-host [ ":" port ] (RFC 9110 section 7.2); empty is allowed
// (a target URI without an authority, RFC 9112 section 3.2).
bool ValidHostValue(std::string_view host) {
  std::string_view port;
  if (!host.empty() && host.front() == '[') {  // IP-literal
    const size_t end = host.find(']');
    if (end == std::string_view::npos) return false;
    const std::string_view inside = host.substr(1, end - 1);
    if (inside.empty() ||
        !std::ranges::all_of(inside, [](char c) { return c == ':' || IsRegNameChar(c); })) {
      return false;
    }
    const std::string_view rest = host.substr(end + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    port = rest.empty() ? rest : rest.substr(1);
  } else {
    const size_t colon = host.find(':');
    if (!std::ranges::all_of(host.substr(0, colon), IsRegNameChar)) return false;
    if (colon != std::string_view::npos) port = host.substr(colon + 1);
  }
  return IsDigits(port);
}

std::optional<HttpRefusal> CheckHostHeader(const RequestHead& head) {
  const auto refuse = [](std::string message) {
    return HttpRefusal{400, std::move(message), "", "host_header", {}};
  };
  if (head.host_fields > 1) {
    return refuse("the request has " + std::to_string(head.host_fields) +
                  " Host header fields; exactly one is allowed (RFC 9112 section 3.2)");
  }
  if (head.host_fields == 0) {
    if (head.version >= 11) {
      return refuse("an HTTP/1.1 request needs a Host header (RFC 9112 section 3.2)");
    }
    return std::nullopt;
  }
  if (!ValidHostValue(head.header("Host").value_or(""))) {
    return refuse("the Host header is not a host[:port] (RFC 9112 section 3.2)");
  }
  return std::nullopt;
}

bool OriginAllowed(const HttpGuardOptions& options, const std::string& origin) {
  return std::ranges::any_of(options.allowed_origins,
                             [&](const std::string& a) { return a == "*" || a == origin; });
}

// Media type of a Content-Type without its parameters, lower-cased.
std::string MediaType(std::string_view content_type) {
  return Lower(Trim(content_type.substr(0, content_type.find(';'))));
}

std::optional<HttpRefusal> CheckBodySize(const HttpGuardOptions& options, const RequestHead& head) {
  if (head.header("Transfer-Encoding")) {
    return HttpRefusal{411,
                       "chunked request bodies are not accepted: send a Content-Length",
                       "length_required",
                       "body_chunked",
                       {}};
  }
  const std::optional<std::string> length = head.header("Content-Length");
  if (!length) return std::nullopt;  // no body (a POST without one is the route's 400)
  uint64_t bytes = 0;
  const char* end = length->data() + length->size();
  const auto [ptr, ec] = std::from_chars(length->data(), end, bytes);
  if (ec == std::errc::result_out_of_range) bytes = UINT64_MAX;
  if ((ec != std::errc() && ec != std::errc::result_out_of_range) || ptr != end) {
    return HttpRefusal{400, "Content-Length is not a number", "", "bad_content_length", {}};
  }
  if (bytes > options.max_body_bytes) {
    return HttpRefusal{413,
                       "request body too large: " + *length + " bytes, the limit is " +
                           std::to_string(options.max_body_bytes) + " (--max-body-bytes)",
                       "",
                       "body_too_large",
                       {}};
  }
  return std::nullopt;
}

std::optional<HttpRefusal> CheckBrowserPolicy(const HttpGuardOptions& options,
                                              const RequestHead& head) {
  if (!options.allowed_hosts.empty()) {
    // The absolute form's authority replaces Host (RFC 9112 section 3.2.2).
    const std::string host =
        HostName(head.authority.empty() ? std::string_view(head.header("Host").value_or(""))
                                        : head.authority);
    if (std::find(options.allowed_hosts.begin(), options.allowed_hosts.end(), host) ==
        options.allowed_hosts.end()) {
      return HttpRefusal{
          403, "Host '" + host + "' is not allowed (--allowed-hosts)", "", "host", {}};
    }
  }
  if (options.allowed_origins.empty()) return std::nullopt;
  const std::optional<std::string> origin = head.header("Origin");
  if (!origin) return std::nullopt;  // not a cross-origin browser request
  if (!OriginAllowed(options, *origin)) {
    return HttpRefusal{
        403, "Origin '" + *origin + "' is not allowed (--allowed-origins)", "", "origin", {}};
  }
  if (head.method == "OPTIONS" && head.header("Access-Control-Request-Method")) {
    Headers headers;  // Access-Control-Allow-Origin: ResponseHeaders, on every answer
    headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
    headers.emplace_back("Access-Control-Max-Age", "600");
    return HttpRefusal{204, "", "", "", std::move(headers)};
  }
  return std::nullopt;
}

}  // namespace

RequestTarget ParseRequestTarget(std::string_view target) {
  RequestTarget out;
  const size_t scheme_end = target.find("://");
  const std::string scheme = Lower(target.substr(0, scheme_end));
  if (scheme_end == std::string_view::npos || (scheme != "http" && scheme != "https")) {
    out.path = std::string(target.substr(0, target.find('?')));
    return out;
  }
  const std::string_view rest = target.substr(scheme_end + 3);
  const size_t authority_end = rest.find_first_of("/?#");
  out.authority = std::string(rest.substr(0, authority_end));
  // http URIs have a host and no userinfo (RFC 9110 sections 4.2.1, 4.2.4).
  out.valid = !out.authority.empty() && out.authority.find('@') == std::string::npos &&
              ValidHostValue(out.authority);
  std::string_view path =
      authority_end == std::string_view::npos ? std::string_view() : rest.substr(authority_end);
  path = path.substr(0, path.find_first_of("?#"));
  out.path = path.empty() ? "/" : std::string(path);
  return out;
}

bool NeedsApiKey(std::string_view path) {
  return path == "/v1" || path.starts_with("/v1/") || path == "/tokenize" || path == "/detokenize";
}

std::optional<HttpRefusal> CheckRequestHead(const HttpGuardOptions& options,
                                            const RequestHead& head) {
  if (auto refusal = CheckHostHeader(head)) return refusal;
  if (auto refusal = CheckBrowserPolicy(options, head)) return refusal;
  if (options.api_keys.enabled() && NeedsApiKey(head.path)) {
    const std::optional<std::string> authorization = head.header("Authorization");
    if (!options.api_keys.Accepts(authorization)) {
      // OpenAI's wording and code for a wrong or missing key.
      return HttpRefusal{401,
                         authorization ? "Incorrect API key provided."
                                       : "You didn't provide an API key. You need to provide "
                                         "your API key in an Authorization header using Bearer "
                                         "auth (i.e. Authorization: Bearer YOUR_KEY).",
                         "invalid_api_key",
                         "unauthorized",
                         {{"WWW-Authenticate", "Bearer"}}};
    }
  }
  if (auto refusal = CheckBodySize(options, head)) return refusal;
  // A POST with a body (one without gets the route's "no body" 400).
  if (head.method == "POST" && head.header("Content-Length")) {
    const std::optional<std::string> type = head.header("Content-Type");
    if (!type || MediaType(*type) != "application/json") {
      return HttpRefusal{415,
                         "Content-Type must be application/json, got " +
                             (type ? "'" + *type + "'" : std::string("none")),
                         "unsupported_media_type",
                         "content_type",
                         {}};
    }
  }
  return std::nullopt;
}

Headers ResponseHeaders(const HttpGuardOptions& options, const RequestHead& head) {
  if (options.allowed_origins.empty()) return {};
  const std::optional<std::string> origin = head.header("Origin");
  if (!origin || !OriginAllowed(options, *origin)) return {};
  return {{"Access-Control-Allow-Origin", *origin}, {"Vary", "Origin"}};
}

}  // namespace tq::guard
