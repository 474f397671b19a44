// Bounds on client JSON text (see json_limits.h).
#include "engine/common/json_limits.h"

#include <algorithm>

namespace tq {

int64_t JsonTextDepth(std::string_view text) {
  int64_t depth = 0, deepest = 0;
  bool in_string = false, escape = false;
  for (const char c : text) {
    const int step = JsonBracketStep(c, &in_string, &escape);
    if (step > 0) deepest = std::max(deepest, ++depth);
    if (step < 0) depth = std::max<int64_t>(depth - 1, 0);
  }
  return deepest;
}

void CheckJsonText(std::string_view text, std::string_view field, size_t max_bytes,
                   int64_t max_depth) {
  if (text.size() > max_bytes) {
    throw JsonLimitError(field, "is " + std::to_string(text.size()) +
                                    " bytes of JSON text, more than the limit of " +
                                    std::to_string(max_bytes));
  }
  if (JsonTextDepth(text) > max_depth) {
    throw JsonLimitError(field,
                         "is nested more than " + std::to_string(max_depth) + " levels deep");
  }
}

}  // namespace tq
