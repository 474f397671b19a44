// Quantized vocabulary tables (issue 22 item 4): embed_tokens and lm_head
// under the quantization config. Config rules (only an override naming them
// selects them), the tied table stored once and read by both uses, bytes per
// precision (the tqserve_memory_weights_bytes source) counted from the model's
// shapes, the TP lm_head shard holding the unsplit model's rows, offline
// checkpoints giving the load-time logits, and a backend whose Embedding reads
// dense tables only refusing a quantized embed_tokens.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/llama_weights.h"
#include "engine/model/random_model.h"
#include "engine/quant/quant_config.h"
#include "engine/quant/quantized_checkpoint.h"
#include "engine/runtime/offline_engine.h"
#include "kernels/cpu/weight_decode.h"
#include "temp_dir_test.h"
#include "tests/unit/forwarding_backend.h"

namespace tq {
namespace {

using kernels::WeightDtype;
using ::testing::HasSubstr;

const std::string kConfigs = TQ_SOURCE_DIR "/configs";

// Linears 16-bit; the vocabulary table(s) int4 g32 symmetric.
constexpr const char* kTablesW4 =
    R"({"bits": 16, "overrides": [{"modules": ["embed_tokens", "lm_head"], "bits": 4,
        "group_size": 32, "symmetric": true}]})";

quant::QuantConfig Parse(const std::string& text) {
  return quant::QuantConfig::Parse(text, "cfg.json");
}

std::vector<uint8_t> Bytes(const kernels::BackendBuffer& b) {
  const auto* p = b.as<const uint8_t>();
  return p ? std::vector<uint8_t>(p, p + b.bytes()) : std::vector<uint8_t>();
}

std::vector<uint8_t> Rows(const kernels::BackendBuffer& b, size_t row_bytes, size_t row0,
                          size_t rows) {
  const auto* p = b.as<const uint8_t>() + row0 * row_bytes;
  return std::vector<uint8_t>(p, p + rows * row_bytes);
}

TEST(QuantTablesConfig, OnlyOverridesNamingTheTablesSelectThem) {
  ModelConfig tied = LoadModelFiles(TQ_MODEL_DIR).config;
  ASSERT_TRUE(tied.tie_word_embeddings);
  ModelConfig untied = tied;
  untied.tie_word_embeddings = false;
  // Top-level bits and a "*" glob keep meaning the linear modules only.
  auto plan = quant::PlanFormats(
      Parse(R"({"bits": 8, "group_size": -1, "overrides": [{"modules": "*", "bits": 4}]})"),
      untied);
  EXPECT_EQ(plan.size(), 35u);
  EXPECT_EQ(plan.count(quant::kEmbedTokensModule) + plan.count(quant::kLmHeadModule), 0u);
  // Tied: the one table, also named by "lm_head"; the plan key is embed_tokens.
  plan = quant::PlanFormats(Parse(kTablesW4), tied);
  EXPECT_EQ(plan.size(), 36u);
  EXPECT_EQ(plan.at(quant::kEmbedTokensModule).ToString(), "int4 g32 sym");
  EXPECT_EQ(plan.at("model.layers.0.mlp.down_proj").bits, 16);
  plan = quant::PlanFormats(
      Parse(R"({"bits": 16, "group_size": 64, "overrides": [{"modules": "lm_head", "bits": 8}]})"),
      tied);
  EXPECT_EQ(plan.at(quant::kEmbedTokensModule).ToString(), "int8 g64 asym");  // defaults' group
  // Untied: full and short names; group -1 = hidden; a 16-bit table has no entry.
  plan = quant::PlanFormats(Parse(R"({"bits": 16, "overrides": [
      {"modules": "model.embed_tokens", "bits": 4, "group_size": -1},
      {"modules": "lm_head", "bits": 8, "group_size": 16, "symmetric": true},
      {"modules": "lm_head", "bits": 16}]})"),
                            untied);
  EXPECT_EQ(plan.at(quant::kEmbedTokensModule).ToString(), "int4 g64 asym");
  EXPECT_EQ(plan.count(quant::kLmHeadModule), 0u);
  // The per-module config `tqserve quantize --config-out` writes plans the same.
  EXPECT_EQ(quant::PlanFormats(Parse(quant::PerModuleConfigJson(plan, "t")), untied), plan);
  // An override limited to layers never selects a table; a bad group is named.
  try {
    quant::PlanFormats(
        Parse(R"({"bits": 16, "overrides": [{"modules": "lm_head", "layers": [0], "bits": 4}]})"),
        untied);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("override 0 (lm_head) matches no module"));
  }
  try {
    quant::PlanFormats(
        Parse(
            R"({"bits": 16, "overrides": [{"modules": "lm_head", "bits": 4, "group_size": 48}]})"),
        untied);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cfg.json: lm_head: group_size 48 does not divide"));
  }
}

class QuantTablesTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    files_ = LoadModelFiles(TQ_MODEL_DIR);
  }
  // The float kernels' row-major layout (integer = false) or the int tiles.
  static std::unique_ptr<kernels::Backend> Cpu(bool integer) {
    return kernels::CreateCpuBackend(1, kernels::CpuMatMulChoice{integer, {}});
  }
  static LlamaWeights Load(const std::string& dir, const ModelConfig& c, kernels::Backend* be,
                           const std::string& config_text, const TpPlan& plan = {}) {
    quant::QuantConfig cfg;
    WeightLoadOptions opts;
    if (!config_text.empty()) {
      cfg = Parse(config_text);
      opts.quant = &cfg;
    }
    return LoadLlamaWeights(dir, c, be, plan, opts);
  }
  static EngineOptions Options(const std::string& dir, const std::string& quant_config = "") {
    EngineOptions o;
    o.model_dir = dir;
    o.num_threads = 1;
    o.kv_cache_dtype = kernels::KvDtype::kF32;
    o.quantization_config = quant_config;
    return o;
  }
  // A random untied model whose every matrix takes group 32 (intermediate 192).
  std::string UntiedModel() {
    RandomModelSpec spec;
    spec.config = files_.config;
    spec.config.tie_word_embeddings = false;
    spec.config.intermediate_size = 192;
    WriteRandomModel(Path("m"), spec, std::string(TQ_MODEL_DIR) + "/tokenizer.model");
    return Path("m");
  }
  ModelFiles files_;
};

// stories260K (tied, vocab 512 x hidden 64): the table int4 g32 sym is 512 *
// 32 code bytes + 512 * 2 fp16 scales; linears fp16 (5 layers of 45,312
// parameters); 11 norms of 64 fp32.
TEST_F(QuantTablesTest, TiedTableIsQuantizedOnceAndSharedByLmHead) {
  const std::map<std::string, size_t> want = {
      {"int4", 512 * 32 + 512 * 2 * 2}, {"fp16", 5 * 45312 * 2}, {"fp32", 11 * 64 * 4}};
  auto rows_be = Cpu(false);
  auto tiles_be = Cpu(true);
  const LlamaWeights rows = Load(TQ_MODEL_DIR, files_.config, rows_be.get(), kTablesW4);
  const LlamaWeights tiles = Load(TQ_MODEL_DIR, files_.config, tiles_be.get(), kTablesW4);
  for (const LlamaWeights* w : {&rows, &tiles}) {
    EXPECT_EQ(w->BytesByPrecision(), want);
    EXPECT_EQ(w->total_bytes, 18432u + 453120u + 2816u);
    EXPECT_TRUE(w->lm_head.empty());  // no second copy
    EXPECT_EQ(w->LmHeadView(512).data, w->embed_tokens.View().data);
    EXPECT_EQ(w->LmHeadView(512).scales, w->embed_tokens.View().scales);
  }
  EXPECT_EQ(rows.embed_tokens.dtype, WeightDtype::kInt4);
  // The integer kernels' tiles: lm_head's matmul layout, which Embedding reads too.
  EXPECT_EQ(tiles.embed_tokens.dtype, WeightDtype::kInt4Tiles);
  std::vector<float> a(64), b(64);
  for (int32_t o = 0; o < 512; ++o) {
    kernels::cpu::DecodeWeightRow(rows.embed_tokens.View(), o, a.data());
    kernels::cpu::DecodeWeightRow(tiles.embed_tokens.View(), o, b.data());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * 64)) << o;
  }
  // The served model's weights (the tqserve_memory_weights_bytes gauge's
  // source) count the table as int4; the shipped configs keep it 16-bit.
  std::ofstream(Path("tables.json")) << kTablesW4;
  EXPECT_EQ(OfflineEngine(Options(TQ_MODEL_DIR, Path("tables.json")))
                .model()
                .weights()
                .BytesByPrecision(),
            want);
  const LlamaWeights w8 = Load(
      TQ_MODEL_DIR, files_.config, tiles_be.get(),
      R"({"bits": 8, "group_size": 32, "overrides": [{"modules": "mlp.down_proj", "group_size": 86}]})");
  // fp16, tied: in lm_head's fp16 column panels, which Embedding reads too.
  EXPECT_EQ(w8.embed_tokens.dtype, WeightDtype::kF16Panels);
}

