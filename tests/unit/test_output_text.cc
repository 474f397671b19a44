// OutputTextStream: stop strings on streamed output of the bundled model's
// tokenizer. The oracle is independent of the streaming code: decode the
// first k tokens with Tokenizer::Decode for k = 1, 2, ... and cut at the
// earliest std::string::find of any stop string; the first k with a match is
// the token that completes the stop (what vLLM checks after every token).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "server/text/output_text.h"

namespace tq {
namespace {

using Ids = std::vector<int32_t>;

// Strict UTF-8 validation (RFC 3629): no overlong forms, surrogates,
// code points above U+10FFFF or truncated sequences.
bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    int extra;
    uint32_t min_cp;
    uint32_t cp;
    if (b0 <= 0x7F) {
      ++i;
      continue;
    } else if (b0 >= 0xC2 && b0 <= 0xDF) {
      extra = 1, min_cp = 0x80, cp = b0 & 0x1Fu;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      extra = 2, min_cp = 0x800, cp = b0 & 0x0Fu;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      extra = 3, min_cp = 0x10000, cp = b0 & 0x07u;
    } else {
      return false;
    }
    if (i + static_cast<size_t>(extra) >= s.size()) return false;  // truncated
    for (int k = 1; k <= extra; ++k) {
      const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3Fu);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<size_t>(extra) + 1;
  }
  return true;
}

struct Expected {
  std::string text;
  int32_t num_tokens;
  bool stopped;
  std::string stop;  // the stop string found first (shortest of those starting there)
};

class OutputTextTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = Tokenizer::Load(TQ_MODEL_DIR, LoadModelFiles(TQ_MODEL_DIR).tokenizer).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }

  // Text of `output` after `prompt`: Decode(prompt + output) minus
  // Decode(prompt), the detokenizer's convention.
  static std::string DecodeAfter(const Ids& prompt, const Ids& output, size_t k) {
    Ids all = prompt;
    all.insert(all.end(), output.begin(), output.begin() + static_cast<std::ptrdiff_t>(k));
    const std::string full = tok_->Decode(all);
    const std::string head = tok_->Decode(prompt);
    EXPECT_EQ(full.compare(0, head.size(), head), 0);
    return full.substr(head.size());
  }

  static Expected Oracle(const Ids& prompt, const Ids& output,
                         const std::vector<std::string>& stops) {
    for (size_t k = 1; k <= output.size(); ++k) {
      const std::string text = DecodeAfter(prompt, output, k);
      size_t first = std::string::npos;
      for (const std::string& s : stops) {
        if (!s.empty()) first = std::min(first, text.find(s));
      }
      if (first == std::string::npos) continue;
      std::string stop;
      for (const std::string& s : stops) {
        if (!s.empty() && text.compare(first, s.size(), s) == 0 &&
            (stop.empty() || s.size() < stop.size())) {
          stop = s;
        }
      }
      return {text.substr(0, first), static_cast<int32_t>(k), true, stop};
    }
    return {DecodeAfter(prompt, output, output.size()), static_cast<int32_t>(output.size()), false,
            ""};
  }

  // Streams `output` in chunks of `chunk` tokens and checks it against the
  // oracle: the deltas, valid UTF-8 each, concatenate to the expected text;
  // after every push the text so far is a prefix of it (so no byte of the
  // stop occurrence was ever sent) and lags the decoded text by at most what
  // could still start a stop string plus an incomplete character.
  static void Check(const Ids& prompt, const Ids& output, const std::vector<std::string>& stops,
                    size_t chunk = 1) {
    SCOPED_TRACE("stops: " + ::testing::PrintToString(stops) + " chunk: " + std::to_string(chunk));
    const Expected want = Oracle(prompt, output, stops);
    size_t max_stop = 0;
    for (const std::string& s : stops) max_stop = std::max(max_stop, s.size());
    OutputTextStream stream(tok_, prompt, stops);
    std::string sent;
    for (size_t i = 0; i < output.size(); i += chunk) {
      const size_t n = std::min(chunk, output.size() - i);
      const std::string delta = stream.Push(std::span<const int32_t>(output.data() + i, n));
      EXPECT_TRUE(ValidUtf8(delta)) << "delta is not valid UTF-8";
      sent += delta;
      ASSERT_EQ(want.text.compare(0, sent.size(), sent), 0)
          << "sent text is not a prefix of the expected text after token " << i + n << ": "
          << ::testing::PrintToString(sent);
      if (!stream.stopped()) {
        const std::string decoded = DecodeAfter(prompt, output, i + n);
        const size_t slack = (max_stop > 0 ? max_stop - 1 : 0) + 12;  // + up to 4 U+FFFD
        EXPECT_GE(sent.size() + slack, decoded.size()) << "holds back too much";
      }
    }
    const std::string tail = stream.Finish();
    EXPECT_TRUE(ValidUtf8(tail));
    sent += tail;
    EXPECT_EQ(sent, want.text);
    EXPECT_EQ(stream.stopped(), want.stopped);
    EXPECT_EQ(stream.stop_string(), want.stop);
    EXPECT_EQ(stream.num_tokens(), want.num_tokens);
  }

  static std::vector<std::string> Sentences() {
    std::vector<std::string> out = {"é 中 😀", "naïve café 中文 😀 end", "Once upon a time",
                                    "a\n\nb  c\td"};
    // Sentence pairs of the checked-in stories (the checkout alone: CI has no
    // ../shared beside it).
    std::ifstream in(std::string(TQ_TEST_DATA_DIR) + "/perplexity_stories.txt");
    std::string line;
    while (std::getline(in, line)) {
      for (size_t begin = 0; begin < line.size() && out.size() < 28;) {
        size_t end = line.find(". ", begin);
        end = end == std::string::npos ? line.size() : line.find(". ", end + 2);
        end = end == std::string::npos ? line.size() : end + 1;
        if (end - begin >= 40) out.push_back(line.substr(begin, end - begin));
        begin = end + 1;
      }
    }
    return out;
  }

  static Tokenizer* tok_;
};
Tokenizer* OutputTextTest::tok_ = nullptr;

