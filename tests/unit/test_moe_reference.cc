// Mixture-of-experts architectures (issue 42) end to end on the CPU backend:
// random-weight checkpoints from the `tqserve make-random-model` MoE presets
// at reduced sizes (tests/unit/moe.cmake) against the independent float64
// numpy forward pass (tests/reference/llama_ref.py): Qwen3-MoE (fused 3-D
// experts, a dense layer from mlp_only_layers, renormalised top-4), Mixtral
// (per-expert w1/w3/w2, top-2) and Qwen2-MoE (shared expert with its sigmoid
// gate, decoder_sparse_step 2, top-4 without renormalisation). Logits of a
// 64-token prompt within 1e-3 (fp32 KV), 32 greedy tokens identical, TP=2
// equal to TP=1, prefix caching on equal to off, a sequence alone equal to
// the same sequence batched with others, and the router's arithmetic.
// What the 1e-3 bound can see (measured in the float64 reference while
// writing this test): dropping the MoE blocks moves the logits by 0.033
// (qwen3-moe), 0.10 (mixtral) and 0.059 (qwen2-moe); flipping
// norm_topk_prob by 0.0091 and 0.0035; the engine's error is ~5e-7.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/llama_model.h"
#include "engine/model/moe_block.h"
#include "engine/model/random_model.h"
#include "engine/quant/quant_config.h"
#include "engine/runtime/model_loader.h"
#include "engine/runtime/offline_engine.h"
#include "tests/unit/f64_reference.h"
#include "tests/unit/tp_test_util.h"

