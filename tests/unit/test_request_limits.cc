// Request limits (server/guard/request_limits.h): the prompt byte bound on
// the bundled tokenizer (its longest piece from Python's sentencepiece), that
// the bound never refuses a prompt that fits (checked by tokenizing), and the
// stop-string and logprob-volume limits at their edges.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/guard/request_limits.h"

namespace tq::guard {
namespace {

std::unique_ptr<Tokenizer> Bundled() {
  const ModelFiles files = LoadModelFiles(TQ_MODEL_DIR);
  return Tokenizer::Load(TQ_MODEL_DIR, files.tokenizer);
}

TEST(RequestLimits, CountPromptBytesCollapsesSpaceRuns) {
  EXPECT_EQ(CountPromptBytes(""), 0u);
  EXPECT_EQ(CountPromptBytes("abc"), 3u);
  EXPECT_EQ(CountPromptBytes("a    b"), 3u);
  EXPECT_EQ(CountPromptBytes("  a\t\tb  "), 6u);  // tabs are not collapsed
}

TEST(RequestLimits, MaxPromptBytesIsMaxModelLenTimesLongestPiece) {
  // python3: max(len(sp.id_to_piece(i).encode()) for i in range(512)) == 9
  // for models/stories260K/tokenizer.model (Python's sentencepiece).
  const auto tokenizer = Bundled();
  EXPECT_EQ(MaxPromptBytes(*tokenizer, 512), 512 * 9);
  EXPECT_EQ(MaxPromptBytes(*tokenizer, 1), 9);
}

// The bound is exact in the sense that matters: no text it lets through is
// refused... and no text it refuses could have fit. Every text's token count
// is at least its counted bytes / 9.
TEST(RequestLimits, NoTextNeedsFewerTokensThanTheBoundAssumes) {
  const auto tokenizer = Bundled();
  std::ifstream in(std::string(TQ_TEST_DATA_DIR) + "/tinystories_valid_sample.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string stories = ss.str();
  ASSERT_GT(stories.size(), 10000u);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    if (trial % 2 == 0) {
      const size_t begin = rng() % (stories.size() - 2000);
      text = stories.substr(begin, 1 + rng() % 2000);
    } else {
      text.resize(1 + rng() % 300);
      for (char& c : text) c = static_cast<char>(rng() % 256);  // arbitrary bytes
    }
    const size_t tokens = tokenizer->Encode(text, /*add_special=*/false).size();
    EXPECT_GE(tokens * 9, CountPromptBytes(text)) << "trial " << trial;
  }
}

TEST(RequestLimits, CheckPromptBytesRefusesOnlyBeyondTheBound) {
  EXPECT_FALSE(CheckPromptBytes(std::string(4608, 'a'), 4608, 512, "prompt"));
  const auto refusal = CheckPromptBytes(std::string(4609, 'a'), 4608, 512, "prompt");
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->reason, "prompt_too_long");
  EXPECT_EQ(refusal->param, "prompt");
  EXPECT_NE(refusal->message.find("512 tokens"), std::string::npos) << refusal->message;
  // Spaces collapse: a long run of them counts as one byte.
  EXPECT_FALSE(CheckPromptBytes("a" + std::string(100000, ' ') + "b", 4608, 512, "prompt"));
  EXPECT_FALSE(CheckPromptBytes(std::string(1 << 20, 'a'), 0, 512, "prompt"));  // no bound
}

TEST(RequestLimits, StopStrings) {
  EXPECT_FALSE(CheckStopStrings(std::vector<std::string>(kMaxStopStrings, "x"), "stop"));
  EXPECT_EQ(CheckStopStrings(std::vector<std::string>(kMaxStopStrings + 1, "x"), "stop")->reason,
            "stop_strings");
  EXPECT_FALSE(CheckStopStrings({std::string(kMaxStopStringBytes, 'x')}, "stop"));
  const auto refusal = CheckStopStrings({"a", std::string(kMaxStopStringBytes + 1, 'x')}, "stop");
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->message.find("'stop[1]'"), std::string::npos) << refusal->message;
}

TEST(RequestLimits, LogprobVolume) {
  EXPECT_FALSE(CheckLogprobVolume(int64_t{1} << 40, -1));  // no logprobs asked for
  // The 100-byte request: 8 prompts x n 128, 16 tokens, 20 logprobs.
  const auto refusal = CheckLogprobVolume(8 * 128 * 16, 20);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->reason, "logprobs_volume");
  EXPECT_FALSE(CheckLogprobVolume(kMaxLogprobEntries / 21, 20));
  EXPECT_TRUE(CheckLogprobVolume(kMaxLogprobEntries / 21 + 1, 20));
}

}  // namespace
}  // namespace tq::guard