TEST_F(OutputTextTest, ManyTextsAndStopStringsMatchTheOracle) {
  std::mt19937 rng(1234);
  const std::vector<std::string> texts = Sentences();
  ASSERT_GE(texts.size(), 10u);
  int stopped_cases = 0;
  int cases = 0;
  for (const std::string& text : texts) {
    SCOPED_TRACE(text);
    const Ids output = tok_->Encode(text, /*add_special=*/false);
    const std::string decoded = tok_->Decode(output);
    std::vector<std::vector<std::string>> stop_sets = {
        {},
        {"."},
        {"e"},
        {" the"},
        {"é"},
        {"中"},
        {"😀"},
        {"\n"},
        {"never present in any of these texts"},
        {decoded.substr(decoded.rfind(' ') + 1) + "zzz"},  // only its start is present, at the end
        {"ab", "b"},
        {"he", "e", "the"},
        {" the", " t"},  // both start at the same place: the shorter is reported
        {"", "."},
    };
    // Substrings of the text itself, spanning several tokens.
    for (int r = 0; r < 6; ++r) {
      const size_t len = 2 + rng() % 12;
      if (decoded.size() <= len) break;
      size_t at = rng() % (decoded.size() - len);
      while (at > 0 && (static_cast<unsigned char>(decoded[at]) & 0xC0) == 0x80) --at;
      size_t end = at + len;
      while (end < decoded.size() && (static_cast<unsigned char>(decoded[end]) & 0xC0) == 0x80)
        ++end;
      // With the substring's second character too (overlapping stops).
      size_t second = at + 1;
      while (second < end && (static_cast<unsigned char>(decoded[second]) & 0xC0) == 0x80) ++second;
      size_t second_end = second + 1;
      while (second_end < end && (static_cast<unsigned char>(decoded[second_end]) & 0xC0) == 0x80) {
        ++second_end;
      }
      stop_sets.push_back({decoded.substr(at, end - at)});
      stop_sets.push_back(
          {decoded.substr(at, end - at), decoded.substr(second, second_end - second)});
    }
    for (const auto& stops : stop_sets) {
      for (const Ids& prompt : {Ids{tok_->bos_id()}, tok_->Encode("Hello there,", true)}) {
        Check(prompt, output, stops);
        ++cases;
        stopped_cases += Oracle(prompt, output, stops).stopped;
      }
      Check({tok_->bos_id()}, output, stops, /*chunk=*/3);
      Check({tok_->bos_id()}, output, stops, /*chunk=*/output.size() + 1);
    }
  }
  EXPECT_GT(stopped_cases, cases / 3);
  EXPECT_LT(stopped_cases, cases);
}

