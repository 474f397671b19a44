// tokenizer.json loader and pipeline (see hf_tokenizer.h).
#include "engine/tokenizer/hf_tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/common/error.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/hf_added_tokens.h"
#include "engine/tokenizer/hf_decoders.h"
#include "engine/tokenizer/hf_normalizers.h"
#include "engine/tokenizer/hf_pre_tokenizers.h"
#include "engine/tokenizer/utf8.h"

namespace tq {
namespace {

using json = nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error(path + ": not a valid JSON object");
  return j;
}

bool IsLlamaClass(const std::string& cls) {
  return cls == "LlamaTokenizer" || cls == "LlamaTokenizerFast" || cls == "CodeLlamaTokenizer" ||
         cls == "CodeLlamaTokenizerFast";
}

// The ids a TemplateProcessing puts before and after sequence A.
void ParseTemplate(const json& spec, const std::string& where, std::vector<int32_t>& prefix,
                   std::vector<int32_t>& suffix) {
  const json& specials = spec.value("special_tokens", json::object());
  bool seen_a = false;
  for (const json& item : spec.at("single")) {
    if (item.contains("Sequence")) {
      if (item["Sequence"].value("id", "A") != "A") {
        throw Error(where + ": post_processor TemplateProcessing: single uses sequence B");
      }
      seen_a = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = item["SpecialToken"].at("id").get<std::string>();
      if (!specials.contains(name)) {
        throw Error(where + ": post_processor TemplateProcessing: special token \"" + name +
                    "\" is not in special_tokens");
      }
      for (const json& id : specials[name].at("ids")) {
        (seen_a ? suffix : prefix).push_back(id.get<int32_t>());
      }
    } else {
      throw Error(where + ": post_processor TemplateProcessing: unknown item " + item.dump());
    }
  }
}

void ParsePostProcessor(const json& spec, const std::string& where, std::vector<int32_t>& prefix,
                        std::vector<int32_t>& suffix) {
  if (spec.is_null()) return;
  const std::string type = spec.value("type", "");
  if (type == "ByteLevel") return;  // offsets only
  if (type == "TemplateProcessing") return ParseTemplate(spec, where, prefix, suffix);
  if (type == "Sequence") {
    for (const json& p : spec.at("processors")) ParsePostProcessor(p, where, prefix, suffix);
    return;
  }
  throw Error(where + ": unsupported post_processor \"" + type + "\"");
}

}  // namespace

std::unique_ptr<HfTokenizer> HfTokenizer::Load(const std::string& path,
                                               const TokenizerSettings& settings) {
  const json j = ReadJson(path);
  std::unique_ptr<HfTokenizer> tok(new HfTokenizer());
  try {
    for (const char* key : {"truncation", "padding"}) {
      if (j.contains(key) && !j[key].is_null()) {
        throw Error(path + ": unsupported " + key + " (must be null)");
      }
    }
    tok->normalizer_ = hf::MakeNormalizer(j.value("normalizer", json()), path);
    tok->pre_tokenizer_ = hf::MakePreTokenizer(j.value("pre_tokenizer", json()), path);
    tok->model_ = std::make_unique<hf::BpeModel>(j.at("model"), path);
    tok->decoder_ = hf::MakeDecoder(j.value("decoder", json()), path);
    tok->added_ = std::make_unique<hf::AddedTokens>(j.value("added_tokens", json()),
                                                    tok->normalizer_.get(), path);
    ParsePostProcessor(j.value("post_processor", json()), path, tok->prefix_, tok->suffix_);
  } catch (const json::exception& e) {
    throw Error(path + ": malformed tokenizer.json: " + e.what());
  }
  tok->vocab_size_ = tok->model_->size();
  for (const hf::AddedToken& t : tok->added_->tokens()) {
    tok->vocab_size_ = std::max(tok->vocab_size_, t.id + 1);
  }
  if (!settings.bos_token.empty()) tok->bos_id_ = tok->TokenToId(settings.bos_token);
  if (!settings.eos_token.empty()) tok->eos_id_ = tok->TokenToId(settings.eos_token);
  if (IsLlamaClass(settings.tokenizer_class)) {
    // transformers' LlamaTokenizerFast rebuilds the post-processor from these.
    tok->prefix_.clear();
    tok->suffix_.clear();
    if (settings.add_bos_token && tok->bos_id_ >= 0) tok->prefix_.push_back(tok->bos_id_);
    if (settings.add_eos_token && tok->eos_id_ >= 0) tok->suffix_.push_back(tok->eos_id_);
  }
  for (int32_t id : tok->prefix_) {
    if (tok->TokenOf(id) == nullptr)
      throw Error(path + ": post_processor id " + std::to_string(id) + " is no token");
  }
  tok->FindAnchor();
  return tok;
}

