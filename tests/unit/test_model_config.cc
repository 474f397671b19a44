// config.json / generation_config.json / tokenizer_config.json loading. The
// bundled model is checked against the numbers in its config.json; the llama3
// RoPE values come from a numpy transcription of HF transformers'
// _compute_llama3_parameters (Llama 3.1 8B settings).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/common/error.h"
#include "engine/model/model_config.h"
#include "tests/unit/temp_dir_test.h"

namespace tq {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ModelConfigTest : public testing::TempDirTest {
 protected:
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  // A valid minimal config.json with `extra` fields spliced in (later keys win in nlohmann).
  void WriteConfig(const std::string& extra = "") {
    Write("config.json", R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,)"
                         R"("intermediate_size":128,"num_hidden_layers":2,)"
                         R"("num_attention_heads":4,"vocab_size":100)" +
                             extra + "}");
  }
  void ExpectError(const std::string& file, const std::string& problem) {
    try {
      LoadModelFiles(dir_.string());
      ADD_FAILURE() << "no error; expected " << problem;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr((dir_ / file).string()));
      EXPECT_THAT(e.what(), HasSubstr(problem));
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  ModelConfig Load() { return LoadModelFiles(dir_.string()).config; }
};

TEST_F(ModelConfigTest, BundledModelMatchesItsConfigJson) {
  const ModelFiles mf = LoadModelFiles(TQ_MODEL_DIR);
  const ModelConfig& c = mf.config;
  EXPECT_EQ(mf.dir, TQ_MODEL_DIR);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "float32");
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_TRUE(mf.generation.present);
  EXPECT_DOUBLE_EQ(mf.generation.temperature, 1.0);
  EXPECT_TRUE(mf.tokenizer.add_bos_token);
  EXPECT_FALSE(mf.tokenizer.add_eos_token);
  EXPECT_EQ(mf.tokenizer.chat_template, "");
  // theta^(-2i/8) with theta = 10^4 is 10^-i.
  const std::vector<float> inv = c.RopeInvFreq();
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_FLOAT_EQ(inv[1], 0.1f);
  EXPECT_FLOAT_EQ(inv[2], 0.01f);
  EXPECT_FLOAT_EQ(inv[3], 0.001f);
}

TEST_F(ModelConfigTest, DefaultsAndOptionalFiles) {
  WriteConfig();
  const ModelFiles mf = LoadModelFiles(dir_.string());
  EXPECT_EQ(mf.config.num_key_value_heads, 4);  // = num_attention_heads
  EXPECT_EQ(mf.config.head_dim, 16);            // = hidden / heads
  EXPECT_FALSE(mf.config.tie_word_embeddings);  // LlamaConfig default
  EXPECT_EQ(mf.config.max_position_embeddings, 2048);
  EXPECT_FALSE(mf.generation.present);
  EXPECT_TRUE(mf.tokenizer.add_bos_token);
  EXPECT_TRUE(mf.config.eos_token_ids.empty());
}

TEST_F(ModelConfigTest, MistralAndExplicitFields) {
  Write("config.json",
        R"({"architectures":["MistralForCausalLM"],"hidden_size":4096,"intermediate_size":14336,)"
        R"("num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,)"
        R"("vocab_size":32000,"rope_theta":1000000.0,"rms_norm_eps":1e-05,)"
        R"("eos_token_id":[2,32000],"bos_token_id":1,"rope_scaling":null,"head_dim":null})");
  const ModelConfig c = Load();
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2, 32000}));
}

TEST_F(ModelConfigTest, GenerationConfigEosWins) {
  WriteConfig(R"(,"eos_token_id":2,"bos_token_id":1)");
  Write("generation_config.json",
        R"({"bos_token_id":128000,"eos_token_id":[128001,128009],"temperature":0.6,)"
        R"("top_p":0.9,"top_k":50,"repetition_penalty":1.1,"do_sample":true})");
  const ModelFiles mf = LoadModelFiles(dir_.string());
  EXPECT_EQ(mf.config.eos_token_ids, (std::vector<int32_t>{128001, 128009}));
  EXPECT_EQ(mf.config.bos_token_id, 128000);
  EXPECT_TRUE(mf.generation.present);
  EXPECT_DOUBLE_EQ(mf.generation.temperature, 0.6);
  EXPECT_DOUBLE_EQ(mf.generation.top_p, 0.9);
  EXPECT_EQ(mf.generation.top_k, 50);
  EXPECT_DOUBLE_EQ(mf.generation.repetition_penalty, 1.1);
}