TEST_F(OutputTextTest, GreedyReferenceOutputWithStops) {
  std::ifstream in(std::string(TQ_TEST_DATA_DIR) + "/reference_greedy_ids_once_upon_a_time.txt");
  std::string line;
  Ids ids;
  while (std::getline(in, line)) {
    if (line.rfind("# ids [", 0) != 0) continue;
    std::stringstream ss(line.substr(7));
    std::string num;
    while (std::getline(ss, num, ',')) ids.push_back(std::stoi(num));
  }
  ASSERT_GT(ids.size(), 100u);
  const Ids prompt(ids.begin(), ids.begin() + 4);
  const Ids output(ids.begin() + 4, ids.end());
  for (const std::vector<std::string>& stops : std::vector<std::vector<std::string>>{
           {"Lily"}, {"."}, {" and", "\n"}, {"The end"}, {"zz"}}) {
    Check(prompt, output, stops);
  }
}

// Byte-fallback pieces completing a stop string in the middle of a
// character: "中" is three byte tokens; the stop is found on the third.
TEST_F(OutputTextTest, StopCompletedByByteFallbackToken) {
  const Ids output = tok_->Encode("a中b", false);
  ASSERT_GE(output.size(), 4u);
  OutputTextStream stream(tok_, {tok_->bos_id()}, {"中"});
  std::string sent;
  int32_t pushed = 0;
  while (!stream.stopped() && pushed < static_cast<int32_t>(output.size())) {
    sent += stream.Push(std::span<const int32_t>(&output[static_cast<size_t>(pushed)], 1));
    ++pushed;
  }
  EXPECT_TRUE(stream.stopped());
  EXPECT_EQ(sent, "a");
  EXPECT_EQ(stream.num_tokens(), pushed);
  EXPECT_EQ(tok_->Decode(Ids(output.begin(), output.begin() + pushed)), "a中");
}

TEST_F(OutputTextTest, AfterStopFurtherTokensAreIgnored) {
  const Ids output = tok_->Encode("one two three four", false);
  OutputTextStream stream(tok_, {tok_->bos_id()}, {"two"});
  std::string sent = stream.Push(output);
  EXPECT_EQ(sent, "one ");
  ASSERT_TRUE(stream.stopped());
  const int32_t n = stream.num_tokens();
  EXPECT_LT(n, static_cast<int32_t>(output.size()));
  EXPECT_EQ(stream.Push(output), "");
  EXPECT_EQ(stream.Finish(), "");
  EXPECT_EQ(stream.num_tokens(), n);
}

TEST_F(OutputTextTest, HeldPrefixIsFlushedAtFinish) {
  // "upon" could still become "upon a star"; when the sequence ends it goes out.
  const Ids output = tok_->Encode("Once upon", false);
  OutputTextStream stream(tok_, {tok_->bos_id()}, {"upon a star"});
  const std::string pushed = stream.Push(output);
  EXPECT_EQ(pushed, "Once ");
  EXPECT_EQ(stream.Finish(), "upon");
  EXPECT_FALSE(stream.stopped());
  EXPECT_EQ(stream.num_tokens(), static_cast<int32_t>(output.size()));
}

TEST_F(OutputTextTest, IncompleteUtf8AtEndIsReplacementCharacter) {
  // First two bytes of "中" (E4 B8) and nothing more: U+FFFD when flushed.
  Ids output = tok_->Encode("xy", false);
  output.insert(output.end(), {0xE4 + 3, 0xB8 + 3});
  ASSERT_EQ(tok_->IdToPiece(0xE4 + 3), "<0xE4>");
  OutputTextStream stream(tok_, {tok_->bos_id()}, {"z"});
  std::string sent = stream.Push(output);
  EXPECT_EQ(sent, "xy");
  const std::string tail = stream.Finish();
  EXPECT_TRUE(ValidUtf8(tail));
  EXPECT_NE(tail.find("\xEF\xBF\xBD"), std::string::npos);
}

}  // namespace
}  // namespace tq
