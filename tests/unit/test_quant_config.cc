// Quantization configs (engine/quant/quant_config.h): the shipped configs
// resolved on a Llama-2-7B shape, overrides by glob and layer range, and the
// errors for bad configs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "engine/common/error.h"
#include "engine/model/model_config.h"
#include "engine/model/random_model.h"
#include "engine/quant/quant_config.h"

namespace tq::quant {
namespace {

using ::testing::HasSubstr;

const std::string kConfigs = std::string(TQ_SOURCE_DIR) + "/configs/";

// Llama-2-7B's shape (hidden 4096, intermediate 11008, 32 layers).
ModelConfig Llama7B() {
  return RandomModelPreset("llama2-7b");
}

ModelConfig Stories260K() {
  return LoadModelFiles(TQ_MODEL_DIR).config;
}

std::string ErrorOf(const std::string& json, const ModelConfig& model = Stories260K()) {
  try {
    PlanFormats(QuantConfig::Parse(json, "cfg.json"), model);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(QuantConfigTest, ShippedConfigsOnLlama7B) {
  const ModelConfig c = Llama7B();
  ASSERT_EQ(c.hidden_size, 4096);
  ASSERT_EQ(c.intermediate_size, 11008);
  ASSERT_EQ(c.num_hidden_layers, 32);
  const auto w8 = PlanFormats(QuantConfig::Load(kConfigs + "llama_w8.json"), c);
  const auto w4 = PlanFormats(QuantConfig::Load(kConfigs + "llama_w4g128.json"), c);
  const auto mix = PlanFormats(QuantConfig::Load(kConfigs + "llama_mix4b8b.json"), c);
  ASSERT_EQ(w8.size(), 32u * 7);
  for (const auto& [name, f] : w8) EXPECT_EQ(f, (QuantFormat{8, 128, true})) << name;
  for (const auto& [name, f] : w4) EXPECT_EQ(f, (QuantFormat{4, 128, false})) << name;
  const QuantFormat a4{4, 128, false}, m8{8, 128, false};
  EXPECT_EQ(mix.at("model.layers.0.self_attn.q_proj"), a4);
  EXPECT_EQ(mix.at("model.layers.31.self_attn.o_proj"), a4);
  EXPECT_EQ(mix.at("model.layers.0.mlp.gate_proj"), m8);
  EXPECT_EQ(mix.at("model.layers.17.mlp.down_proj"), m8);
  const std::vector<LinearModule> modules = LlamaLinearModules(c);
  // Per layer: attention 4 x 4096^2, MLP 3 x 4096 x 11008 parameters.
  const double attn = 4.0 * 4096 * 4096, mlp = 3.0 * 4096 * 11008;
  EXPECT_NEAR(AverageBits(modules, mix), (attn * 4.25 + mlp * 8.25) / (attn + mlp), 1e-12);
  EXPECT_DOUBLE_EQ(AverageBits(modules, w8), 8.125);
}

TEST(QuantConfigTest, TestConfigsFitStories260K) {
  const auto mix =
      PlanFormats(QuantConfig::Load(std::string(TQ_TEST_DATA_DIR) + "/quant_stories_mix4b8b.json"),
                  Stories260K());
  EXPECT_EQ(mix.at("model.layers.2.self_attn.k_proj"), (QuantFormat{4, 32, false}));
  EXPECT_EQ(mix.at("model.layers.2.mlp.up_proj"), (QuantFormat{8, 32, false}));
  EXPECT_EQ(mix.at("model.layers.4.mlp.down_proj"), (QuantFormat{8, 86, false}));
}

TEST(QuantConfigTest, OverridesApplyInOrderFieldByField) {
  const QuantConfig cfg = QuantConfig::Parse(R"({
    "bits": 4, "group_size": 32,
    "overrides": [
      {"modules": "self_attn.*", "symmetric": true},
      {"modules": ["mlp.down_proj"], "bits": 8, "group_size": -1},
      {"modules": "*", "layers": [0, [-2, -1]], "bits": 8},
      {"modules": "model.layers.2.self_attn.v_proj", "bits": 16}
    ]})",
                                             "cfg.json");
  const auto plan = PlanFormats(cfg, Stories260K());
  EXPECT_EQ(plan.at("model.layers.1.self_attn.q_proj"), (QuantFormat{4, 32, true}));
  EXPECT_EQ(plan.at("model.layers.1.mlp.up_proj"), (QuantFormat{4, 32, false}));
  EXPECT_EQ(plan.at("model.layers.1.mlp.down_proj"), (QuantFormat{8, 172, false}));
  // First and last two layers at 8 bits, keeping the group size and symmetry.
  EXPECT_EQ(plan.at("model.layers.0.self_attn.q_proj"), (QuantFormat{8, 32, true}));
  EXPECT_EQ(plan.at("model.layers.3.mlp.gate_proj"), (QuantFormat{8, 32, false}));
  EXPECT_EQ(plan.at("model.layers.4.mlp.gate_proj"), (QuantFormat{8, 32, false}));
  EXPECT_EQ(plan.at("model.layers.2.mlp.gate_proj"), (QuantFormat{4, 32, false}));
  EXPECT_EQ(plan.at("model.layers.2.self_attn.v_proj").bits, 16);
}

TEST(QuantConfigTest, PerModuleJsonRoundTrips) {
  auto plan =
      PlanFormats(QuantConfig::Load(std::string(TQ_TEST_DATA_DIR) + "/quant_stories_mix4b8b.json"),
                  Stories260K());
  plan["model.layers.3.self_attn.q_proj"] = {16, 0, false};
  const std::string text = PerModuleConfigJson(plan, "test");
  EXPECT_EQ(PlanFormats(QuantConfig::Parse(text, "out.json"), Stories260K()), plan);
}

// Integers beyond int32 are refused, not wrapped (4294967328 = 2^32 + 32
// would otherwise load as group 32, 2^32 + 8 as int8, 2^32 as layer 0).
TEST(QuantConfigTest, OutOfRangeIntegersAreRefused) {
  EXPECT_THAT(ErrorOf(R"({"bits": 4, "group_size": 4294967328})"),
              HasSubstr("\"group_size\" is out of range: 4294967328"));
  EXPECT_THAT(ErrorOf(R"({"bits": 4294967304})"), HasSubstr("\"bits\" is out of range"));
  EXPECT_THAT(ErrorOf(R"({"bits": 8, "group_size": -1,
                          "overrides": [{"modules": "*", "layers": [4294967296], "bits": 16}]})"),
              HasSubstr("\"layers\" is out of range: 4294967296"));
  EXPECT_THAT(ErrorOf(R"({"bits": 8, "group_size": -1,
                          "overrides": [{"modules": "*", "layers": [[0, -9223372036854775808]],
                                         "bits": 16}]})"),
              HasSubstr("\"layers\" is out of range"));
}

