// Random checkpoints: presets against the published parameter counts, a small
// sharded model written and read back through LoadModelFiles /
// SafetensorsCheckpoint / LoadLlamaWeights, weight statistics, determinism.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/common/error.h"
#include "engine/model/llama_weights.h"
#include "engine/model/model_config.h"
#include "engine/model/random_model.h"
#include "engine/model/safetensors.h"
#include "tests/unit/temp_dir_test.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Host-memory backend: only the memory functions LoadLlamaWeights uses.
class HostBackend : public kernels::Backend {
 public:
  std::string_view Name() const override { return "host-test"; }
  void* Allocate(size_t bytes) override {
    allocated += bytes;
    return std::calloc(bytes, 1);
  }
  void Free(void* p) override { std::free(p); }
  void CopyToDevice(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void CopyToHost(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void Embedding(const kernels::EmbeddingParams&) override {}
  void RmsNorm(const kernels::RmsNormParams&) override {}
  void MatMul(const kernels::MatMulParams&) override {}
  void Rope(const kernels::RopeParams&) override {}
  void SiluMul(const kernels::SiluMulParams&) override {}
  void KvWrite(const kernels::KvWriteParams&) override {}
  void PagedAttention(const kernels::PagedAttentionParams&) override {}
  size_t allocated = 0;
};

// Parameters of a Llama model, counted tensor by tensor from the HF layout.
uint64_t CountParams(const ModelConfig& c) {
  const uint64_t h = c.hidden_size, q = uint64_t(c.num_attention_heads) * c.head_dim;
  const uint64_t kv = uint64_t(c.num_key_value_heads) * c.head_dim;
  const uint64_t i = c.intermediate_size, v = c.vocab_size;
  const uint64_t layer = h + q * h + kv * h + kv * h + h * q + h + 3 * i * h +
                         (c.qkv_bias ? q + 2 * kv : 0) +              // Qwen2 q/k/v biases
                         (c.qk_norm ? 2 * uint64_t(c.head_dim) : 0);  // Qwen3 q/k norms
  return v * h + c.num_hidden_layers * layer + h + (c.tie_word_embeddings ? 0 : v * h);
}

std::pair<double, double> MeanStd(const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.NumElements()));
  t.ToFloat(v.data());
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += double(x) * x;
  }
  const double n = static_cast<double>(v.size());
  return {s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
}

class RandomModelTest : public testing::TempDirTest {
 protected:
  static RandomModelSpec SmallSpec() {
    RandomModelSpec s;
    ModelConfig& c = s.config;
    c.hidden_size = 64;
    c.intermediate_size = 160;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.vocab_size = 512;
    c.eos_token_ids = {2};
    s.seed = 7;
    s.max_shard_bytes = 40000;  // forces several shards
    return s;
  }
};

TEST_F(RandomModelTest, PresetsMatchPublishedParameterCounts) {
  // Published sizes: Llama-2-7b-hf 6,738,415,616; Meta-Llama-3-8B 8,030,261,248.
  const ModelConfig l2 = RandomModelPreset("llama2-7b");
  EXPECT_EQ(CountParams(l2), 6738415616ull);
  EXPECT_EQ(l2.head_dim, 128);
  const ModelConfig l3 = RandomModelPreset("llama3-8b");
  EXPECT_EQ(CountParams(l3), 8030261248ull);
  EXPECT_EQ(l3.num_key_value_heads, 8);
  EXPECT_DOUBLE_EQ(l3.rope_theta, 500000.0);
  const ModelConfig tiny = RandomModelPreset("tiny-100m");
  EXPECT_GT(CountParams(tiny), 90'000'000u);
  EXPECT_LT(CountParams(tiny), 115'000'000u);
  EXPECT_EQ(tiny.head_dim, 64);
  EXPECT_EQ(tiny.vocab_size, 32000);
  EXPECT_EQ(RandomModelPresetNames().size(), 10u);
  try {
    RandomModelPreset("gpt-5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'gpt-5'"));
    EXPECT_THAT(e.what(), HasSubstr("llama2-7b"));
  }
}

