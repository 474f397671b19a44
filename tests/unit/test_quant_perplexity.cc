// Quantized stories260K end to end: perplexity over held-out TinyStories
// validation text (tests/data/tinystories_valid_sample.txt, stories 40..175)
// relative to the fp32 model measured in the same test: w8 within 0.5%,
// mix4b8b within 3% (issue 7), a sensitivity-chosen config better than the
// uniform int4 config of the same average bits; a checkpoint written by
// `tqserve quantize` gives the same logits and greedy text as load-time
// quantization. KV cache fp32 throughout, so only the weights differ.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/safetensors.h"
#include "engine/quant/quant_config.h"
#include "engine/quant/quantized_checkpoint.h"
#include "engine/quant/sensitivity.h"
#include "engine/runtime/offline_engine.h"
#include "engine/runtime/perplexity.h"
#include "sanitizer_build.h"
#include "temp_dir_test.h"

namespace tq {
namespace {

const std::string kData = TQ_TEST_DATA_DIR;
constexpr size_t kCalibrationDocs = 40;

// Under ASan/UBSan or TSan (~15x slower) the perplexity bounds, which need the
// whole held-out text, would take ~8 minutes of CI: they are asserted in the
// Release run, and the sanitizer run covers the same code (quantize, load,
// calibrate, score, allocate) on a few documents.
constexpr bool kSanitized = kSanitizerBuild;

EngineOptions Options(const std::string& model_dir, const std::string& quant_config = "") {
  EngineOptions o;
  o.model_dir = model_dir;
  o.num_threads = 1;
  o.kv_cache_dtype = kernels::KvDtype::kF32;
  o.quantization_config = quant_config;
  return o;
}

class QuantPerplexityTest : public testing::TempDirTest {
 protected:
  static void SetUpTestSuite() {
    std::ifstream in(kData + "/tinystories_valid_sample.txt");
    std::stringstream ss;
    ss << in.rdbuf();
    texts_ = SplitDocuments(ss.str());
    ASSERT_EQ(texts_.size(), 176u);
    if (!kSanitized) fp32_ppl_ = Perplexity(Options(TQ_MODEL_DIR));
  }

  // Per-document ids with BOS, as `tqserve eval` scores them.
  static std::vector<std::vector<int32_t>> Docs(OfflineEngine& g, size_t begin, size_t end) {
    std::vector<std::vector<int32_t>> docs;
    for (size_t i = begin; i < end; ++i) {
      std::vector<int32_t> ids = g.tokenizer().Encode(texts_[i], false);
      ids.insert(ids.begin(), g.tokenizer().bos_id());
      docs.push_back(std::move(ids));
    }
    return docs;
  }

  // Perplexity on the held-out stories (ctx 512, stride 256).
  static double Perplexity(const EngineOptions& options) {
    OfflineEngine g(options);
    const auto docs = Docs(g, kCalibrationDocs, texts_.size());
    return EvaluatePerplexity(g, docs, 512, 256).perplexity;
  }

