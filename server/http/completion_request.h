// POST /v1/completions: the request body, parsed and validated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "server/http/generation_params.h"

namespace tq::http {

/// One prompt as sent: text (tokenized with BOS as tokenizer_config.json says,
/// like vLLM's add_special_tokens=true) or token ids (used as they are).
struct PromptInput {
  bool is_text = true;
  std::string text;
  std::vector<int32_t> ids;
};

/// A validated completions request (OpenAI "Create completion" plus vLLM's
/// extensions; docs/api.md lists every field and what we do with it).
struct CompletionRequest {
  GenerationParams params;           // max_tokens default 16 (OpenAI)
  std::vector<PromptInput> prompts;  // 1..; choice index = prompt_index * n + i
  int32_t logprobs = -1;             // -1: none; 0..20 top tokens per position
  bool echo = false;                 // prepend the prompt (and its logprobs)
};

/// Parses `body`. `prompt` may be a string, a list of strings, a list of
/// token ids or a list of lists of token ids (ids in [0, vocab_size)); empty
/// lists are rejected. Throws ApiException (400 with param).
CompletionRequest ParseCompletionRequest(const nlohmann::json& body, const guard::ModelLimits& ctx);

/// The token ids of prompt `prompt`: text is encoded with add_special (BOS).
std::vector<int32_t> PromptIds(const PromptInput& prompt, const Tokenizer& tokenizer);

}  // namespace tq::http
