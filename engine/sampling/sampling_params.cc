// Validation of per-request sampling parameters (see sampling_params.h).
#include "engine/sampling/sampling_params.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace tq {
namespace {

// Shortest text of a double that reads back as the same value ("2", "0.5",
// "nan", "inf"), so messages show what the client sent.
std::string Num(double v) {
  std::string text;
  for (int precision = 1; precision <= 17; ++precision) {
    std::ostringstream os;
    os.precision(precision);
    os << v;
    text = os.str();
    // strtod, not std::stod: a rounded text of a value near DBL_MAX
    // ("-2e+308") overflows, where std::stod throws (found by fuzz_grpc_request).
    if (!std::isfinite(v) || std::strtod(text.c_str(), nullptr) == v) break;
  }
  return text;
}

}  // namespace

std::string SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0) {
    return "temperature must be a finite number >= 0, got " + Num(temperature);
  }
  if (!(top_p > 0.0 && top_p <= 1.0)) return "top_p must be in (0, 1], got " + Num(top_p);
  if (top_k < -1) {
    return "top_k must be -1 or 0 (disabled) or a positive integer, got " + std::to_string(top_k);
  }
  if (!(min_p >= 0.0 && min_p <= 1.0)) return "min_p must be in [0, 1], got " + Num(min_p);
  if (!std::isfinite(repetition_penalty) || !(repetition_penalty > 0.0)) {
    return "repetition_penalty must be a finite number > 0, got " + Num(repetition_penalty);
  }
  if (!(presence_penalty >= -2.0 && presence_penalty <= 2.0)) {
    return "presence_penalty must be in [-2, 2], got " + Num(presence_penalty);
  }
  if (!(frequency_penalty >= -2.0 && frequency_penalty <= 2.0)) {
    return "frequency_penalty must be in [-2, 2], got " + Num(frequency_penalty);
  }
  if (max_tokens < 0) return "max_tokens must be >= 0, got " + std::to_string(max_tokens);
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] < 0) {
      return "stop_token_ids[" + std::to_string(i) + "] must be >= 0, got " +
             std::to_string(stop_token_ids[i]);
    }
  }
  return "";
}

}  // namespace tq
