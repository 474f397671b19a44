// What the OpenAI routes know about the served model, for the HTTP fuzz
// targets: the bundled model's, set as ServerState::SetEngine sets it.
#pragma once

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/structured/grammar_cache.h"
#include "server/guard/request_limits.h"
#include "server/http/generation_params.h"
#include "server/text/chat_template.h"
#include "tests/fuzz/fuzz_common.h"

namespace tq::fuzz {

/// The ModelLimits of `tqserve serve --model models/stories260K`.
inline const guard::ModelLimits& BundledContext() {
  static const guard::ModelLimits ctx = [] {
    guard::ModelLimits c;
    c.served_model_name = "stories260K";
    c.max_model_len = BundledFiles().config.MaxContext();
    c.vocab_size = BundledTokenizer().vocab_size();
    c.defaults = BundledFiles().generation;
    c.max_prompt_bytes = guard::MaxPromptBytes(BundledTokenizer(), c.max_model_len);
    return c;
  }();
  return ctx;
}

/// A fresh grammar cache over the bundled vocabulary (Engine::grammars
/// builds the same), so that no input's compiled grammar outlives it.
inline std::unique_ptr<structured::GrammarCache> BundledGrammars() {
  static const std::shared_ptr<const structured::TokenVocabulary> vocab = [] {
    std::vector<int32_t> eos = BundledFiles().config.eos_token_ids;
    if (BundledTokenizer().eos_id() >= 0) eos.push_back(BundledTokenizer().eos_id());
    return structured::TokenizerVocabulary(BundledTokenizer(), std::move(eos));
  }();
  return std::make_unique<structured::GrammarCache>(vocab);
}

/// The chat templates the chat targets render with: [0] the bundled model's
/// (none: the plain fallback), then every template of
/// tests/data/chat_templates.json (public models' templates: Llama 2 and 3,
/// ChatML, Mistral, tool-calling ones) with its bos/eos strings. Built once.
inline const std::vector<std::unique_ptr<ChatTemplate>>& ChatTemplates() {
  static const std::vector<std::unique_ptr<ChatTemplate>> templates = [] {
    std::vector<std::unique_ptr<ChatTemplate>> out;
    out.push_back(std::make_unique<ChatTemplate>(BundledFiles(), BundledTokenizer()));
    std::ifstream in(TQ_TEST_DATA_DIR "/chat_templates.json");
    const nlohmann::json data = nlohmann::json::parse(in);
    for (const nlohmann::json& t : data.at("templates")) {
      ModelFiles files = BundledFiles();
      files.tokenizer.chat_template = t.at("source").get<std::string>();
      files.tokenizer.bos_token = t.value("bos_token", "");
      files.tokenizer.eos_token = t.value("eos_token", "");
      out.push_back(std::make_unique<ChatTemplate>(files, BundledTokenizer()));
    }
    return out;
  }();
  return templates;
}

}  // namespace tq::fuzz