TEST(QuantConfigTest, BadConfigsGiveClearErrors) {
  EXPECT_THAT(ErrorOf("{\"bits\": 4,"), HasSubstr("cfg.json: invalid JSON"));
  EXPECT_THAT(ErrorOf(R"({"bits": 3})"),
              HasSubstr("cfg.json: bits 3 is not supported (4, 8 or 16)"));
  EXPECT_THAT(ErrorOf(R"({"group_size": 32})"), HasSubstr("missing \"bits\""));
  EXPECT_THAT(ErrorOf(R"({"bits": 4, "grup_size": 32})"), HasSubstr("unknown key \"grup_size\""));
  EXPECT_THAT(ErrorOf(R"({"bits": 4, "group_size": 32})"),
              HasSubstr("cfg.json: model.layers.0.mlp.down_proj: group_size 32 does not divide "
                        "in_features 172"));
  EXPECT_THAT(ErrorOf(R"({"bits": 4, "group_size": 32,
                          "overrides": [{"modules": "mlp.down_proj", "group_size": 43}]})"),
              HasSubstr("model.layers.0.mlp.down_proj: int4 needs an even group_size"));
  EXPECT_THAT(ErrorOf(R"({"bits": 8, "group_size": 32,
                          "overrides": [{"modules": "mlp.down_proj", "group_size": 43},
                                        {"modules": "mlp.dwn_proj", "bits": 4}]})"),
              HasSubstr("override 1 (mlp.dwn_proj) matches no module"));
  EXPECT_THAT(ErrorOf(R"({"bits": 8, "group_size": 0})"), HasSubstr("group_size must be"));
  EXPECT_THAT(ErrorOf(R"({"bits": 8, "overrides": [{"bits": 4}]})"), HasSubstr("\"modules\""));
  EXPECT_THAT(ErrorOf(R"({"bits": 8, "group_size": -1,
                          "overrides": [{"modules": "*", "layers": ["0-3"]}]})"),
              HasSubstr("\"layers\" items"));
  EXPECT_THAT(ErrorOf(R"({"bits": "8"})"), HasSubstr("\"bits\" must be an integer"));
  EXPECT_THAT(ErrorOf(R"({"bits": 8, "group_size": -1, "clip_search": 1})"),
              HasSubstr("\"clip_search\" must be true/false"));
  EXPECT_FALSE(PlanFormats(QuantConfig::Parse(R"({"bits": 8, "group_size": -1,
                                                  "clip_search": false})",
                                              "c.json"),
                           Stories260K())
                   .at("model.layers.0.mlp.up_proj")
                   .clip_search);
  EXPECT_THROW(QuantConfig::Load("/nonexistent/q.json"), Error);
}

// stories260K has 5 layers: [3, 1] and [-1, 0] are reversed, 5 and -6 are
// outside; both used to report only "matches no module".
TEST(QuantConfigTest, BadLayerRangesAreNamed) {
  auto with_layers = [](const std::string& layers) {
    return ErrorOf(R"({"bits": 8, "group_size": -1,
                       "overrides": [{"modules": "*", "layers": [)" +
                   layers + R"(], "bits": 16}]})");
  };
  EXPECT_THAT(with_layers("[3, 1]"),
              HasSubstr("override 0: \"layers\" [3, 1] is reversed: layer 3 comes after layer 1"));
  EXPECT_THAT(with_layers("[-1, 0]"), HasSubstr("is reversed: layer 4 comes after layer 0"));
  EXPECT_THAT(with_layers("5"), HasSubstr("[5, 5] is outside this model's layers 0..4"));
  EXPECT_THAT(with_layers("[-6, -1]"), HasSubstr("is outside this model's layers 0..4"));
  EXPECT_EQ(with_layers("[-2, -1]"), "(no error)");
}

TEST(QuantConfigTest, DirectoryIsNotAConfig) {
  try {
    QuantConfig::Load(TQ_SOURCE_DIR "/configs");
    FAIL() << "a directory loaded as a quantization config";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("configs: is a directory; --quantization-config takes a JSON file"));
  }
}

}  // namespace
}  // namespace tq::quant
