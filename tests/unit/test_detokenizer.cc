// Incremental detokenizer: UTF-8 safety and agreement with whole decodes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "server/text/detokenizer.h"

namespace tq {
namespace {

using Ids = std::vector<int32_t>;
constexpr int32_t kBos = 1;
constexpr int32_t kEos = 2;
constexpr int32_t kSpace = 410;  // "▁"
int32_t Byte(int b) {
  return b + 3;
}  // <0xNN>

// Strict UTF-8 validator (no overlongs, surrogates or code points > U+10FFFF).
bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

class DetokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = Tokenizer::Load(TQ_MODEL_DIR, {}).release(); }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }

  // Pushes `output` one id at a time; returns the deltas (Flush() last).
  static std::vector<std::string> Stream(const Ids& prompt, const Ids& output) {
    IncrementalDetokenizer detok(tok_, prompt);
    std::vector<std::string> deltas;
    for (int32_t id : output) deltas.push_back(detok.Push(id));
    deltas.push_back(detok.Flush());
    for (const auto& d : deltas) EXPECT_TRUE(IsValidUtf8(d)) << "invalid UTF-8 delta";
    return deltas;
  }
  static std::string Join(const std::vector<std::string>& parts) {
    std::string s;
    for (const auto& p : parts) s += p;
    return s;
  }
  // vLLM's convention: Decode(prompt + output) minus Decode(prompt).
  static std::string Expected(const Ids& prompt, const Ids& output) {
    Ids all = prompt;
    all.insert(all.end(), output.begin(), output.end());
    const std::string full = tok_->Decode(all);
    const std::string head = tok_->Decode(prompt);
    EXPECT_EQ(full.compare(0, head.size(), head), 0);
    return full.substr(head.size());
  }

  static Tokenizer* tok_;
};
Tokenizer* DetokenizerTest::tok_ = nullptr;