namespace tq {
namespace {

std::string ModelDir(const std::string& name) {
  return std::string(TQ_REF_DIR) + "/moe/" + name;
}

using testing::F64Logits;
using testing::ReadLogits;

EngineOptions Options(const std::string& dir, int tp = 1, int threads = 2) {
  EngineOptions o;
  o.model_dir = dir;
  o.num_threads = threads;
  o.kv_cache_dtype = kernels::KvDtype::kF32;
  o.max_model_len = 256;
  o.tensor_parallel_size = tp;
  return o;
}

class MoeReference : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeReference, ConfigDescribesTheSparseBlock) {
  const ModelConfig c = LoadModelFiles(ModelDir(GetParam())).config;
  ASSERT_TRUE(c.moe.enabled());
  if (GetParam() == "qwen3-moe") {
    EXPECT_EQ(c.architecture, "Qwen3MoeForCausalLM");
    EXPECT_TRUE(c.qk_norm && c.moe.norm_topk_prob);
    EXPECT_EQ(c.moe.num_experts, 16);
    EXPECT_TRUE(c.moe.Sparse(0) && !c.moe.Sparse(1) && c.moe.Sparse(2));
  } else if (GetParam() == "mixtral") {
    EXPECT_EQ(c.architecture, "MixtralForCausalLM");
    EXPECT_EQ(c.moe.block, "block_sparse_moe");
    EXPECT_EQ(c.moe.num_experts_per_tok, 2);
    EXPECT_EQ(c.moe.moe_intermediate_size, c.intermediate_size);
  } else {
    EXPECT_EQ(c.architecture, "Qwen2MoeForCausalLM");
    EXPECT_TRUE(c.qkv_bias);
    EXPECT_FALSE(c.moe.norm_topk_prob);
    EXPECT_EQ(c.moe.shared_expert_intermediate_size, 64);
    EXPECT_TRUE(!c.moe.Sparse(0) && c.moe.Sparse(1) && !c.moe.Sparse(2) && c.moe.Sparse(3));
  }
}

// Max |logit - float64 logit| over every position of the 64-token prompt.
double MaxLogitError(const std::string& name, int chunk, int threads) {
  const F64Logits ref = ReadLogits(std::string(TQ_REF_DIR) + "/moe_" + name + "_logits.bin");
  EngineOptions o = Options(ModelDir(name), 1, threads);
  o.max_num_batched_tokens = chunk;
  OfflineEngine gen(o);
  EXPECT_EQ(ref.vocab, gen.files().config.vocab_size);
  const std::vector<float> logits = gen.PromptLogits(ref.tokens);
  double largest = 0;
  const double err = testing::MaxErrorAgainst(ref, logits, &largest);
  std::printf(
      "%s: max |logit - float64| over %zu logits (chunk %d, %d threads) = %.3g "
      "(max |logit| %.3g)\n",
      name.c_str(), logits.size(), chunk, threads, err, largest);
  return err;
}

TEST_P(MoeReference, LogitsOf64TokensMatchFloat64Within1e3) {
  EXPECT_LT(MaxLogitError(GetParam(), 512, 2), 1e-3);
  EXPECT_LT(MaxLogitError(GetParam(), 7, 1), 1e-3);  // chunked prefill, one thread
}

TEST_P(MoeReference, ThirtyTwoGreedyTokensMatchFloat64) {
  const testing::GreedyRef want =
      testing::ReadGreedy(std::string(TQ_REF_DIR) + "/moe_" + GetParam() + "_greedy.txt");
  ASSERT_EQ(want.tokens.size(), 32u);
  LoadedModel m = LoadModel(Options(ModelDir(GetParam())));
  const testing::GreedyRun got = testing::GreedyDecode(*m.executor, want.prompt, 32);
  EXPECT_EQ(got.tokens, want.tokens);
}

// TP=2 (every expert split along its intermediate width, the router whole
// on both ranks) and EP=2 (--enable-expert-parallel: half the experts whole
// on each rank) give TP=1's greedy tokens and logits within 1e-4.
TEST_P(MoeReference, TwoTensorOrExpertParallelRanksMatchOne) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 425};
  LoadedModel one = LoadModel(Options(ModelDir(GetParam()), 1));
  const testing::GreedyRun want = testing::GreedyDecode(*one.executor, prompt, 24);
  for (bool expert_parallel : {false, true}) {
    SCOPED_TRACE(expert_parallel ? "EP=2" : "TP=2");
    EngineOptions o = Options(ModelDir(GetParam()), 2);
    o.enable_expert_parallel = expert_parallel;
    LoadedModel two = LoadModel(o);
    const TpPlan& plan = two.executor->model().tp_plan();
    const int32_t experts = two.files.config.moe.num_experts;
    EXPECT_EQ(plan.num_local_experts, expert_parallel ? experts / 2 : experts);
    const testing::GreedyRun got = testing::GreedyDecode(*two.executor, prompt, 24);
    ASSERT_EQ(got.tokens, want.tokens);
    EXPECT_LE(testing::MaxLogitDiff(got, want), 1e-4);
  }
}

// A sequence decoded alone and the same sequence decoded in one batch with
// two others (other tokens, so other experts) give the same logits to the
// bit: grouping by expert never mixes a token's rows with its neighbours'.
TEST_P(MoeReference, ASequenceAloneEqualsTheSameSequenceInABatch) {
  LoadedModel m = LoadModel(Options(ModelDir(GetParam())));
  const int32_t vocab = m.files.config.vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 403, 407, 261, 378}, {1, 300, 301, 302}, {1, 17, 99, 123, 45, 67, 89}};
  // Alone: one sequence at a time, all its tokens in one step.
  auto forward = [&](const std::vector<std::vector<int32_t>>& seqs) {
    ForwardBatch b;
    b.num_seqs = static_cast<int32_t>(seqs.size());
    b.max_blocks_per_seq = 1;
    const int32_t block = m.executor->cache().layout().block_size;
    for (int32_t s = 0; s < b.num_seqs; ++s) {
      b.block_tables.push_back(s);
      for (size_t p = 0; p < seqs[s].size(); ++p) {
        b.token_ids.push_back(seqs[s][p]);
        b.positions.push_back(static_cast<int32_t>(p));
        b.token_seq.push_back(s);
        b.slot_mapping.push_back(s * block + static_cast<int32_t>(p));
        b.logit_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
      }
    }
    std::vector<float> logits;
    m.executor->Forward(b, &logits);
    return logits;
  };
  const std::vector<float> batched = forward(prompts);
  size_t row = 0;
  for (const std::vector<int32_t>& p : prompts) {
    const std::vector<float> alone = forward({p});
    ASSERT_EQ(alone.size(), p.size() * vocab);
    for (size_t i = 0; i < alone.size(); ++i) {
      ASSERT_EQ(alone[i], batched[row * vocab + i]) << "logit " << i;
    }
    row += p.size();
  }
}

