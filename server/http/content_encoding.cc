// Request body decoding (see content_encoding.h).
#include "server/http/content_encoding.h"

#include <zlib.h>

#include <boost/beast/core/string.hpp>

namespace tq::http {
namespace {

// Inflates with `window_bits` (zlib: 15, gzip: 31, raw deflate: -15).
DecodeResult Inflate(int window_bits, size_t max_bytes, const std::string& in, std::string* out) {
  z_stream z{};
  if (inflateInit2(&z, window_bits) != Z_OK) return DecodeResult::kCorrupt;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  out->clear();
  char chunk[16384];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(chunk);
    z.avail_out = sizeof(chunk);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    const size_t n = sizeof(chunk) - z.avail_out;
    if (out->size() + n > max_bytes) {
      inflateEnd(&z);
      return DecodeResult::kTooLarge;
    }
    out->append(chunk, n);
    if (rc == Z_OK && n == 0 && z.avail_in == 0) break;  // truncated input
  }
  inflateEnd(&z);
  return rc == Z_STREAM_END ? DecodeResult::kOk : DecodeResult::kCorrupt;
}

}  // namespace

DecodeResult DecodeContentEncoding(std::string_view encoding, size_t max_bytes, std::string* body) {
  using boost::beast::iequals;
  const boost::beast::string_view e(encoding.data(), encoding.size());
  if (e.empty() || iequals(e, "identity")) return DecodeResult::kOk;
  std::string out;
  DecodeResult r = DecodeResult::kUnsupported;
  if (iequals(e, "gzip") || iequals(e, "x-gzip")) {
    r = Inflate(15 + 16, max_bytes, *body, &out);
  } else if (iequals(e, "deflate")) {
    // RFC 9110 says zlib format; some clients send raw deflate.
    r = Inflate(15, max_bytes, *body, &out);
    if (r == DecodeResult::kCorrupt) r = Inflate(-15, max_bytes, *body, &out);
  }
  if (r == DecodeResult::kOk) *body = std::move(out);
  return r;
}

}  // namespace tq::http
