// Structured-output request fields (OpenAI response_format, vLLM's
// structured_outputs and guided_* fields) -> one constraint, compiled for
// the served vocabulary (docs/api.md "Structured outputs").
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/structured/grammar_cache.h"

namespace tq::http {

/// A request's constraint and the field it came from (for 400 params).
struct RequestConstraint {
  structured::ConstraintSpec spec;
  std::string param;  // "response_format", "guided_json", "structured_outputs.regex", ...
};

/// Reads response_format {"type": "text" | "json_object" | "json_schema",
/// "json_schema": {"name", "schema", "strict", "description"}},
/// structured_outputs {"json" | "regex" | "choice" | "grammar" |
/// "json_object"}, and guided_json / guided_regex / guided_choice /
/// guided_grammar. nullopt when none is set (or response_format is text).
/// Throws ApiException 400 naming the field for a malformed value or more
/// than one constraint.
std::optional<RequestConstraint> ParseConstraint(const nlohmann::json& body);

/// Compiles `c` through `cache` (the front end's thread). Throws ApiException
/// 400 naming c.param and, for JSON Schema, the unsupported keyword.
std::shared_ptr<const structured::CompiledGrammar> CompileConstraint(
    const RequestConstraint& c, structured::GrammarCache& cache);

}  // namespace tq::http