// The mixture-of-experts presets (issue 42) against the parameter counts
// their model cards publish (safetensors metadata): Qwen3-30B-A3B
// 30,532,122,624; Mixtral-8x7B-v0.1 46,702,792,704; Qwen1.5-MoE-A2.7B
// 14,315,784,192 (every expert, the routers and the shared expert counted).
TEST_F(RandomModelTest, MoePresetsMatchPublishedParameterCounts) {
  const ModelConfig q3 = RandomModelPreset("qwen3-30b-a3b");
  EXPECT_EQ(NumParams(q3), 30532122624ull);
  EXPECT_EQ(q3.moe.num_experts, 128);
  EXPECT_EQ(q3.moe.num_experts_per_tok, 8);
  const ModelConfig mx = RandomModelPreset("mixtral-8x7b");
  EXPECT_EQ(NumParams(mx), 46702792704ull);
  EXPECT_EQ(mx.moe.moe_intermediate_size, 14336);
  const ModelConfig q2 = RandomModelPreset("qwen1.5-moe-a2.7b");
  EXPECT_EQ(NumParams(q2), 14315784192ull);
  EXPECT_EQ(q2.moe.shared_expert_intermediate_size, 5632);
  // A dense preset: NumParams agrees with this file's own count.
  EXPECT_EQ(NumParams(RandomModelPreset("qwen2.5-0.5b")), 494032768ull);
}

// The shapes of issue 15 against the parameter counts their model cards
// publish (safetensors metadata of the HF repositories).
TEST_F(RandomModelTest, CurrentModelPresetsMatchPublishedParameterCounts) {
  const ModelConfig l = RandomModelPreset("llama3.2-1b");  // Llama-3.2-1B: 1,235,814,400
  EXPECT_EQ(CountParams(l), 1235814400ull);
  EXPECT_EQ(l.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(l.rope_scaling.factor, 32.0);
  EXPECT_EQ(l.rope_scaling.original_max_position_embeddings, 8192);
  const ModelConfig q2 = RandomModelPreset("qwen2.5-0.5b");  // Qwen2.5-0.5B: 494,032,768
  EXPECT_EQ(CountParams(q2), 494032768ull);
  EXPECT_EQ(q2.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(q2.qkv_bias);
  const ModelConfig q3 = RandomModelPreset("qwen3-0.6b");  // Qwen3-0.6B: 596,049,920
  EXPECT_EQ(CountParams(q3), 596049920ull);
  EXPECT_EQ(q3.architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.head_dim, 128);
  const ModelConfig s = RandomModelPreset("smollm2-135m");  // SmolLM2-135M: 134,515,008
  EXPECT_EQ(CountParams(s), 134515008ull);
  for (const ModelConfig* c : {&l, &q2, &q3, &s}) EXPECT_TRUE(c->tie_word_embeddings);
}

// A Qwen3 checkpoint at reduced size writes the config.json fields and
// tensors that LoadModelFiles / LoadLlamaWeights read back, with q/k norms
// drawn around 1; a tokenizer.json is copied with the tokenizer_config.json
// beside it, and chat_template replaces the copied template.
TEST_F(RandomModelTest, Qwen3WithTokenizerJsonAndChatTemplate) {
  RandomModelSpec spec;
  spec.config = RandomModelPreset("qwen3-0.6b");
  spec.config.num_hidden_layers = 1;
  spec.config.hidden_size = 64;
  spec.config.intermediate_size = 64;
  spec.config.vocab_size = 300;
  spec.dtype = TensorDtype::kF32;
  const fs::path src = dir_ / "src";
  fs::create_directories(src);
  std::ofstream(src / "tokenizer.json")
      << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},)"
         R"( "added_tokens": [{"id": 299, "content": "<|im_end|>"}]})";
  std::ofstream(src / "tokenizer_config.json") << R"({"eos_token": "<|im_end|>", "x": 1})";
  spec.tokenizer_json = (src / "tokenizer.json").string();
  spec.chat_template = "{{ messages[0].content }}";
  const fs::path out = dir_ / "out";
  WriteRandomModel(out.string(), spec, "");
  const ModelFiles mf = LoadModelFiles(out.string());
  EXPECT_EQ(mf.config.architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(mf.config.qk_norm);
  EXPECT_EQ(mf.config.head_dim, 128);
  EXPECT_EQ(mf.tokenizer.eos_token, "<|im_end|>");
  EXPECT_EQ(mf.tokenizer.chat_template, "{{ messages[0].content }}");
  EXPECT_EQ(fs::file_size(out / "tokenizer.json"), fs::file_size(src / "tokenizer.json"));
  const SafetensorsCheckpoint ckpt(out.string());
  const auto [mean, sd] = MeanStd(ckpt.Require("model.layers.0.self_attn.k_norm.weight", {128}));
  EXPECT_NEAR(mean, 1.0, 0.1);
  EXPECT_NEAR(sd, 0.2, 0.06);
  HostBackend backend;
  const LlamaWeights w = LoadLlamaWeights(out.string(), mf.config, &backend);
  EXPECT_EQ(w.layers[0].q_norm.bytes(), 128u * 4);
  EXPECT_EQ(w.total_bytes, CountParams(mf.config) * 4);
  // A tokenizer.json with ids past the vocabulary does not fit.
  spec.config.vocab_size = 299;
  try {
    WriteRandomModel(out.string(), spec, "");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("token id 299 does not fit vocab_size 299"));
  }
}

