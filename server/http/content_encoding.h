// Request bodies with Content-Encoding gzip or deflate (RFC 9110 8.4.1),
// inflated with zlib.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tq::http {

/// The outcome of decoding a request body.
enum class DecodeResult { kOk, kUnsupported, kCorrupt, kTooLarge };

/// Replaces `*body` by its decoded bytes for `encoding` ("" or "identity":
/// unchanged; "gzip"/"x-gzip"; "deflate", zlib or raw). kTooLarge when the
/// decoded body would exceed `max_bytes` (decoding stops there: a small
/// compressed body cannot expand without bound). kUnsupported for any other
/// coding (415), kCorrupt for data zlib rejects (400).
DecodeResult DecodeContentEncoding(std::string_view encoding, size_t max_bytes, std::string* body);

}  // namespace tq::http
