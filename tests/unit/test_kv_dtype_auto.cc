// `--kv-cache-dtype auto` (engine/runtime/kv_dtype_auto.h): the pick rule on
// hand-made scores, and on the bundled model (and trained-hd128 when
// ../shared/models has it) the reported perplexities against the same
// held-out tokens scored by an OfflineEngine built with each format explicitly,
// and the choice against the rule applied to those perplexities.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/kv/kv_calibration.h"
#include "engine/runtime/kv_dtype_auto.h"
#include "engine/runtime/model_loader.h"
#include "engine/runtime/offline_engine.h"
#include "engine/runtime/perplexity.h"
#include "sanitizer_build.h"

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

// Perplexity of `tokens` (first unscored) through an OfflineEngine of `dtype`.
double ExplicitPerplexity(const std::string& model, KvDtype dtype,
                          const std::vector<int32_t>& tokens) {
  EngineOptions o;
  o.model_dir = model;
  o.num_threads = 1;
  o.kv_cache_dtype = dtype;
  OfflineEngine gen(o);
  const std::vector<float> logits = gen.PromptLogits(tokens);
  const int32_t vocab = gen.files().config.vocab_size;
  double nll = 0.0;
  for (size_t p = 1; p < tokens.size(); ++p) {
    nll += NegLogProb(logits.data() + (p - 1) * vocab, vocab, tokens[p]);
  }
  return std::exp(nll / static_cast<double>(tokens.size() - 1));
}

// Bits per element of a head vector (K and V averaged, parameters included),
// from the record layouts of docs/kv-cache.md ("Formats"), not from KvBitsPerElement.
double DocBits(KvDtype dtype, int32_t head_dim) {
  const double d = head_dim;
  const double norms = 2 * 16 / d;  // one fp16 norm for K and one for V, per vector
  switch (dtype) {
    case KvDtype::kTqK3V2:
      return (3 + 2) / 2.0 + norms / 2;  // 3-bit key codes, 2-bit value codes
    case KvDtype::kTq3:
      return 3 + norms / 2;
    case KvDtype::kTq4:
      return (4 + 3) / 2.0 + norms / 2;
    case KvDtype::kInt8:
      return 8 + 2 * 16 / d;  // fp16 scale and zero per vector
    default:
      ADD_FAILURE() << "no documented bits for " << kernels::KvDtypeName(dtype);
      return 0.0;
  }
}

// Loads `model` with auto, checks each reported perplexity against an
// explicit-dtype OfflineEngine on the same held-out tokens, and the choice against
// the rule applied here to those independently measured perplexities (the
// fewest documented bits within the budget 1.01, else fp16); returns the choice.
KvDtypeChoice CheckedChoice(const std::string& model) {
  EngineOptions o;
  o.model_dir = model;
  o.num_threads = 1;
  o.kv_cache_dtype_auto = true;
  OfflineEngine gen(o);
  const KvDtypeChoice choice = gen.loaded().kv_dtype_choice;
  EXPECT_TRUE(choice.automatic);
  EXPECT_EQ(gen.kv_cache().layout().dtype, choice.dtype);
  // The held-out sequence: BOS, then the built-in held-out text's first tokens.
  std::vector<int32_t> tokens = gen.tokenizer().Encode(BuiltinHeldOutText(), false);
  tokens.resize(std::min<size_t>(tokens.size(), kMaxHeldOutTokens));
  tokens.insert(tokens.begin(), gen.tokenizer().bos_id());
  EXPECT_EQ(choice.scored_tokens, static_cast<int64_t>(tokens.size()) - 1);
  const double reference = ExplicitPerplexity(model, KvDtype::kF32, tokens);
  EXPECT_NEAR(choice.reference_perplexity, reference, 1e-9 * reference);
  // The CPU backend implements tqk3v2, so it is a candidate beside tq3, tq4 and int8.
  std::vector<KvDtype> scored;
  for (const KvQualityScore& s : choice.scores) scored.push_back(s.dtype);
  std::sort(scored.begin(), scored.end());
  EXPECT_EQ(scored,
            (std::vector<KvDtype>{KvDtype::kInt8, KvDtype::kTq3, KvDtype::kTq4, KvDtype::kTqK3V2}));
  const int32_t head_dim = gen.files().config.head_dim;
  KvDtype expected = KvDtype::kF16;
  double expected_bits = 1e9;
  for (const KvQualityScore& s : choice.scores) {
    const double ppl = ExplicitPerplexity(model, s.dtype, tokens);
    EXPECT_NEAR(s.perplexity, ppl, 1e-9 * ppl) << kernels::KvDtypeName(s.dtype);
    EXPECT_NEAR(s.ratio, ppl / reference, 1e-9) << kernels::KvDtypeName(s.dtype);
    EXPECT_DOUBLE_EQ(s.bits_per_element, DocBits(s.dtype, head_dim))
        << kernels::KvDtypeName(s.dtype);
    const double bits = DocBits(s.dtype, head_dim);
    if (ppl / reference <= 1.01 && bits < expected_bits) {
      expected = s.dtype;
      expected_bits = bits;
    }
  }
  EXPECT_EQ(choice.dtype, expected) << choice.Describe();
  EXPECT_NE(choice.Describe().find("budget 1.01"), std::string::npos) << choice.Describe();
  return choice;
}

TEST(KvDtypeAuto, BundledModelGetsAWiderFormatThanTq3) {
  // stories260K (head_dim 8): tq3 and tqk3v2 cost several percent on
  // TinyStories (docs/kv-cache.md: +6.8%, +11%), int8 ~0.
  const KvDtypeChoice c = CheckedChoice(TQ_MODEL_DIR);
  ASSERT_EQ(c.scores.size(), 4u);
  EXPECT_EQ(c.scores[0].dtype, KvDtype::kTqK3V2);  // 4.5 bits at d = 8
  EXPECT_EQ(c.scores[1].dtype, KvDtype::kTq3);     // 5 bits
  EXPECT_GT(c.scores[0].ratio, 1.01);
  EXPECT_GT(c.scores[1].ratio, 1.01);
  EXPECT_GT(DocBits(c.dtype, 8), DocBits(KvDtype::kTq3, 8));
}

// Issue 21's acceptance: tq3 or fewer bits (on the built-in held-out text
// tqk3v2 measured 1.0146 on 2026-12-03, outside the budget, so tq3).
TEST(KvDtypeAuto, TrainedHeadDim128GetsTq3OrFewerBits) {
  const char* env = std::getenv("TQ_SHARED_MODELS");
  const std::string dir = std::string(env ? env : "/work/shared/models") + "/trained-hd128";
  if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << dir << " not present";
  if (kSanitizerBuild) {
    GTEST_SKIP() << "the trained-hd128 choice is asserted in the Release run: under a sanitizer "
                    "it takes ~2 minutes, and the bundled-model cases run the same code";
  }
  const KvDtypeChoice c = CheckedChoice(dir);
  EXPECT_LE(DocBits(c.dtype, 128), DocBits(KvDtype::kTq3, 128)) << c.Describe();
}

}  // namespace
}  // namespace tq