TEST_F(RandomModelTest, ShardedModelLoadsBack) {
  const RandomModelSpec spec = SmallSpec();
  WriteRandomModel(dir_.string(), spec, "");
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ / "tokenizer.model"));
  // Index: HF layout, total_size = bytes of all tensors.
  std::ifstream in(dir_ / "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  const uint64_t params = CountParams(spec.config);
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), params * 2);
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) shards.insert(file);
  ASSERT_GE(shards.size(), 3u);
  const std::string last = "model-0000" + std::to_string(shards.size()) + "-of-0000" +
                           std::to_string(shards.size()) + ".safetensors";
  EXPECT_TRUE(shards.count("model-00001-of-0000" + std::to_string(shards.size()) + ".safetensors"));
  EXPECT_TRUE(shards.count(last));
  // Each shard stays under the limit unless it holds one tensor larger than it
  // (the 64 KiB embeddings), as transformers' save_pretrained does.
  for (const auto& s : shards) {
    const SafetensorsFile f((dir_ / s).string());
    if (fs::file_size(dir_ / s) > 40000u + 4096u) {
      EXPECT_EQ(f.tensors().size(), 1u) << s;
    }
  }

  const ModelFiles mf = LoadModelFiles(dir_.string());
  const ModelConfig& c = mf.config;
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "float16");
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_TRUE(mf.generation.present);

  const SafetensorsCheckpoint ckpt(dir_.string());
  EXPECT_EQ(ckpt.size(), 1u + 2u * 9u + 1u + 1u);
  const TensorInfo& k = ckpt.Require("model.layers.1.self_attn.k_proj.weight", {32, 64});
  EXPECT_EQ(k.dtype, TensorDtype::kF16);
  ckpt.Require("model.layers.0.mlp.down_proj.weight", {64, 160});
  ckpt.Require("lm_head.weight", {512, 64});
  // Weights ~ N(0, 0.02^2): embed has 32768 samples, std error of std ~1e-4.
  const auto [mean, std] = MeanStd(ckpt.Require("model.embed_tokens.weight", {512, 64}));
  EXPECT_NEAR(mean, 0.0, 1e-3);
  EXPECT_NEAR(std, 0.02, 5e-4);
  const auto [gm, gs] = MeanStd(ckpt.Require("model.layers.1.mlp.gate_proj.weight", {160, 64}));
  EXPECT_NEAR(gm, 0.0, 1e-3);
  EXPECT_NEAR(gs, 0.02, 8e-4);
  const auto [nm, ns] = MeanStd(ckpt.Require("model.norm.weight", {64}));
  EXPECT_EQ(nm, 1.0);
  EXPECT_EQ(ns, 0.0);
  // Different tensors get different streams.
  std::vector<float> a(64 * 160), b(64 * 160);
  ckpt.Require("model.layers.0.mlp.gate_proj.weight", {160, 64}).ToFloat(a.data());
  ckpt.Require("model.layers.0.mlp.up_proj.weight", {160, 64}).ToFloat(b.data());
  EXPECT_NE(a, b);

  HostBackend backend;
  const LlamaWeights w = LoadLlamaWeights(dir_.string(), c, &backend);
  EXPECT_EQ(w.total_bytes, params * sizeof(float));
  EXPECT_EQ(backend.allocated, params * sizeof(float));
  ASSERT_EQ(w.layers.size(), 2u);
  EXPECT_EQ(w.layers[1].k_proj.bytes(), 32u * 64u * 4u);
  EXPECT_FALSE(w.lm_head.empty());
  std::vector<float> k_ref(32 * 64);
  k.ToFloat(k_ref.data());
  EXPECT_EQ(0, std::memcmp(k_ref.data(), w.layers[1].k_proj.data.data(), k_ref.size() * 4));
  EXPECT_EQ(w.norm.as<float>()[63], 1.0f);
}

