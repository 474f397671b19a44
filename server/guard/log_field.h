// A bound on the log fields a client controls (issue 41): the `user` field,
// the request path, error messages that quote request text. A 1 MB `user`
// must not make a 1 MB log line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tq::guard {

/// The most bytes of one request-derived value a log line carries.
inline constexpr size_t kMaxLogFieldBytes = 256;

/// `value` itself when it has at most `max_bytes` bytes; otherwise its first
/// `max_bytes` bytes (cut back to a UTF-8 character boundary) followed by
/// " ... (N bytes)", N the original length. Thread-safe, never throws beyond
/// std::bad_alloc.
std::string LogField(std::string_view value, size_t max_bytes = kMaxLogFieldBytes);

}  // namespace tq::guard
