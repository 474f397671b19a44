// `--kv-cache-dtype auto` (engine/runtime/kv_dtype_auto.h): the pick rule on
// hand-made scores, and on the bundled model (and trained-hd128 when
// ../shared/models has it) the reported perplexities against the same
// held-out tokens scored by a Generator built with each format explicitly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/kv/kv_calibration.h"
#include "engine/runtime/generator.h"
#include "engine/runtime/kv_dtype_auto.h"
#include "engine/runtime/perplexity.h"

namespace tq {
namespace {

using kernels::KvDtype;

TEST(KvDtypeAuto, PicksTheFewestBitsWithinTheBudget) {
  const std::vector<KvQualityScore> scores = {{KvDtype::kTq3, 3.125, 10.5, 1.05},
                                              {KvDtype::kTq4, 3.625, 10.09, 1.009},
                                              {KvDtype::kInt8, 8.25, 10.0, 1.0}};
  EXPECT_EQ(PickKvDtype(scores, 1.01), KvDtype::kTq4);
  EXPECT_EQ(PickKvDtype(scores, 1.05), KvDtype::kTq3);  // the ratio equal to the budget passes
  EXPECT_EQ(PickKvDtype(scores, 1.0), KvDtype::kInt8);
  EXPECT_EQ(PickKvDtype(std::vector<KvQualityScore>{{KvDtype::kInt8, 8.25, 11.0, 1.1}}, 1.01),
            KvDtype::kF16);  // none within: fp16
}

TEST(KvDtypeAuto, CandidatesFewestBitsFirst) {
  // head_dim 128: tq3 3.125, tq4 3.625, int8 8.25 bits; int4 (4.25) merged in by its bits.
  const KvDtype extra[] = {KvDtype::kInt4};
  EXPECT_EQ(AutoKvCandidates(128, extra),
            (std::vector<KvDtype>{KvDtype::kTq3, KvDtype::kTq4, KvDtype::kInt4, KvDtype::kInt8}));
  EXPECT_EQ(HeldOutTokenCount(600), 200);
  EXPECT_EQ(HeldOutTokenCount(3000), kMaxHeldOutTokens);
}

// Perplexity of `tokens` (first unscored) through a Generator of `dtype`.
double ExplicitPerplexity(const std::string& model, KvDtype dtype,
                          const std::vector<int32_t>& tokens) {
  EngineOptions o;
  o.model_dir = model;
  o.num_threads = 1;
  o.kv_cache_dtype = dtype;
  Generator gen(o);
  const std::vector<float> logits = gen.PromptLogits(tokens);
  const int32_t vocab = gen.files().config.vocab_size;
  double nll = 0.0;
  for (size_t p = 1; p < tokens.size(); ++p) {
    nll += NegLogProb(logits.data() + (p - 1) * vocab, vocab, tokens[p]);
  }
  return std::exp(nll / static_cast<double>(tokens.size() - 1));
}

// Loads `model` with auto, checks each reported perplexity against an
// explicit-dtype Generator on the same held-out tokens; returns the choice.
KvDtypeChoice CheckedChoice(const std::string& model) {
  EngineOptions o;
  o.model_dir = model;
  o.num_threads = 1;
  o.kv_cache_dtype_auto = true;
  Generator gen(o);
  const KvDtypeChoice choice = gen.kv_dtype_choice();
  EXPECT_TRUE(choice.automatic);
  EXPECT_EQ(gen.kv_cache().layout().dtype, choice.dtype);
  // The held-out sequence: BOS, then the built-in held-out text's first tokens.
  std::vector<int32_t> tokens = gen.tokenizer().Encode(BuiltinHeldOutText(), false);
  tokens.resize(std::min<size_t>(tokens.size(), kMaxHeldOutTokens));
  tokens.insert(tokens.begin(), gen.tokenizer().bos_id());
  EXPECT_EQ(choice.scored_tokens, static_cast<int64_t>(tokens.size()) - 1);
  const double reference = ExplicitPerplexity(model, KvDtype::kF32, tokens);
  EXPECT_NEAR(choice.reference_perplexity, reference, 1e-9 * reference);
  EXPECT_EQ(choice.scores.size(), 3u);
  for (const KvQualityScore& s : choice.scores) {
    const double ppl = ExplicitPerplexity(model, s.dtype, tokens);
    EXPECT_NEAR(s.perplexity, ppl, 1e-9 * ppl) << kernels::KvDtypeName(s.dtype);
    EXPECT_NEAR(s.ratio, ppl / reference, 1e-9) << kernels::KvDtypeName(s.dtype);
  }
  EXPECT_NE(choice.Describe().find("budget 1.01"), std::string::npos) << choice.Describe();
  return choice;
}

TEST(KvDtypeAuto, BundledModelGetsAWiderFormatThanTq3) {
  // stories260K (head_dim 8): tq3 costs several percent (docs/kv-cache.md), int8 ~0.
  const KvDtypeChoice c = CheckedChoice(TQ_MODEL_DIR);
  ASSERT_EQ(c.scores.front().dtype, KvDtype::kTq3);
  EXPECT_GT(c.scores.front().ratio, 1.01);
  EXPECT_NE(c.dtype, KvDtype::kTq3);
  EXPECT_GT(kernels::KvBitsPerElement(c.dtype, 8), kernels::KvBitsPerElement(KvDtype::kTq3, 8));
}

TEST(KvDtypeAuto, TrainedHeadDim128GetsTq3) {
  const char* env = std::getenv("TQ_SHARED_MODELS");
  const std::string dir = std::string(env ? env : "/work/shared/models") + "/trained-hd128";
  if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << dir << " not present";
  EXPECT_EQ(CheckedChoice(dir).dtype, KvDtype::kTq3);
}

}  // namespace
}  // namespace tq