TEST_F(ModelConfigTest, TokenizerConfig) {
  WriteConfig();
  Write("tokenizer_config.json",
        R"({"add_bos_token":false,"add_eos_token":true,"chat_template":"{{ messages }}"})");
  ModelFiles mf = LoadModelFiles(dir_.string());
  EXPECT_FALSE(mf.tokenizer.add_bos_token);
  EXPECT_TRUE(mf.tokenizer.add_eos_token);
  EXPECT_EQ(mf.tokenizer.chat_template, "{{ messages }}");
  Write("tokenizer_config.json", R"({"chat_template":[{"name":"tool_use","template":"T"},)"
                                 R"({"name":"default","template":"D"}]})");
  mf = LoadModelFiles(dir_.string());
  EXPECT_EQ(mf.tokenizer.chat_template, "D");
  EXPECT_TRUE(mf.tokenizer.add_bos_token);
  Write("tokenizer_config.json", R"({"add_bos_token":"yes"})");
  ExpectError("tokenizer_config.json", "add_bos_token");
}

TEST_F(ModelConfigTest, RopeScalingLinearAndLlama3) {
  WriteConfig(R"(,"rope_scaling":{"type":"linear","factor":4.0})");
  ModelConfig c = Load();
  EXPECT_EQ(c.rope_scaling.type, "linear");
  std::vector<float> inv = c.RopeInvFreq();
  ASSERT_EQ(inv.size(), 8u);  // head_dim 16
  EXPECT_FLOAT_EQ(inv[0], 0.25f);
  EXPECT_FLOAT_EQ(inv[4], 0.01f / 4);  // 10000^(-8/16) = 0.01

  // meta-llama/Llama-3.1-8B config.json.
  Write("config.json",
        R"({"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":14336,)"
        R"("num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,)"
        R"("vocab_size":128256,"rope_theta":500000.0,"rope_scaling":{"factor":8.0,)"
        R"("low_freq_factor":1.0,"high_freq_factor":4.0,)"
        R"("original_max_position_embeddings":8192,"rope_type":"llama3"}})");
  c = Load();
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  inv = c.RopeInvFreq();
  ASSERT_EQ(inv.size(), 64u);
  // Reference: numpy transcription of HF _compute_llama3_parameters.
  const std::pair<int, double> ref[] = {{0, 1.0},
                                        {20, 0.016560440080994446},  // high frequency: unchanged
                                        {26, 0.004839421345719893},
                                        {28, 0.0032114459947525913},
                                        {30, 0.0013718935677611381},  // medium: smoothed
                                        {31, 0.0008567514129196321},
                                        {32, 0.0005248461609929549},
                                        {33, 0.00031269375038406517},
                                        {40, 3.428102195952591e-05},  // low frequency: divided by 8
                                        {63, 3.068925988914511e-07}};
  for (const auto& [i, v] : ref) EXPECT_NEAR(inv[i], v, v * 1e-6) << i;
}

TEST_F(ModelConfigTest, RejectsBadDirectoriesAndJson) {
  try {
    LoadModelFiles((dir_ / "nope").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), (dir_ / "nope").string() + ": model directory not found");
  }
  ExpectError("config.json", "config.json: not found");
  Write("config.json", "{\"hidden_size\": 64,");
  ExpectError("config.json", "invalid JSON");
  Write("config.json", "[]");
  ExpectError("config.json", "invalid JSON");
  WriteConfig();
  Write("generation_config.json", "{oops");
  ExpectError("generation_config.json", "invalid JSON");
}

TEST_F(ModelConfigTest, RejectsUnsupportedArchitecture) {
  Write("config.json", R"({"architectures":["GPT2LMHeadModel"],"n_embd":768})");
  try {
    LoadModelFiles(dir_.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              (dir_ / "config.json").string() +
                  ": unsupported architecture 'GPT2LMHeadModel' (supported: LlamaForCausalLM, "
                  "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, "
                  "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM)");
  }
}