TEST_F(DetokenizerTest, Utf8ValidatorSelfCheck) {
  EXPECT_TRUE(IsValidUtf8("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xE4\xB8"));
  EXPECT_FALSE(IsValidUtf8("\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));
}

TEST_F(DetokenizerTest, WordsStreamWithSpaces) {
  const Ids out = {403, 407, 261, 378};  // ▁Once ▁upon ▁a ▁time
  // After a BOS-only prompt the first piece's space is dropped, as in Decode(out).
  const auto deltas = Stream({kBos}, out);
  EXPECT_EQ(deltas, (std::vector<std::string>{"Once", " upon", " a", " time", ""}));
  EXPECT_EQ(Join(deltas), tok_->Decode(out));
  // Same with no prompt at all.
  EXPECT_EQ(Join(Stream({}, out)), "Once upon a time");
}

TEST_F(DetokenizerTest, FirstOutputTokenKeepsItsSpaceAfterAPrompt) {
  // vLLM returns " Once" for a completion of "Hello" whose first token is ▁Once:
  // Decode(prompt + output) minus Decode(prompt).
  const Ids prompt = tok_->Encode("The end. Then one day it rained");
  const Ids out = {403, 407};
  const auto deltas = Stream(prompt, out);
  EXPECT_EQ(deltas[0], " Once");
  EXPECT_EQ(Join(deltas), " Once upon");
  EXPECT_EQ(Join(deltas), Expected(prompt, out));
  // Short prompt (window starts at the BOS) gives the same.
  EXPECT_EQ(Join(Stream(tok_->Encode("Hi"), out)), " Once upon");
}

TEST_F(DetokenizerTest, MultiByteCharactersSplitAcrossTokensAreHeldBack) {
  // "a 中😀é" with every byte its own token.
  const Ids out = {261,        kSpace,     Byte(0xE4), Byte(0xB8), Byte(0xAD), Byte(0xF0),
                   Byte(0x9F), Byte(0x98), Byte(0x80), Byte(0xC3), Byte(0xA9)};
  const auto deltas = Stream({kBos}, out);
  EXPECT_EQ(deltas, (std::vector<std::string>{"a", " ", "", "", "\xE4\xB8\xAD", "", "", "",
                                              "\xF0\x9F\x98\x80", "", "\xC3\xA9", ""}));
  EXPECT_EQ(Join(deltas), tok_->Decode(out));
}

TEST_F(DetokenizerTest, IncompleteTailIsFlushedWithReplacementCharacters) {
  const Ids out = {403, Byte(0xE4), Byte(0xB8)};
  const auto deltas = Stream({kBos}, out);
  EXPECT_EQ(deltas, (std::vector<std::string>{"Once", "", "", "\xEF\xBF\xBD\xEF\xBF\xBD"}));
  EXPECT_EQ(Join(deltas), tok_->Decode(out));
}

TEST_F(DetokenizerTest, WhitespaceOnlyPiecesKeepTheirSpacesMidText) {
  // SentencePiece drops *all* leading spaces of a decode; a window starting
  // at "▁" must not lose them.
  const Ids out = {403, kSpace, kSpace, 261, kSpace, 13, kSpace, 261};
  const auto deltas = Stream({kBos}, out);
  EXPECT_EQ(Join(deltas), tok_->Decode(out));
  EXPECT_EQ(Join(deltas), "Once   a \n  a");
}

TEST_F(DetokenizerTest, ControlTokensEmitNothing) {
  const Ids out = {403, kEos, 407, kBos};
  const auto deltas = Stream({kBos}, out);
  EXPECT_EQ(deltas[1], "");
  EXPECT_EQ(deltas[3], "");
  EXPECT_EQ(Join(deltas), "Once upon");
}

TEST_F(DetokenizerTest, ConcatenationEqualsDecodeForEncodedText) {
  const std::string text =
      "Once upon a time, there was a little girl named Lily.\n  She said: \"naïve café 中文 "
      "😀\" -- 0123456789!\n\nThe end.  ";
  const Ids ids = tok_->Encode(text, false);
  EXPECT_EQ(Join(Stream({kBos}, ids)), tok_->Decode(ids));
  const Ids prompt = tok_->Encode("Tell me a story:");
  EXPECT_EQ(Join(Stream(prompt, ids)), Expected(prompt, ids));
}

TEST_F(DetokenizerTest, RandomStreamsAgreeWithWholeDecode) {
  // Random ids over the whole vocabulary (bytes, spaces, controls, <unk>),
  // weighted towards byte pieces so that broken and valid UTF-8 both occur.
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any(0, tok_->vocab_size() - 1);
  std::uniform_int_distribution<int32_t> byte(3, 258);
  std::uniform_int_distribution<int> coin(0, 3);
  const Ids prompts[] = {{}, {kBos}, tok_->Encode("Once upon a time"), {kBos, kSpace}};
  for (int trial = 0; trial < 300; ++trial) {
    Ids out(1 + trial % 40);
    for (auto& id : out) id = coin(rng) == 0 ? any(rng) : (coin(rng) < 2 ? kSpace : byte(rng));
    const Ids& prompt = prompts[trial % 4];
    SCOPED_TRACE("trial " + std::to_string(trial));
    EXPECT_EQ(Join(Stream(prompt, out)), Expected(prompt, out));
  }
}

TEST_F(DetokenizerTest, PieceStreamsOfRealisticTextAgree) {
  // Whole-word pieces mixed with byte runs: every delta is valid UTF-8 and
  // nothing is emitted twice or lost.
  std::mt19937 rng(99);
  std::uniform_int_distribution<int32_t> word(259, tok_->vocab_size() - 1);
  const Ids chars[] = {{Byte(0xE4), Byte(0xB8), Byte(0xAD)},
                       {Byte(0xF0), Byte(0x9F), Byte(0x98), Byte(0x80)},
                       {Byte(0xC3), Byte(0xA9)},
                       {13},
                       {kSpace}};
  std::uniform_int_distribution<int> pick(0, 9);
  for (int trial = 0; trial < 100; ++trial) {
    Ids out;
    for (int n = 0; n < 30; ++n) {
      const int k = pick(rng);
      if (k < 5) {
        out.insert(out.end(), chars[k].begin(), chars[k].end());
      } else {
        out.push_back(word(rng));
      }
    }
    const auto deltas = Stream({kBos}, out);
    EXPECT_EQ(Join(deltas), tok_->Decode(out));
    EXPECT_EQ(Join(deltas).find("\xEF\xBF\xBD"), std::string::npos);
  }
}

}  // namespace
}  // namespace tq