// Tensor parallelism: rank 1 of 2 holds lm_head rows 256..511 as its own
// copy, the same codes and scales as those rows of the unsplit table; the
// checkpoint written by `tqserve quantize` slices the same way.
TEST_F(QuantTablesTest, TensorParallelShardOfAQuantizedTableHoldsTheUnsplitRows) {
  auto be = Cpu(false);
  const auto plan = quant::PlanFormats(Parse(kTablesW4), files_.config);
  quant::WriteQuantizedCheckpoint(TQ_MODEL_DIR, files_.config, plan, Path("q"));
  const LlamaWeights whole = Load(TQ_MODEL_DIR, files_.config, be.get(), kTablesW4);
  const TpPlan rank1 = MakeTpPlan(files_.config, 1, 2);
  for (const std::string& dir : {std::string(TQ_MODEL_DIR), Path("q")}) {
    const LlamaWeights part =
        Load(dir, files_.config, be.get(), dir == TQ_MODEL_DIR ? kTablesW4 : "", rank1);
    ASSERT_FALSE(part.lm_head.empty()) << dir;
    EXPECT_EQ(part.lm_head.dtype, WeightDtype::kInt4);
    EXPECT_EQ(part.lm_head.out_features, 256);
    EXPECT_EQ(Bytes(part.lm_head.data), Rows(whole.embed_tokens.data, 32, 256, 256)) << dir;
    EXPECT_EQ(Bytes(part.lm_head.scales), Rows(whole.embed_tokens.scales, 4, 256, 256)) << dir;
    EXPECT_EQ(Bytes(part.embed_tokens.data), Bytes(whole.embed_tokens.data)) << dir;
  }
}

// Load-time quantization and the offline checkpoint give the same logits,
// tied (stories260K) and untied (the shipped llama_w4_all.json: every matrix
// int4 g32 sym, 4.5 bits, as llama.cpp's Q4_0 with --quant-embd-output).
TEST_F(QuantTablesTest, OfflineCheckpointLogitsEqualLoadTime) {
  const std::string untied = UntiedModel();
  const ModelConfig uc = LoadModelFiles(untied).config;
  std::ofstream(Path("tables.json")) << kTablesW4;
  struct Case {
    std::string dir, config;
    ModelConfig model;
  };
  for (const Case& c : {Case{TQ_MODEL_DIR, Path("tables.json"), files_.config},
                        Case{untied, kConfigs + "/llama_w4_all.json", uc}}) {
    const std::string out = Path(c.dir == untied ? "q_untied" : "q_tied");
    const auto plan = quant::PlanFormats(quant::QuantConfig::Load(c.config), c.model);
    const quant::QuantizeSummary s = quant::WriteQuantizedCheckpoint(c.dir, c.model, plan, out);
    OfflineEngine load_time(Options(c.dir, c.config));
    OfflineEngine offline(Options(out));
    OfflineEngine dense(Options(c.dir));
    std::vector<int32_t> prompt = load_time.tokenizer().Encode("Once upon a time there", false);
    prompt.insert(prompt.begin(), load_time.tokenizer().bos_id());
    const std::vector<float> logits = load_time.PromptLogits(prompt);
    EXPECT_EQ(logits, offline.PromptLogits(prompt)) << c.config;
    EXPECT_NE(logits, dense.PromptLogits(prompt)) << c.config;  // the tables did change
    EXPECT_EQ(offline.model().weights().BytesByPrecision(),
              load_time.model().weights().BytesByPrecision());
    if (c.dir == untied) {
      EXPECT_EQ(s.quantized_modules, 37);  // 35 linears, embed_tokens, lm_head
      // 311,296 parameters, all int4 g32 sym: 4.5 bits each; 11 fp32 norms.
      EXPECT_EQ(load_time.model().weights().BytesByPrecision(),
                (std::map<std::string, size_t>{{"int4", 311296 / 2 + 311296 / 32 * 2},
                                               {"fp32", 11 * 64 * 4}}));
      EXPECT_EQ(load_time.model().weights().lm_head.dtype, WeightDtype::kInt4Tiles);
      EXPECT_EQ(load_time.model().weights().embed_tokens.dtype, WeightDtype::kInt4);  // rows
    } else {
      EXPECT_EQ(s.quantized_modules, 1);
    }
  }
}

// A backend whose Embedding reads dense tables only (the CUDA backend's
// capabilities) refuses a quantized embed_tokens at load; lm_head alone loads.
class DenseEmbeddingBackend final : public ForwardingBackend {
 public:
  std::string_view Name() const override { return "dense-embedding"; }
  kernels::BackendCapabilities Capabilities() const override { return {}; }
  // Weights as loaded (the CPU's repacked layouts are its own).
  kernels::WeightView PrepareWeight(const kernels::WeightView& w,
                                    kernels::BackendBuffer* storage) override {
    return kernels::Backend::PrepareWeight(w, storage);
  }
};

TEST_F(QuantTablesTest, BackendWithoutIntegerEmbeddingRefusesAQuantizedTable) {
  DenseEmbeddingBackend be;
  try {
    Load(TQ_MODEL_DIR, files_.config, &be, kTablesW4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.embed_tokens is int4 g32 sym but the dense-embedding "
                                    "backend's Embedding reads fp32/fp16/bf16 tables only"));
  }
  const std::string untied = UntiedModel();
  const LlamaWeights w =
      Load(untied, LoadModelFiles(untied).config, &be,
           R"({"bits": 16, "overrides": [{"modules": "lm_head", "bits": 8, "group_size": 32}]})");
  EXPECT_EQ(w.lm_head.dtype, WeightDtype::kInt8);
  EXPECT_EQ(w.embed_tokens.dtype, WeightDtype::kF16);
}

}  // namespace
}  // namespace tq