  static std::vector<std::string> texts_;
  static double fp32_ppl_;
};

std::vector<std::string> QuantPerplexityTest::texts_;
double QuantPerplexityTest::fp32_ppl_ = 0.0;

TEST_F(QuantPerplexityTest, W8AndMixStayWithinTheIssueBounds) {
  if (kSanitized) GTEST_SKIP() << "bounds over the whole held-out text: Release run only";
  ASSERT_GT(fp32_ppl_, 1.0);
  const double w8 = Perplexity(Options(TQ_MODEL_DIR, kData + "/quant_stories_w8.json"));
  const double mix = Perplexity(Options(TQ_MODEL_DIR, kData + "/quant_stories_mix4b8b.json"));
  const double w4 = Perplexity(Options(TQ_MODEL_DIR, kData + "/quant_stories_w4.json"));
  std::printf(
      "perplexity fp32 %.4f, w8 %.4f (%+.2f%%), mix4b8b %.4f (%+.2f%%), w4 %.4f (%+.2f%%)\n",
      fp32_ppl_, w8, 100 * (w8 / fp32_ppl_ - 1), mix, 100 * (mix / fp32_ppl_ - 1), w4,
      100 * (w4 / fp32_ppl_ - 1));
  EXPECT_LT(w8 / fp32_ppl_, 1.005);
  EXPECT_LT(mix / fp32_ppl_, 1.03);
  // Fewer bits cost more: a check that the formats were really applied.
  EXPECT_GT(mix, w8);
  EXPECT_GT(w4, mix);
}

TEST_F(QuantPerplexityTest, SensitivityChoiceBeatsUniformOfTheSameBits) {
  const ModelConfig config = LoadModelFiles(TQ_MODEL_DIR).config;
  const std::vector<quant::LinearModule> modules = quant::LlamaLinearModules(config);
  const std::string uniform = kData + "/quant_stories_w4.json";
  const double target =
      quant::AverageBits(modules, quant::PlanFormats(quant::QuantConfig::Load(uniform), config));

  OfflineEngine g(Options(TQ_MODEL_DIR));
  std::vector<int32_t> calibration;
  for (const auto& doc : Docs(g, 0, kSanitized ? 4 : kCalibrationDocs)) {
    calibration.insert(calibration.end(), doc.begin(), doc.end());
  }
  const quant::ActivationMoments moments = quant::MeasureActivationMoments(g, calibration);
  EXPECT_EQ(moments.tokens(), static_cast<int64_t>(calibration.size()));
  const SafetensorsCheckpoint ckpt(TQ_MODEL_DIR);
  const auto scored = quant::ScoreModules(ckpt, config, moments, false);
  const auto chosen = quant::AllocateBits(scored, target);
  EXPECT_LE(quant::AverageBits(modules, chosen), target + 1e-12);
  const auto uniform_formats = quant::PlanFormats(quant::QuantConfig::Load(uniform), config);
  EXPECT_LT(quant::TotalLoss(scored, chosen), quant::TotalLoss(scored, uniform_formats));

  const std::string path = Path("chosen.json");
  std::ofstream(path) << quant::PerModuleConfigJson(chosen, "test");
  if (kSanitized) {
    OfflineEngine loads(Options(TQ_MODEL_DIR, path));  // the written config loads
    GTEST_SKIP() << "perplexity comparison over the whole held-out text: Release run only";
  }
  const double sens = Perplexity(Options(TQ_MODEL_DIR, path));
  const double base = Perplexity(Options(TQ_MODEL_DIR, uniform));
  std::printf(
      "%.4f bits per weight: uniform int4 %.4f (%+.2f%%), sensitivity-chosen %.4f (%+.2f%%)\n",
      target, base, 100 * (base / fp32_ppl_ - 1), sens, 100 * (sens / fp32_ppl_ - 1));
  EXPECT_LT(sens, base);
}

TEST_F(QuantPerplexityTest, OfflineCheckpointEqualsLoadTimeQuantization) {
  const std::string cfg = kData + "/quant_stories_mix4b8b.json";
  const ModelConfig config = LoadModelFiles(TQ_MODEL_DIR).config;
  quant::WriteQuantizedCheckpoint(
      TQ_MODEL_DIR, config, quant::PlanFormats(quant::QuantConfig::Load(cfg), config), Path("q"));
  OfflineEngine load_time(Options(TQ_MODEL_DIR, cfg));
  OfflineEngine offline(Options(Path("q")));
  const std::vector<int32_t> prompt = Docs(load_time, 50, 51)[0];
  EXPECT_EQ(load_time.PromptLogits(prompt), offline.PromptLogits(prompt));
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 64;
  greedy.ignore_eos = true;
  std::vector<int32_t> once = load_time.tokenizer().Encode("Once upon a time", false);
  once.insert(once.begin(), load_time.tokenizer().bos_id());
  const GenerationResult a = load_time.Generate(once, greedy);
  const GenerationResult b = offline.Generate(once, greedy);
  EXPECT_EQ(a.output_ids, b.output_ids);
  EXPECT_EQ(a.output_ids.size(), 64u);
}

// The CLI: `tqserve quantize --calibration-text --target-bits` writes a
// config and a checkpoint that `tqserve generate` runs, with the same text as
// `generate --quantization-config` of that config.
TEST_F(QuantPerplexityTest, CliQuantizeThenGenerateMatchesLoadTime) {
  std::ofstream(Path("calib.txt")) << texts_[0] << "\n\n" << texts_[1] << "\n\n" << texts_[2];
  auto run = [](const std::string& args, bool expect_ok = true) {
    std::string out;
    FILE* p = ::popen((std::string(TQ_BINARY) + " " + args + " 2>&1").c_str(), "r");
    std::array<char, 4096> buf{};
    while (p && std::fgets(buf.data(), buf.size(), p)) out += buf.data();
    const int status = p ? ::pclose(p) : -1;
    EXPECT_EQ(WIFEXITED(status) && WEXITSTATUS(status) == 0, expect_ok) << args << "\n" << out;
    return out;
  };
  const std::string q = run("quantize --model " + std::string(TQ_MODEL_DIR) +
                            " --calibration-text " + Path("calib.txt") + " --target-bits 6 --out " +
                            Path("q") + " --config-out " + Path("q.json"));
  EXPECT_THAT(q, ::testing::HasSubstr("bits per weight (target 6.0000)"));
  const std::string gen = " --prompt 'Once upon a time' --max-tokens 40 --temperature 0 --quiet";
  const std::string offline = run("generate --model " + Path("q") + gen);
  const std::string load_time = run("generate --model " + std::string(TQ_MODEL_DIR) +
                                    " --quantization-config " + Path("q.json") + gen);
  EXPECT_EQ(offline, load_time);
  EXPECT_GT(offline.size(), 60u);
  const std::string bad =
      run("quantize --model " + std::string(TQ_MODEL_DIR) + " --target-bits 6 --out " + Path("x"),
          false);
  EXPECT_THAT(bad, ::testing::HasSubstr("--calibration-text and --target-bits go together"));
}

}  // namespace
}  // namespace tq
