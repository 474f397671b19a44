// Fuzz target: grammar text as guided_grammar / structured_outputs.grammar
// carry it (GBNF-like, engine/structured/grammar.cc): the parser, the
// lowering of repetitions, the left-recursion and derivation-path checks and
// the compile budget, then a few masked decoding steps (fuzz_structured.h).
// Byte 0 picks the tokens; the rest is the grammar text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_structured.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tq::fuzz::ByteReader in(data, size);
  const uint32_t pick = in.Byte();
  tq::structured::ConstraintSpec spec;
  spec.kind = tq::structured::ConstraintSpec::Kind::kGrammar;
  spec.text = std::string(in.Take(in.remaining()));
  tq::fuzz::RunConstraint(spec, pick);
  return 0;
}