HfTokenizer::~HfTokenizer() = default;

std::unique_ptr<Tokenizer> LoadTokenizerJson(const std::string& path,
                                             const TokenizerSettings& settings) {
  return HfTokenizer::Load(path, settings);
}

int32_t HfTokenizer::TokenToId(std::string_view token) const {
  const int32_t id = added_->IdOf(token);
  return id >= 0 ? id : model_->TokenToId(token);
}

const std::string* HfTokenizer::TokenOf(int32_t id) const {
  if (const hf::AddedToken* t = added_->ById(id)) return &t->content;
  return model_->IdToToken(id);
}

void HfTokenizer::EncodeText(std::string_view text, bool at_start,
                             std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  std::vector<hf::Piece> pieces;
  pieces.push_back({std::string(text), at_start});
  if (pre_tokenizer_) pre_tokenizer_->PreTokenize(pieces);
  for (const hf::Piece& p : pieces) model_->Tokenize(p.text, ids);
}

std::vector<int32_t> HfTokenizer::Encode(std::string_view input, bool add_special) const {
  std::string repaired;
  if (!utf8::Valid(input)) {
    repaired = utf8::Lossy(input);
    input = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(input.size() / 3 + prefix_.size() + suffix_.size() + 1);
  if (add_special) ids.insert(ids.end(), prefix_.begin(), prefix_.end());
  std::vector<hf::TextSplit> raw, normalized;
  added_->Split(input, /*normalized=*/false, raw);
  for (const hf::TextSplit& s : raw) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    std::string text(input.substr(s.begin, s.end - s.begin));
    if (text.empty()) continue;
    if (normalizer_) normalizer_->Normalize(text);
    normalized.clear();
    added_->Split(text, /*normalized=*/true, normalized);
    for (const hf::TextSplit& n : normalized) {
      if (n.id >= 0) {
        ids.push_back(n.id);
        continue;
      }
      EncodeText(std::string_view(text).substr(n.begin, n.end - n.begin),
                 s.begin == 0 && n.begin == 0, ids);
    }
  }
  if (add_special) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string HfTokenizer::RunDecoder(std::vector<std::string> tokens, bool raw) const {
  std::string out;
  if (!decoder_) {
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder_->DecodeChain(tokens, raw);
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string HfTokenizer::Decode(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const hf::AddedToken* added = added_->ById(id);
    if (added != nullptr && added->special) continue;
    if (const std::string* t = TokenOf(id)) tokens.push_back(*t);
  }
  return RunDecoder(std::move(tokens), /*raw=*/false);
}

std::string HfTokenizer::IdToPiece(int32_t id) const {
  const std::string* t = TokenOf(id);
  return t ? *t : std::string();
}

std::string HfTokenizer::TokenBytes(int32_t id) const {
  const hf::AddedToken* added = added_->ById(id);
  if (added != nullptr && added->special) return "";
  const std::string* t = TokenOf(id);
  if (t == nullptr) return "";
  return RunDecoder({*t}, /*raw=*/true);
}

}  // namespace tq