TEST_F(ModelConfigTest, RejectsBadFields) {
  Write("config.json", R"({"architectures":["LlamaForCausalLM"],"intermediate_size":128,)"
                       R"("num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100})");
  ExpectError("config.json", "'hidden_size' is missing");
  WriteConfig(R"(,"hidden_size":"64")");
  ExpectError("config.json", "'hidden_size' must be an integer");
  WriteConfig(R"(,"num_hidden_layers":0)");
  ExpectError("config.json", "'num_hidden_layers' must be an integer >= 1");
  WriteConfig(R"(,"vocab_size":-5)");
  ExpectError("config.json", "'vocab_size'");
  WriteConfig(R"(,"vocab_size":1e99)");
  ExpectError("config.json", "'vocab_size'");
  WriteConfig(R"(,"intermediate_size":99999999999)");
  ExpectError("config.json", "'intermediate_size'");
  WriteConfig(R"(,"num_key_value_heads":3)");
  ExpectError("config.json",
              "num_attention_heads (4) is not a multiple of num_key_value_heads (3)");
  WriteConfig(R"(,"hidden_size":66)");
  ExpectError("config.json", "hidden_size (66) is not a multiple of num_attention_heads (4)");
  WriteConfig(R"(,"rms_norm_eps":-1)");
  ExpectError("config.json", "'rms_norm_eps' must be a positive number");
  WriteConfig(R"(,"tie_word_embeddings":1)");
  ExpectError("config.json", "'tie_word_embeddings'");
  WriteConfig(R"(,"eos_token_id":[2,"x"])");
  ExpectError("config.json", "'eos_token_id'");
  WriteConfig(R"(,"rope_scaling":{"rope_type":"yarn","factor":4.0})");
  ExpectError("config.json", "unsupported rope_scaling type 'yarn'");
  WriteConfig(R"(,"rope_scaling":{"type":"linear"})");
  ExpectError("config.json", "rope_scaling.factor");
  WriteConfig(R"(,"rope_scaling":[1])");
  ExpectError("config.json", "rope_scaling");
  WriteConfig(R"(,"architectures":[])");
  ExpectError("config.json", "'architectures'");
}

// Features the forward pass does not implement must be refused, not ignored
// (a silently different model would give plausible but wrong text).
TEST_F(ModelConfigTest, RejectsUnimplementedFeatures) {
  WriteConfig(R"(,"attention_bias":true)");
  ExpectError("config.json", "unsupported attention_bias");
  WriteConfig(R"(,"mlp_bias":true)");
  ExpectError("config.json", "unsupported mlp_bias");
  WriteConfig(R"(,"hidden_act":"gelu")");
  ExpectError("config.json", "unsupported hidden_act \"gelu\"");
  WriteConfig(R"(,"attention_bias":false,"mlp_bias":false,"hidden_act":"silu")");
  EXPECT_EQ(Load().hidden_size, 64);
}

TEST_F(ModelConfigTest, SlidingWindowCapsTheContext) {
  WriteConfig(R"(,"max_position_embeddings":32768,"sliding_window":4096)");
  EXPECT_EQ(Load().MaxContext(), 4096);
  WriteConfig(R"(,"max_position_embeddings":2048,"sliding_window":4096)");
  EXPECT_EQ(Load().MaxContext(), 2048);
  WriteConfig(R"(,"max_position_embeddings":2048,"sliding_window":null)");
  EXPECT_EQ(Load().MaxContext(), 2048);
}

// Qwen2 (Qwen/Qwen2.5-0.5B-Instruct's config.json fields): q/k/v biases, no
// q/k norms; its sliding_window applies only with use_sliding_window.
TEST_F(ModelConfigTest, Qwen2BiasesAndSlidingWindowFlag) {
  const std::string qwen2 =
      R"(,"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","max_position_embeddings":32768,)"
      R"("max_window_layers":21,"sliding_window":32768,"rope_theta":1000000.0,"tie_word_embeddings":true)";
  WriteConfig(qwen2 + R"(,"use_sliding_window":false)");
  ModelConfig c = Load();
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.MaxContext(), 32768);
  const std::vector<LayerVectorTensor> v = LayerVectorTensors(c);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].short_name, "self_attn.q_proj.bias");
  EXPECT_EQ(v[0].size, 64);  // 4 heads x 16
  EXPECT_EQ(v[2].short_name, "self_attn.v_proj.bias");
  // use_sliding_window true: capped at the window like Mistral (exact up to it).
  WriteConfig(R"(,"architectures":["Qwen2ForCausalLM"],"max_position_embeddings":32768,)"
              R"("use_sliding_window":true,"sliding_window":4096)");
  EXPECT_EQ(Load().MaxContext(), 4096);
  // Without "architectures", model_type names it.
  Write("config.json", R"({"model_type":"qwen2","hidden_size":64,"intermediate_size":128,)"
                       R"("num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100})");
  EXPECT_EQ(Load().architecture, "Qwen2ForCausalLM");
  WriteConfig(qwen2 + R"(,"use_mrope":true)");
  ExpectError("config.json", "unsupported use_mrope");
}