// Prefix caching on == off: a second request sharing a 40-token prefix with
// the first, with the cache on, reuses the first one's blocks and generates
// the tokens that the engine without caching generates.
TEST_P(MoeReference, PrefixCachingOnEqualsOff) {
  std::vector<int32_t> first = {1};
  for (int32_t i = 0; i < 47; ++i) first.push_back(260 + (i * 37) % 200);
  std::vector<int32_t> second(first.begin(), first.begin() + 40);
  for (int32_t t : {300, 301, 302, 303, 304}) second.push_back(t);
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 16;
  greedy.ignore_eos = true;
  std::vector<std::vector<int32_t>> got[2];
  for (bool caching : {false, true}) {
    EngineOptions o = Options(ModelDir(GetParam()));
    o.enable_prefix_caching = caching;
    OfflineEngine gen(o);
    for (const std::vector<int32_t>* p : {&first, &second}) {
      got[caching].push_back(gen.Generate(*p, greedy).output_ids);
    }
  }
  EXPECT_EQ(got[1], got[0]);
  EXPECT_EQ(got[0][0].size(), 16u);
}

INSTANTIATE_TEST_SUITE_P(Presets, MoeReference,
                         ::testing::Values("qwen3-moe", "mixtral", "qwen2-moe"));

// The router against hand-computed softmax / top-k values (independent of
// the checkpoints): logits {0, ln 2, ln 4, ln 1} give probabilities
// {1, 2, 4, 1} / 8; top-2 is experts 2 then 1 with 0.5 and 0.25, or 2/3 and
// 1/3 renormalised; a tie keeps the lower index first.
TEST(MoeRouter, SoftmaxTopKAndRenormalisation) {
  const float logits[4] = {0.0f, std::log(2.0f), std::log(4.0f), 0.0f};
  MoeConfig c;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  TokenRoute r = RouteToken(logits, c);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 1}));
  EXPECT_NEAR(r.weights[0], 0.5f, 1e-6);
  EXPECT_NEAR(r.weights[1], 0.25f, 1e-6);
  c.norm_topk_prob = true;
  r = RouteToken(logits, c);
  EXPECT_NEAR(r.weights[0], 2.0f / 3.0f, 1e-6);
  EXPECT_NEAR(r.weights[1], 1.0f / 3.0f, 1e-6);
  c.num_experts_per_tok = 4;
  r = RouteToken(logits, c);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 1, 0, 3}));
}

// configs/moe_mix4b8b.json on the real shapes of Qwen3-30B-A3B and
// Mixtral-8x7B (configs only, no weights): every routed expert int4, every
// attention projection (and Qwen3's dense MLPs, none here) int8, group 128.
TEST(MoeQuantization, ShippedMixConfigPutsExpertsAt4BitsAndAttentionAt8) {
  const quant::QuantConfig q =
      quant::QuantConfig::Load(std::string(TQ_TEST_DATA_DIR) + "/../../configs/moe_mix4b8b.json");
  for (const char* preset : {"qwen3-30b-a3b", "mixtral-8x7b", "qwen1.5-moe-a2.7b"}) {
    const ModelConfig c = RandomModelPreset(preset);
    const std::map<std::string, quant::QuantFormat> plan = quant::PlanFormats(q, c);
    size_t experts = 0, attention = 0;
    for (const quant::LinearModule& m : quant::LlamaLinearModules(c)) {
      const quant::QuantFormat& f = plan.at(m.name);
      const bool expert =
          m.role >= quant::ModuleRole::kExpertGate && m.role <= quant::ModuleRole::kSharedDown;
      EXPECT_EQ(f.bits, expert ? 4 : 8) << preset << " " << m.name;
      EXPECT_EQ(f.group_size, 128) << m.name;
      (expert ? experts : attention) += 1;
    }
    const size_t shared = c.moe.shared_expert_intermediate_size > 0 ? 3 : 0;
    EXPECT_EQ(experts, size_t(c.num_hidden_layers) * (3 * c.moe.num_experts + shared)) << preset;
    EXPECT_EQ(attention, size_t(c.num_hidden_layers) * 4) << preset;
  }
}

