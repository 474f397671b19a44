// Fuzz target: a regular expression as guided_regex / structured_outputs.regex
// carry it, and as a schema's "pattern" (inside a JSON string): the regex
// compiler (engine/structured/regex_grammar.cc), the grammar parser and its
// compile budget, then a few masked decoding steps (fuzz_structured.h).
// Byte 0: bit 0 picks guided_regex or a schema pattern, the rest the
// tokens; then the pattern.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/fuzz/fuzz_structured.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tq::fuzz::ByteReader in(data, size);
  const uint8_t mode = in.Byte();
  const std::string pattern(in.Take(in.remaining()));
  tq::structured::ConstraintSpec spec;
  if (mode & 1) {
    spec.kind = tq::structured::ConstraintSpec::Kind::kJsonSchema;
    nlohmann::json schema = {{"type", "string"}, {"pattern", pattern}};
    spec.text = schema.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    spec.kind = tq::structured::ConstraintSpec::Kind::kRegex;
    spec.text = pattern;
  }
  tq::fuzz::RunConstraint(spec, mode >> 1);
  return 0;
}
