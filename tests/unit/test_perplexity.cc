// Sliding-window perplexity (engine/runtime/perplexity.h) and `tqserve eval`:
// hand-computable sums, window bookkeeping, a sanity check on the bundled
// stories260K model, and agreement with the float64 numpy reference
// (tests/reference/llama_ref.py --ppl, run by the reference.perplexity CTest).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/runtime/offline_engine.h"
#include "engine/runtime/perplexity.h"
#include "temp_dir_test.h"

namespace tq {
namespace {

const std::string kStories = std::string(TQ_TEST_DATA_DIR) + "/perplexity_stories.txt";

class PerplexityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions options;
    options.model_dir = TQ_MODEL_DIR;
    options.num_threads = 1;
    gen_ = std::make_unique<OfflineEngine>(options);
  }
  static void TearDownTestSuite() { gen_.reset(); }

  // BOS + the text's ids.
  static std::vector<int32_t> Tokens(const std::string& text) {
    std::vector<int32_t> ids = gen_->tokenizer().Encode(text, false);
    ids.insert(ids.begin(), gen_->tokenizer().bos_id());
    return ids;
  }

  // sum over p in [1, n) of -ln softmax(logits[p - 1])[tokens[p]], from one
  // PromptLogits call over the whole sequence.
  static double DirectNll(const std::vector<int32_t>& tokens) {
    const std::vector<float> logits = gen_->PromptLogits(tokens);
    const int32_t vocab = gen_->files().config.vocab_size;
    double nll = 0.0;
    for (size_t p = 1; p < tokens.size(); ++p) {
      const float* row = logits.data() + (p - 1) * vocab;
      double max = row[0];
      for (int32_t v = 1; v < vocab; ++v) max = std::max(max, static_cast<double>(row[v]));
      double sum = 0.0;
      for (int32_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
      nll += max + std::log(sum) - row[tokens[p]];
    }
    return nll;
  }

  static std::unique_ptr<OfflineEngine> gen_;
};

std::unique_ptr<OfflineEngine> PerplexityTest::gen_;

TEST_F(PerplexityTest, RejectsBadWindowArguments) {
  const std::vector<std::vector<int32_t>> docs = {Tokens("Once upon a time")};
  EXPECT_THROW(EvaluatePerplexity(*gen_, docs, 1, 1), Error);
  EXPECT_THROW(EvaluatePerplexity(*gen_, docs, 0, 1), Error);
  EXPECT_THROW(EvaluatePerplexity(*gen_, docs, 8, 0), Error);
  EXPECT_THROW(EvaluatePerplexity(*gen_, docs, 8, -1), Error);
  EXPECT_THROW(EvaluatePerplexity(*gen_, docs, 8, 9), Error);
  EXPECT_NO_THROW(EvaluatePerplexity(*gen_, docs, 2, 1));
  EXPECT_NO_THROW(EvaluatePerplexity(*gen_, docs, 8, 8));
}

TEST_F(PerplexityTest, OneWindowEqualsDirectSum) {
  const std::vector<int32_t> doc = Tokens("Once upon a time, there was a little cat named Tom.");
  ASSERT_GT(doc.size(), 8u);
  const double want = DirectNll(doc);
  const int32_t n = static_cast<int32_t>(doc.size());
  for (int32_t ctx : {n, n + 5, 512}) {
    const std::vector<std::vector<int32_t>> docs = {doc};
    const PerplexityResult r = EvaluatePerplexity(*gen_, docs, ctx, std::max(1, ctx / 2));
    EXPECT_EQ(r.num_predicted, n - 1) << "ctx " << ctx;
    EXPECT_EQ(r.num_windows, 1) << "ctx " << ctx;
    EXPECT_NEAR(r.nll_sum, want, 1e-9 * want) << "ctx " << ctx;
    EXPECT_NEAR(r.perplexity, std::exp(want / (n - 1)), 1e-9 * r.perplexity);
    EXPECT_EQ(r.context, ctx);
    EXPECT_EQ(r.stride, std::max(1, ctx / 2));
  }
}

TEST_F(PerplexityTest, ContextTwoConditionsOnThePreviousTokenOnly) {
  // ctx 2, stride 1: token p is scored from the window {p-1, p} alone.
  const std::vector<int32_t> doc = Tokens("The dog ran to the park.");
  double want = 0.0;
  for (size_t p = 1; p < doc.size(); ++p) want += DirectNll({doc[p - 1], doc[p]});
  const std::vector<std::vector<int32_t>> docs = {doc};
  const PerplexityResult r = EvaluatePerplexity(*gen_, docs, 2, 1);
  EXPECT_EQ(r.num_predicted, static_cast<int64_t>(doc.size()) - 1);
  EXPECT_EQ(r.num_windows, static_cast<int32_t>(doc.size()) - 1);
  EXPECT_NEAR(r.nll_sum, want, 1e-9 * want);
}

TEST_F(PerplexityTest, WindowsMatchTheirDefinition) {
  // ctx 8, stride 3 on a 20-token document: windows [0,8) [3,11) [6,14) [9,17)
  // [12,20) score [1,8) [8,11) [11,14) [14,17) [17,20).
  std::vector<int32_t> doc = Tokens("Lily saw a big red ball in the garden and she ran to get it.");
  ASSERT_GE(doc.size(), 20u);
  doc.resize(20);
  auto nll_range = [&](size_t b, size_t e, size_t first) {
    const std::vector<int32_t> w(doc.begin() + b, doc.begin() + e);
    const std::vector<float> logits = gen_->PromptLogits(w);
    const int32_t vocab = gen_->files().config.vocab_size;
    double nll = 0.0;
    for (size_t p = first; p < e; ++p) {
      const float* row = logits.data() + (p - 1 - b) * vocab;
      double max = row[0], sum = 0.0;
      for (int32_t v = 1; v < vocab; ++v) max = std::max(max, static_cast<double>(row[v]));
      for (int32_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
      nll += max + std::log(sum) - row[doc[p]];
    }
    return nll;
  };
  const double want = nll_range(0, 8, 1) + nll_range(3, 11, 8) + nll_range(6, 14, 11) +
                      nll_range(9, 17, 14) + nll_range(12, 20, 17);
  const std::vector<std::vector<int32_t>> docs = {doc};
  const PerplexityResult r = EvaluatePerplexity(*gen_, docs, 8, 3);
  EXPECT_EQ(r.num_windows, 5);
  EXPECT_EQ(r.num_predicted, 19);
  EXPECT_NEAR(r.nll_sum, want, 1e-9 * want);
}

TEST_F(PerplexityTest, SmallWindowsScoreEveryTokenOnce) {
  const std::vector<int32_t> long_doc = Tokens(
      "Sam had a blue boat. He took it to the pond every day. One day the wind blew the boat "
      "far away, and Sam was sad until his dad helped him get it back.");
  const std::vector<std::vector<int32_t>> docs = {
      {gen_->tokenizer().bos_id()},  // too short: contributes nothing
      {},
      Tokens("Hi"),
      Tokens("The sun was warm and the birds sang."),
      long_doc,
  };
  int64_t want = 0;
  for (const auto& d : docs) want += std::max<int64_t>(0, static_cast<int64_t>(d.size()) - 1);
  ASSERT_GT(long_doc.size(), 30u);
  for (auto [ctx, stride] : {std::pair{2, 1}, {3, 2}, {4, 1}, {5, 3}, {8, 4}, {8, 7}, {16, 5}}) {
    const PerplexityResult r = EvaluatePerplexity(*gen_, docs, ctx, stride);
    EXPECT_EQ(r.num_predicted, want) << "ctx " << ctx << " stride " << stride;
    EXPECT_TRUE(std::isfinite(r.perplexity) && r.perplexity > 1.0);
  }
  // Disjoint windows (stride == ctx) skip each later window's first token, as
  // in the HF recipe: a 20-token document at ctx 8 scores 7 + 7 + 3.
  std::vector<int32_t> doc20 = long_doc;
  doc20.resize(20);
  const std::vector<std::vector<int32_t>> one = {doc20};
  const PerplexityResult r = EvaluatePerplexity(*gen_, one, 8, 8);
  EXPECT_EQ(r.num_predicted, 17);
  EXPECT_EQ(r.num_windows, 3);
}

TEST_F(PerplexityTest, NothingToScoreGivesNaN) {
  const std::vector<std::vector<int32_t>> docs = {{}, {gen_->tokenizer().bos_id()}};
  const PerplexityResult r = EvaluatePerplexity(*gen_, docs, 16, 8);
  EXPECT_EQ(r.num_predicted, 0);
  EXPECT_EQ(r.num_windows, 0);
  EXPECT_TRUE(std::isnan(r.perplexity));
}

TEST_F(PerplexityTest, OwnGreedyTextBeatsItsShuffle) {
  const std::vector<int32_t> prompt = Tokens("Once upon a time");
  SamplingParams params;
  params.temperature = 0.0;
  params.max_tokens = 150;
  params.ignore_eos = true;
  const GenerationResult g = gen_->Generate(prompt, params);
  std::vector<int32_t> greedy = prompt;
  greedy.insert(greedy.end(), g.output_ids.begin(), g.output_ids.end());
  std::vector<int32_t> shuffled = greedy;
  std::mt19937 rng(1234);
  std::shuffle(shuffled.begin() + 1, shuffled.end(), rng);  // BOS stays first
  const std::vector<std::vector<int32_t>> a = {greedy}, b = {shuffled};
  const PerplexityResult ra = EvaluatePerplexity(*gen_, a, 64, 32);
  const PerplexityResult rb = EvaluatePerplexity(*gen_, b, 64, 32);
  EXPECT_EQ(ra.num_predicted, rb.num_predicted);
  EXPECT_LT(ra.perplexity, 2.5);
  std::printf("[perplexity] greedy %.4f, shuffled %.4f\n", ra.perplexity, rb.perplexity);
  EXPECT_GT(rb.perplexity, 10.0 * ra.perplexity);
}

TEST(SplitDocuments, BlankLinesSeparateDocuments) {
  using V = std::vector<std::string>;
  EXPECT_EQ(SplitDocuments(""), V{});
  EXPECT_EQ(SplitDocuments("\n\n \t\n"), V{});
  EXPECT_EQ(SplitDocuments("one"), V{"one"});
  EXPECT_EQ(SplitDocuments("a b\nc\n\nd\n"), (V{"a b\nc", "d"}));
  EXPECT_EQ(SplitDocuments("\n\na\n\n\n  \nb\r\nc\r\n\r\nd"), (V{"a", "b\nc", "d"}));
}

// Reads `key value` lines written by llama_ref.py --ppl-out.
std::map<std::string, double> ReadReference(const std::string& path) {
  std::ifstream in(path);
  std::map<std::string, double> kv;
  std::string key;
  double value;
  while (in >> key >> value) kv[key] = value;
  return kv;
}

TEST_F(PerplexityTest, MatchesFloat64Reference) {
  const std::string path = std::string(TQ_REF_DIR) + "/perplexity_ref.txt";
  const auto ref = ReadReference(path);
  ASSERT_TRUE(ref.count("perplexity") && ref.count("num_predicted") && ref.count("nll_sum"))
      << path << " missing or incomplete: run ctest -R reference.perplexity first";
  std::ifstream in(kStories);
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<std::string> texts = SplitDocuments(ss.str());
  ASSERT_EQ(texts.size(), 3u);
  std::vector<std::vector<int32_t>> docs;
  for (const auto& t : texts) docs.push_back(Tokens(t));
  const PerplexityResult r = EvaluatePerplexity(*gen_, docs, 64, 32);
  EXPECT_EQ(r.num_predicted, static_cast<int64_t>(ref.at("num_predicted")));
  const double ppl = ref.at("perplexity");
  EXPECT_NEAR(r.perplexity, ppl, 1e-4 * ppl);
  EXPECT_NEAR(r.nll_sum, ref.at("nll_sum"), 1e-4 * ref.at("nll_sum"));
  std::printf(
      "[perplexity] tqserve %.6f vs float64 reference %.6f over %lld tokens "
      "(relative difference %.2e)\n",
      r.perplexity, ppl, static_cast<long long>(r.num_predicted),
      std::abs(r.perplexity - ppl) / ppl);
}

// `tqserve eval` end to end.
class EvalCliTest : public testing::TempDirTest {
 protected:
  struct Result {
    int status;
    std::string out, err;
  };
  Result Run(const std::string& args) {
    if (!std::filesystem::exists(TQ_BINARY)) {
      ADD_FAILURE() << TQ_BINARY << " not built";
      return {-1, "", ""};
    }
    const std::string out = Path("out"), err = Path("err");
    const std::string cmd = std::string("timeout 60 '") + TQ_BINARY + "' " + args + " >'" + out +
                            "' 2>'" + err + "' </dev/null";
    const int status = std::system(cmd.c_str());
    auto slurp = [](const std::string& p) {
      std::ifstream f(p);
      std::stringstream s;
      s << f.rdbuf();
      return s.str();
    };
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  }
};

TEST_F(EvalCliTest, PrintsPerplexityLine) {
  const Result r = Run("eval --model '" + std::string(TQ_MODEL_DIR) + "' --text '" + kStories +
                       "' --ctx 64 --stride 32 --max-documents 2 --threads 2 --kv-cache-dtype tq3");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("perplexity "), std::string::npos) << r.out;
  // The tq3 start-up line reports capacity and calibration.
  EXPECT_NE(r.out.find("(2 documents, ctx 64, stride 32, kv-cache-dtype tq3)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("KV cache tq3 (5 bits/element)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("calibrated on the built-in text"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ntime "), std::string::npos) << r.out;
}

TEST_F(EvalCliTest, ErrorsNameTheFile) {
  const std::string model = " --model '" + std::string(TQ_MODEL_DIR) + "'";
  Result r = Run("eval" + model + " --text '" + Path("missing.txt") + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("missing.txt"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  std::ofstream(Path("blank.txt")) << "\n  \n\n";
  r = Run("eval" + model + " --text '" + Path("blank.txt") + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("blank.txt"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = Run("eval" + model + " --text '" + kStories + "' --ctx 1000");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--ctx"), std::string::npos) << r.err;
  r = Run("eval" + model + " --text '" + kStories + "' --ctx 64 --stride 65");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--stride"), std::string::npos) << r.err;
  r = Run("eval" + model + " --text '" + kStories + "' --kv-cache-dtype fp7");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--kv-cache-dtype"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tq