// Qwen3 (Qwen/Qwen3-0.6B's fields): explicit head_dim != hidden / heads,
// per-head q/k norms, no biases.
TEST_F(ModelConfigTest, Qwen3HeadDimAndQkNorm) {
  WriteConfig(R"(,"architectures":["Qwen3ForCausalLM"],"head_dim":32,"attention_bias":false,)"
              R"("use_sliding_window":false,"sliding_window":null,"max_window_layers":28)");
  const ModelConfig c = Load();
  EXPECT_EQ(c.head_dim, 32);  // hidden / heads would be 16
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  const std::vector<LayerVectorTensor> v = LayerVectorTensors(c);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].short_name, "self_attn.q_norm.weight");
  EXPECT_EQ(v[1].short_name, "self_attn.k_norm.weight");
  EXPECT_EQ(v[1].size, 32);
  WriteConfig(R"(,"architectures":["Qwen3ForCausalLM"],"attention_bias":true)");
  ExpectError("config.json", "unsupported attention_bias: true");
  WriteConfig();
  EXPECT_TRUE(LayerVectorTensors(Load()).empty());  // plain Llama
}

TEST_F(ModelConfigTest, ModelPathThatIsAFile) {
  WriteConfig();
  try {
    LoadModelFiles((dir_ / "config.json").string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a directory"));
  }
}

}  // namespace
}  // namespace tq

namespace tq {
namespace {

// The MoE families' config.json fields (transformers configuration_mixtral /
// configuration_qwen2_moe / configuration_qwen3_moe): Mixtral's experts are
// intermediate_size wide and always renormalised, training-only keys are
// ignored; the Qwen MoE defaults are transformers' (Qwen2-MoE: 60 experts,
// top 4, 1408 wide, shared expert 5632, q/k/v biases; Qwen3-MoE: 128, top 8,
// 768); decoder_sparse_step and mlp_only_layers pick the sparse layers.
class MoeConfigTest : public testing::TempDirTest {
 protected:
  ModelConfig Load(const std::string& fields) {
    std::ofstream(dir_ / "config.json")
        << R"({"hidden_size":64,"intermediate_size":128,"num_hidden_layers":4,)"
           R"("num_attention_heads":4,"vocab_size":100,)" +
               fields + "}";
    return LoadModelFiles(dir_.string()).config;
  }
};

TEST_F(MoeConfigTest, MixtralQwen2MoeAndQwen3MoeFields) {
  ModelConfig c = Load(
      R"("architectures":["MixtralForCausalLM"],"num_local_experts":8,"num_experts_per_tok":2,)"
      R"("router_aux_loss_coef":0.02,"router_jitter_noise":0.1,"output_router_logits":true)");
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe.moe_intermediate_size, 128);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.block, "block_sparse_moe");
  EXPECT_EQ(c.moe.gate_proj + c.moe.up_proj + c.moe.down_proj, "w1w3w2");
  for (int32_t l = 0; l < 4; ++l) EXPECT_TRUE(c.moe.Sparse(l)) << l;

  c = Load(R"("model_type":"qwen2_moe","decoder_sparse_step":2,"mlp_only_layers":[3])");
  EXPECT_EQ(c.architecture, "Qwen2MoeForCausalLM");
  EXPECT_EQ(c.moe.num_experts, 60);
  EXPECT_EQ(c.moe.num_experts_per_tok, 4);
  EXPECT_EQ(c.moe.moe_intermediate_size, 1408);
  EXPECT_EQ(c.moe.shared_expert_intermediate_size, 5632);
  EXPECT_FALSE(c.moe.norm_topk_prob);
  EXPECT_TRUE(c.qkv_bias);
  // (l + 1) % 2 == 0 and l not in mlp_only_layers: only layer 1.
  EXPECT_TRUE(!c.moe.Sparse(0) && c.moe.Sparse(1) && !c.moe.Sparse(2) && !c.moe.Sparse(3));

  c = Load(R"("architectures":["Qwen3MoeForCausalLM"],"norm_topk_prob":true,"head_dim":32)");
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe.moe_intermediate_size, 768);
  EXPECT_EQ(c.moe.shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c.moe.norm_topk_prob && c.qk_norm && !c.qkv_bias);
}

TEST_F(MoeConfigTest, TopKBeyondTheExpertsIsRefusedInOneLine) {
  try {
    Load(R"("architectures":["Qwen3MoeForCausalLM"],"num_experts":4,"num_experts_per_tok":8)");
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("num_experts_per_tok 8 exceeds the 4 experts"));
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace tq