std::string WriteConfig(const std::string& name, const std::string& json) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << json;
  return path;
}

// Experts at int4 and attention at int8 (group 32) load on the CPU's integer
// kernels: the routers stay fp32, the memory summary counts the experts'
// bytes as int4, and the model's logits stay near the fp32 model's (int4
// rounding of random experts: within 0.1 of logits up to ~1).
TEST(MoeQuantization, ExpertsRunOnTheIntegerKernels) {
  const std::string cfg = WriteConfig(
      "moe_test_mix.json",
      R"({"bits": 8, "group_size": 32, "symmetric": true,)"
      R"( "overrides": [{"modules": ["*.experts.*", "*.shared_expert.*"], "bits": 4}]})");
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 425};
  for (const char* name : {"mixtral", "qwen2-moe"}) {
    LoadedModel ref = LoadModel(Options(ModelDir(name)));
    const testing::GreedyRun want = testing::GreedyDecode(*ref.executor, prompt, 4);
    EngineOptions o = Options(ModelDir(name));
    o.quantization_config = cfg;
    LoadedModel m = LoadModel(o);
    const LlamaWeights& w = m.executor->model().weights();
    const LlamaLayerWeights& sparse = w.layers[1];
    ASSERT_FALSE(sparse.moe.empty()) << name;
    EXPECT_EQ(WeightPrecisionName(sparse.moe.router.dtype), "fp32");
    EXPECT_EQ(WeightPrecisionName(sparse.moe.gate_proj[0].dtype), "int4");
    EXPECT_EQ(WeightPrecisionName(sparse.moe.down_proj[3].dtype), "int4");
    EXPECT_EQ(WeightPrecisionName(sparse.q_proj.dtype), "int8");
    const std::map<std::string, size_t> experts = w.ExpertBytesByPrecision();
    ASSERT_EQ(experts.size(), 1u);
    EXPECT_GT(experts.at("int4"), 0u);
    EXPECT_LE(experts.at("int4"), w.BytesByPrecision().at("int4"));
    const testing::GreedyRun got = testing::GreedyDecode(*m.executor, prompt, 4);
    const double worst = testing::MaxLogitDiff(got, want);
    std::printf("%s experts int4 / attention int8: max |logit - fp32 logit| = %.3g\n", name, worst);
    EXPECT_LT(worst, 0.1) << name;
  }
}

// An expert shard that does not hold whole quantization groups is refused at
// start-up with one line giving the numbers: Mixtral's experts are 32 wide
// here, 16 per rank at --tensor-parallel-size 2, and groups of 32 do not fit.
TEST(MoeParallel, ExpertShardThatSplitsAGroupIsRefused) {
  EngineOptions o = Options(ModelDir("mixtral"), 2);
  o.quantization_config =
      WriteConfig("moe_test_g32.json", R"({"bits": 8, "group_size": 32, "symmetric": true})");
  try {
    const LoadedModel m = LoadModel(o);
    FAIL() << "loaded " << m.files.config.architecture;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("group_size 32 does not divide the tensor-parallel slice of 16 input "
                        "channels"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("experts.0.w2"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace tq
