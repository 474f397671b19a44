// Fuzz target: a JSON Schema as a structured-output request carries it
// (response_format json_schema, guided_json): the bounded JSON parse, the
// schema compiler (engine/structured/json_schema.cc), the grammar parser and
// its compile budget, then a few masked decoding steps (fuzz_structured.h).
// Byte 0 picks the tokens; the rest is the schema's JSON text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_structured.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tq::fuzz::ByteReader in(data, size);
  const uint32_t pick = in.Byte();
  tq::structured::ConstraintSpec spec;
  spec.kind = tq::structured::ConstraintSpec::Kind::kJsonSchema;
  spec.text = std::string(in.Take(in.remaining()));
  tq::fuzz::RunConstraint(spec, pick);
  return 0;
}
