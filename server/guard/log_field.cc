// Request-derived log fields, bounded (see log_field.h).
#include "server/guard/log_field.h"

namespace tq::guard {

std::string LogField(std::string_view value, size_t max_bytes) {
  if (value.size() <= max_bytes) return std::string(value);
  size_t cut = max_bytes;
  // Not inside a UTF-8 sequence: back off over continuation bytes (10xxxxxx),
  // at most 3 (the longest sequence is 4 bytes).
  for (int i = 0; i < 3 && cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80;
       ++i) {
    --cut;
  }
  return std::string(value.substr(0, cut)) + " ... (" + std::to_string(value.size()) + " bytes)";
}

}  // namespace tq::guard