TEST_F(RandomModelTest, DeterministicInSeed) {
  RandomModelSpec spec = SmallSpec();
  spec.max_shard_bytes = 1ull << 30;
  spec.dtype = TensorDtype::kBF16;
  WriteRandomModel((dir_ / "a").string(), spec, "");
  WriteRandomModel((dir_ / "b").string(), spec, "");
  spec.seed = 8;
  WriteRandomModel((dir_ / "c").string(), spec, "");
  auto read = [&](const char* sub) {
    std::ifstream in(dir_ / sub / "model.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_FALSE(fs::exists(dir_ / "a" / "model.safetensors.index.json"));
  EXPECT_EQ(read("a"), read("b"));
  EXPECT_NE(read("a"), read("c"));
  const SafetensorsFile f((dir_ / "c" / "model.safetensors").string());
  EXPECT_EQ(f.tensors().at("lm_head.weight").dtype, TensorDtype::kBF16);
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST_F(RandomModelTest, TiedF32WithTokenizerAndRewriteOverOldShards) {
  RandomModelSpec spec = SmallSpec();
  WriteRandomModel(dir_.string(), spec, "");  // sharded first
  spec.config.tie_word_embeddings = true;
  spec.dtype = TensorDtype::kF32;
  spec.max_shard_bytes = 1ull << 30;
  WriteRandomModel(dir_.string(), spec, std::string(TQ_MODEL_DIR) + "/tokenizer.model");
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors.index.json"));  // stale index removed
  EXPECT_EQ(fs::file_size(dir_ / "tokenizer.model"),
            fs::file_size(fs::path(TQ_MODEL_DIR) / "tokenizer.model"));
  const ModelFiles mf = LoadModelFiles(dir_.string());
  EXPECT_TRUE(mf.config.tie_word_embeddings);
  const SafetensorsCheckpoint ckpt(dir_.string());
  EXPECT_EQ(ckpt.Find("lm_head.weight"), nullptr);
  HostBackend backend;
  const LlamaWeights w = LoadLlamaWeights(dir_.string(), mf.config, &backend);
  EXPECT_EQ(w.total_bytes, CountParams(mf.config) * 4);
  EXPECT_TRUE(w.lm_head.empty());
}

TEST_F(RandomModelTest, LargeTensorConvertsAcrossChunks) {
  // tiny-100m's 32000x768 embedding (24.6M elements) spans two 16M-element
  // conversion chunks of LoadLlamaWeights.
  RandomModelSpec spec;
  spec.config = RandomModelPreset("tiny-100m");
  spec.config.num_hidden_layers = 1;
  spec.config.tie_word_embeddings = true;
  WriteRandomModel(dir_.string(), spec, "");
  const ModelFiles mf = LoadModelFiles(dir_.string());
  HostBackend backend;
  const LlamaWeights w = LoadLlamaWeights(dir_.string(), mf.config, &backend);
  const SafetensorsCheckpoint ckpt(dir_.string());
  const TensorInfo& emb = ckpt.Require("model.embed_tokens.weight", {32000, 768});
  std::vector<float> ref(static_cast<size_t>(emb.NumElements()));
  emb.ToFloat(ref.data());
  EXPECT_EQ(0, std::memcmp(ref.data(), w.embed_tokens.data.data(), ref.size() * sizeof(float)));
  EXPECT_EQ(w.total_bytes, CountParams(mf.config) * 4);
}

TEST_F(RandomModelTest, BundledModelWeightsLoad) {
  const ModelFiles mf = LoadModelFiles(TQ_MODEL_DIR);
  HostBackend backend;
  const LlamaWeights w = LoadLlamaWeights(TQ_MODEL_DIR, mf.config, &backend);
  // All tensors are F32 and fill the data section: 1044984 - 8 - 4848 bytes.
  EXPECT_EQ(w.total_bytes, 1040128u);
  EXPECT_EQ(w.layers.size(), 5u);
  EXPECT_TRUE(w.lm_head.empty());

  ModelConfig wrong = mf.config;
  wrong.intermediate_size = 128;
  try {
    LoadLlamaWeights(TQ_MODEL_DIR, wrong, &backend);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.safetensors"));
    EXPECT_THAT(e.what(), HasSubstr("model.layers.0.mlp.gate_proj.weight has shape [172, 64], "
                                    "expected [128, 64]"));
  }
  wrong = mf.config;
  wrong.tie_word_embeddings = false;
  EXPECT_THROW(LoadLlamaWeights(TQ_MODEL_DIR, wrong, &backend), Error);
}

TEST_F(RandomModelTest, RejectsBadSpecs) {
  RandomModelSpec spec = SmallSpec();
  spec.config.num_key_value_heads = 3;
  try {
    WriteRandomModel(dir_.string(), spec, "");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("num_key_value_heads (3)"));
  }
  spec = SmallSpec();
  spec.config.vocab_size = 100;  // the bundled tokenizer has 512 pieces
  try {
    WriteRandomModel(dir_.string(), spec, std::string(TQ_MODEL_DIR) + "/tokenizer.model");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tokenizer.model"));
    EXPECT_THAT(e.what(), HasSubstr("512 tokens"));
  }
  spec = SmallSpec();
  spec.config.hidden_size = 0;
  EXPECT_THROW(WriteRandomModel(dir_.string(), spec, ""), Error);
}

}  // namespace
}  // namespace tq
