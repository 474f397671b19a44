// Quantization-aware weight loading (engine/model/llama_weights.h) and the
// offline checkpoint (engine/quant/quantized_checkpoint.h): formats and bytes
// per precision counted here from the model's shapes, every loaded weight
// within half a quantization step of the checkpoint's value (or clamped at
// its group's range), 16-bit
// embeddings equal to the compiler's _Float16 rounding, and a checkpoint
// written by WriteQuantizedCheckpoint loading byte-identical to load-time
// quantization.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/common/error.h"
#include "engine/model/llama_weights.h"
#include "engine/model/random_model.h"
#include "engine/model/safetensors.h"
#include "engine/quant/quant_config.h"
#include "engine/quant/quantized_checkpoint.h"
#include "engine/runtime/offline_engine.h"
#include "kernels/cpu/weight_decode.h"
#include "kernels/half.h"
#include "temp_dir_test.h"

namespace tq {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kData = TQ_TEST_DATA_DIR;

std::vector<uint8_t> Bytes(const kernels::BackendBuffer& b) {
  const auto* p = b.as<const uint8_t>();
  return p ? std::vector<uint8_t>(p, p + b.bytes()) : std::vector<uint8_t>();
}

float HalfValue(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

class QuantWeightsTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    // The float kernels' row-major layout, which the checks below read; the
    // CPU backend's int tiles are checked against it in IntTilesKeepBytesAndValues.
    backend_ = kernels::CreateCpuBackend(1, kernels::CpuMatMulChoice{false, {}});
    files_ = LoadModelFiles(TQ_MODEL_DIR);
  }
  LlamaWeights Load(const std::string& dir, const std::string& config_path,
                    const TpPlan& plan = {}) {
    quant::QuantConfig cfg;
    WeightLoadOptions opts;
    if (!config_path.empty()) {
      cfg = quant::QuantConfig::Load(config_path);
      opts.quant = &cfg;
    }
    return LoadLlamaWeights(dir, files_.config, backend_.get(), plan, opts);
  }
  std::unique_ptr<kernels::Backend> backend_;
  ModelFiles files_;
};

// Checks one quantized weight against the checkpoint tensor it came from.
void ExpectWithinHalfStep(const LinearWeight& w, const TensorInfo& t, const std::string& name) {
  const int32_t in = w.in_features, g = w.group_size, groups = in / g;
  const int bits = w.dtype == kernels::WeightDtype::kInt4 ? 4 : 8;
  const int maxq = (1 << bits) - 1;
  std::vector<float> ref(static_cast<size_t>(t.NumElements()));
  t.ToFloat(ref.data());
  const auto* codes = w.data.as<const uint8_t>();
  const auto* scales = w.scales.as<const uint16_t>();
  const auto* zeros = w.zeros.as<const uint16_t>();
  double worst = 0.0;
  for (int32_t o = 0; o < w.out_features; ++o) {
    for (int32_t i = 0; i < in; ++i) {
      const int64_t gi = int64_t{o} * groups + i / g;
      const int code = bits == 8 ? codes[int64_t{o} * in + i]
                                 : (codes[int64_t{o} * in / 2 + i / 2] >> (4 * (i % 2))) & 0xf;
      const float s = HalfValue(scales[gi]);
      const float z = zeros ? HalfValue(zeros[gi]) : static_cast<float>(1 << (bits - 1));
      // Inside the range within half a step; a clamped code (the clip search
      // may shrink the range) only for a weight beyond that end.
      const double x = ref[int64_t{o} * in + i], recon = s * (code - z);
      const double err = code == maxq ? std::max(0.0, recon - x) / s
                         : code == 0  ? std::max(0.0, x - recon) / s
                                      : std::fabs(recon - x) / s;
      worst = std::max(worst, err);
    }
  }
  EXPECT_LE(worst, 0.5 + 1e-6) << name;
}

TEST_F(QuantWeightsTest, UnquantizedLoadIsFp32AsBefore) {
  const LlamaWeights w = Load(TQ_MODEL_DIR, "");
  // The tied table (512 rows, 8 whole panels) in lm_head's fp32 panels,
  // which Embedding reads too.
  EXPECT_EQ(w.embed_tokens.dtype, kernels::WeightDtype::kF32Panels);
  // fp32 as stored; the CPU backend repacks matrices of whole 64-row panels
  // (down_proj: 64 x 172) for its matmul and keeps the others row-major.
  EXPECT_EQ(w.layers[0].down_proj.dtype, kernels::WeightDtype::kF32Panels);
  EXPECT_EQ(w.layers[0].gate_proj.dtype, kernels::WeightDtype::kF32);
  // 1040128 bytes: the checkpoint's whole F32 data section.
  EXPECT_EQ(w.BytesByPrecision(), (std::map<std::string, size_t>{{"fp32", 1040128}}));
  EXPECT_DOUBLE_EQ(w.AverageBitsPerWeight(), 32.0);
}

TEST_F(QuantWeightsTest, LoadTimeW8AndMixQuantizeEveryLinear) {
  const SafetensorsCheckpoint ckpt(TQ_MODEL_DIR);
  for (const char* cfg : {"quant_stories_w8.json", "quant_stories_mix4b8b.json"}) {
    const bool mix = std::string(cfg).find("mix") != std::string::npos;
    const LlamaWeights w = Load(TQ_MODEL_DIR, kData + "/" + cfg);
    size_t int8 = 0, int4 = 0;
    for (const quant::LinearModule& m : quant::LlamaLinearModules(files_.config)) {
      const LlamaLayerWeights& l = w.layers[m.layer];
      const LinearWeight* lw = m.short_name == "self_attn.q_proj"   ? &l.q_proj
                               : m.short_name == "self_attn.k_proj" ? &l.k_proj
                               : m.short_name == "self_attn.v_proj" ? &l.v_proj
                               : m.short_name == "self_attn.o_proj" ? &l.o_proj
                               : m.short_name == "mlp.gate_proj"    ? &l.gate_proj
                               : m.short_name == "mlp.up_proj"      ? &l.up_proj
                                                                    : &l.down_proj;
      const bool attn = m.short_name.rfind("self_attn", 0) == 0;
      const int bits = mix && attn ? 4 : 8;
      EXPECT_EQ(lw->dtype, bits == 4 ? kernels::WeightDtype::kInt4 : kernels::WeightDtype::kInt8);
      EXPECT_EQ(lw->group_size, m.in_features == 172 ? 86 : 32) << m.name;
      EXPECT_EQ(lw->zeros.data() == nullptr, !mix) << m.name;  // w8 symmetric, mix asymmetric
      const size_t groups = static_cast<size_t>(m.out_features * m.in_features / lw->group_size);
      const size_t bytes =
          static_cast<size_t>(m.out_features * m.in_features * bits / 8) + groups * (mix ? 4 : 2);
      EXPECT_EQ(lw->bytes(), bytes) << m.name;
      (bits == 4 ? int4 : int8) += bytes;
      ExpectWithinHalfStep(*lw, ckpt.Require(m.name + ".weight", {m.out_features, m.in_features}),
                           m.name);
    }
    // Embedding fp16 (512 x 64 x 2 bytes); 11 norms of 64 fp32.
    std::map<std::string, size_t> want = {{"fp16", 65536}, {"fp32", 11 * 64 * 4}, {"int8", int8}};
    if (int4) want["int4"] = int4;
    EXPECT_EQ(w.BytesByPrecision(), want) << cfg;
    EXPECT_EQ(w.total_bytes, 65536 + 11 * 64 * 4 + int8 + int4);
    // Tied: in lm_head's fp16 panels (read back through the layout).
    ASSERT_EQ(w.embed_tokens.dtype, kernels::WeightDtype::kF16Panels);
    std::vector<float> emb(512 * 64), row(64);
    ckpt.Require("model.embed_tokens.weight", {512, 64}).ToFloat(emb.data());
    for (int64_t o = 0; o < 512; ++o) {
      kernels::cpu::DecodeWeightRow(w.embed_tokens.View(), o, row.data());
      for (int64_t i = 0; i < 64; ++i) {
        ASSERT_EQ(row[i], static_cast<float>(static_cast<_Float16>(emb[o * 64 + i])))
            << o << " " << i;
      }
    }
    EXPECT_THAT(w.MemorySummary(), HasSubstr("bits per weight"));
  }
}

// The CPU backend's integer kernels load int8/int4 modules as tiles: the
// same bytes per precision as the row-major load above, and every row
// decodes to the same weights.
TEST_F(QuantWeightsTest, IntTilesKeepBytesAndValues) {
  const std::string cfg = kData + "/quant_stories_mix4b8b.json";
  // Declared first: after the swap it holds the row backend, which must
  // outlive `rows` (it frees its buffers).
  auto other = kernels::CreateCpuBackend(1, kernels::CpuMatMulChoice{true, {}});
  const LlamaWeights rows = Load(TQ_MODEL_DIR, cfg);
  std::swap(backend_, other);
  const LlamaWeights tiles = Load(TQ_MODEL_DIR, cfg);
  EXPECT_EQ(tiles.BytesByPrecision(), rows.BytesByPrecision());
  EXPECT_EQ(tiles.total_bytes, rows.total_bytes);
  int tiled = 0;
  for (size_t l = 0; l < rows.layers.size(); ++l) {
    for (auto m : {&LlamaLayerWeights::q_proj, &LlamaLayerWeights::o_proj,
                   &LlamaLayerWeights::gate_proj, &LlamaLayerWeights::down_proj}) {
      const LinearWeight& a = rows.layers[l].*m;
      const LinearWeight& b = tiles.layers[l].*m;
      EXPECT_EQ(a.bytes(), b.bytes());
      tiled += kernels::LogicalWeightDtype(b.dtype) != b.dtype;
      std::vector<float> ra(a.in_features), rb(b.in_features);
      for (int32_t o = 0; o < a.out_features; ++o) {
        kernels::cpu::DecodeWeightRow(a.View(), o, ra.data());
        kernels::cpu::DecodeWeightRow(b.View(), o, rb.data());
        ASSERT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float))) << l << " " << o;
      }
    }
  }
  EXPECT_GT(tiled, 0);
}

TEST_F(QuantWeightsTest, OfflineCheckpointLoadsIdenticalToLoadTime) {
  const std::string cfg = kData + "/quant_stories_mix4b8b.json";
  const auto plan = quant::PlanFormats(quant::QuantConfig::Load(cfg), files_.config);
  const std::string out = Path("q");
  const quant::QuantizeSummary s =
      quant::WriteQuantizedCheckpoint(TQ_MODEL_DIR, files_.config, plan, out);
  EXPECT_EQ(s.quantized_modules, 35);
  EXPECT_EQ(s.bytes_written, fs::file_size(fs::path(out) / "model.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(out) / "tokenizer.model"));
  std::ifstream cfg_in(fs::path(out) / "config.json");
  const auto j = nlohmann::json::parse(cfg_in);
  EXPECT_EQ(j["quantization_config"]["quant_method"], "tqserve-rtn");
  EXPECT_EQ(j["quantization_config"]["modules"]["model.layers.1.mlp.down_proj"]["group_size"], 86);
  EXPECT_EQ(j["hidden_size"], 64);
  const SafetensorsFile f((fs::path(out) / "model.safetensors").string());
  EXPECT_EQ(f.tensors().at("model.layers.0.self_attn.q_proj.qweight").dtype, TensorDtype::kU8);
  EXPECT_EQ(f.tensors().at("model.layers.0.self_attn.q_proj.qweight").shape,
            (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(f.tensors().at("model.layers.0.mlp.down_proj.scales").shape,
            (std::vector<int64_t>{64, 2}));
  EXPECT_EQ(f.tensors().at("model.layers.0.mlp.down_proj.qzeros").dtype, TensorDtype::kF16);
  EXPECT_EQ(f.tensors().count("model.layers.0.mlp.down_proj.weight"), 0u);

  const LlamaWeights a = Load(TQ_MODEL_DIR, cfg);
  const LlamaWeights b = Load(out, "");
  EXPECT_EQ(a.BytesByPrecision(), b.BytesByPrecision());
  EXPECT_EQ(Bytes(a.embed_tokens.data), Bytes(b.embed_tokens.data));
  EXPECT_EQ(Bytes(a.norm), Bytes(b.norm));
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const LlamaLayerWeights &x = a.layers[l], &y = b.layers[l];
    EXPECT_EQ(Bytes(x.input_layernorm), Bytes(y.input_layernorm));
    for (auto m :
         {&LlamaLayerWeights::q_proj, &LlamaLayerWeights::k_proj, &LlamaLayerWeights::v_proj,
          &LlamaLayerWeights::o_proj, &LlamaLayerWeights::gate_proj, &LlamaLayerWeights::up_proj,
          &LlamaLayerWeights::down_proj}) {
      EXPECT_EQ((x.*m).dtype, (y.*m).dtype);
      EXPECT_EQ((x.*m).group_size, (y.*m).group_size);
      EXPECT_EQ(Bytes((x.*m).data), Bytes((y.*m).data)) << "layer " << l;
      EXPECT_EQ(Bytes((x.*m).scales), Bytes((y.*m).scales)) << "layer " << l;
      EXPECT_EQ(Bytes((x.*m).zeros), Bytes((y.*m).zeros)) << "layer " << l;
    }
  }
  try {
    Load(out, cfg);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("already quantized"));
  }
  EXPECT_THROW(quant::WriteQuantizedCheckpoint(out, files_.config, plan, Path("q2")), Error);
}

// Rows [row0, row0 + rows) and code bytes / groups [c0, c0 + n) of each row of
// a quantized weight's buffers, as the unsplit model holds them.
std::vector<uint8_t> Sub(const kernels::BackendBuffer& b, int64_t row_bytes, int64_t row0,
                         int64_t rows, int64_t c0, int64_t n) {
  std::vector<uint8_t> out;
  const auto* p = b.as<const uint8_t>();
  for (int64_t r = row0; r < row0 + rows; ++r) {
    out.insert(out.end(), p + r * row_bytes + c0, p + r * row_bytes + c0 + n);
  }
  return out;
}

TEST_F(QuantWeightsTest, TensorParallelSlicesEqualTheUnsplitModel) {
  const std::string cfg = kData + "/quant_stories_mix4b8b.json";
  const auto plan = quant::PlanFormats(quant::QuantConfig::Load(cfg), files_.config);
  quant::WriteQuantizedCheckpoint(TQ_MODEL_DIR, files_.config, plan, Path("q"));
  const LlamaWeights whole = Load(TQ_MODEL_DIR, cfg);
  const TpPlan rank1 = MakeTpPlan(files_.config, 1, 2);
  for (const std::string& dir : {std::string(TQ_MODEL_DIR), Path("q")}) {
    const LlamaWeights part = Load(dir, dir == TQ_MODEL_DIR ? cfg : "", rank1);
    const LlamaLayerWeights &w = whole.layers[3], &p = part.layers[3];
    // q_proj int4 g32 asym, column-parallel: rows 32..63 of [64, 64]; 32 code
    // bytes and 2 groups per row.
    EXPECT_EQ(Bytes(p.q_proj.data), Sub(w.q_proj.data, 32, 32, 32, 0, 32)) << dir;
    EXPECT_EQ(Bytes(p.q_proj.zeros), Sub(w.q_proj.zeros, 4, 32, 32, 0, 4)) << dir;
    // o_proj int4 g32, row-parallel: input channels 32..63 = code bytes 16..31
    // and group 1 of every row.
    EXPECT_EQ(Bytes(p.o_proj.data), Sub(w.o_proj.data, 32, 0, 64, 16, 16)) << dir;
    EXPECT_EQ(Bytes(p.o_proj.scales), Sub(w.o_proj.scales, 4, 0, 64, 2, 2)) << dir;
    // down_proj int8 g86, row-parallel: channels 86..171, group 1.
    EXPECT_EQ(Bytes(p.down_proj.data), Sub(w.down_proj.data, 172, 0, 64, 86, 86)) << dir;
    EXPECT_EQ(Bytes(p.down_proj.zeros), Sub(w.down_proj.zeros, 4, 0, 64, 2, 2)) << dir;
    EXPECT_EQ(p.down_proj.in_features, 86);
    // up_proj int8 g32, column-parallel: rows 86..171.
    EXPECT_EQ(Bytes(p.up_proj.data), Sub(w.up_proj.data, 64, 86, 86, 0, 64)) << dir;
    // The tied 16-bit lm_head shard is a view of embed_tokens rows 256..511.
    EXPECT_TRUE(part.lm_head.empty());
    EXPECT_EQ(part.LmHeadView(256).data, part.embed_tokens.data.as<const uint8_t>() + 256 * 64 * 2);
  }
  // A slice that cuts a group: o_proj group 64 across 2 ranks of 32 channels.
  const std::string bad = Path("bad.json");
  std::ofstream(bad) << R"({"bits": 8, "group_size": 64,
                            "overrides": [{"modules": "mlp.down_proj", "group_size": 86}]})";
  try {
    Load(TQ_MODEL_DIR, bad, rank1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("group_size 64 does not divide the tensor-parallel slice"));
  }
}

TEST_F(QuantWeightsTest, CorruptQuantizedCheckpointsAreRejected) {
  const std::string cfg = kData + "/quant_stories_w4.json";
  auto plan = quant::PlanFormats(quant::QuantConfig::Load(cfg), files_.config);
  const std::string out = Path("q");
  quant::WriteQuantizedCheckpoint(TQ_MODEL_DIR, files_.config, plan, out);
  // config.json says symmetric but the file has zero points.
  std::ifstream in(fs::path(out) / "config.json");
  auto j = nlohmann::json::parse(in);
  in.close();
  j["quantization_config"]["modules"]["model.layers.0.self_attn.q_proj"]["symmetric"] = true;
  std::ofstream(fs::path(out) / "config.json") << j.dump();
  try {
    Load(out, "");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.layers.0.self_attn.q_proj is int4 g32 sym in "
                                    "config.json but has tensor"));
  }
  j["quantization_config"]["quant_method"] = "gptq";
  std::ofstream(fs::path(out) / "config.json") << j.dump();
  EXPECT_THROW(Load(out, ""), Error);
  j["quantization_config"]["quant_method"] = "tqserve-rtn";
  j["quantization_config"]["modules"]["model.layers.0.self_attn.q_proj"] = {
      {"bits", 8}, {"group_size", 32}, {"symmetric", false}};
  std::ofstream(fs::path(out) / "config.json") << j.dump();
  try {
    Load(out, "");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("q_proj.qweight has shape [64, 32], expected [64, 64]"));
  }
}

TEST_F(QuantWeightsTest, Bf16CheckpointKeepsBf16EmbeddingsAndUntiedHead) {
  RandomModelSpec spec;
  spec.config = files_.config;
  spec.config.tie_word_embeddings = false;
  spec.dtype = TensorDtype::kBF16;
  WriteRandomModel(Path("m"), spec, "");
  const ModelFiles mf = LoadModelFiles(Path("m"));
  quant::QuantConfig cfg = quant::QuantConfig::Load(kData + "/quant_stories_w4.json");
  WeightLoadOptions opts;
  opts.quant = &cfg;
  const LlamaWeights w = LoadLlamaWeights(Path("m"), mf.config, backend_.get(), {}, opts);
  EXPECT_EQ(w.embed_tokens.dtype, kernels::WeightDtype::kBF16);
  ASSERT_FALSE(w.lm_head.empty());
  // bf16, in the CPU backend's panel layout (512 rows are whole panels of 64).
  EXPECT_EQ(w.lm_head.dtype, kernels::WeightDtype::kBF16Panels);
  EXPECT_EQ(w.LmHeadView(512).data, w.lm_head.data.data());
  EXPECT_EQ(w.BytesByPrecision().at("bf16"), 2u * 512 * 64 * 2);
  // bf16 -> bf16 is a copy: every stored weight is the checkpoint's (read
  // back through the panel layout; bf16 widens to fp32 exactly).
  const SafetensorsCheckpoint ckpt(Path("m"));
  const TensorInfo& t = ckpt.Require("lm_head.weight", {512, 64});
  std::vector<float> want(512 * 64), row(64);
  t.ToFloat(want.data());
  for (int o = 0; o < 512; ++o) {
    kernels::cpu::DecodeWeightRow(w.LmHeadView(512), o, row.data());
    ASSERT_EQ(0, std::memcmp(row.data(), want.data() + o * 64, 64 * sizeof(float))) << o;
  }
}

}  // namespace
}  // namespace tq

namespace tq {
namespace {

TEST_F(QuantWeightsTest, DenseDtypeFollowsVllmDtype) {
  RandomModelSpec spec;
  spec.config = files_.config;
  spec.dtype = TensorDtype::kBF16;
  WriteRandomModel(Path("m"), spec, "");
  const ModelFiles mf = LoadModelFiles(Path("m"));
  auto load = [&](const std::string& dir, const ModelConfig& c, DenseDtype d) {
    WeightLoadOptions opts;
    opts.dense_dtype = d;
    return LoadLlamaWeights(dir, c, backend_.get(), {}, opts);
  };
  // bf16 checkpoint: the library default widens to fp32, auto keeps bf16.
  // (gate_proj, 172 rows, is not a whole number of the CPU backend's fp32
  // panels, so it stays row-major kF32.)
  EXPECT_EQ(load(Path("m"), mf.config, DenseDtype::kDefault).layers[0].gate_proj.dtype,
            kernels::WeightDtype::kF32);
  const LlamaWeights a = load(Path("m"), mf.config, DenseDtype::kAuto);
  // bf16 (down_proj, 64 x 172, in the CPU backend's bf16 panels).
  EXPECT_EQ(a.layers[4].down_proj.dtype, kernels::WeightDtype::kBF16Panels);
  EXPECT_EQ(a.embed_tokens.dtype, kernels::WeightDtype::kBF16Panels);  // tied: lm_head's panels
  // Linears and embeddings 2 bytes per parameter, 11 norms of 64 fp32.
  const size_t params = 512 * 64 + 5 * 45312;
  EXPECT_EQ(a.BytesByPrecision(),
            (std::map<std::string, size_t>{{"bf16", params * 2}, {"fp32", 11 * 64 * 4}}));
  // fp32 checkpoint: auto is fp32 (unchanged); float16 rounds every weight.
  EXPECT_EQ(load(TQ_MODEL_DIR, files_.config, DenseDtype::kAuto).BytesByPrecision(),
            (std::map<std::string, size_t>{{"fp32", 1040128}}));
  const LlamaWeights h = load(TQ_MODEL_DIR, files_.config, DenseDtype::kFloat16);
  // fp16, in the CPU backend's fp16 panels (64 x 64: one panel).
  ASSERT_EQ(h.layers[2].o_proj.dtype, kernels::WeightDtype::kF16Panels);
  const SafetensorsCheckpoint ckpt(TQ_MODEL_DIR);
  std::vector<float> o(64 * 64), row(64);
  ckpt.Require("model.layers.2.self_attn.o_proj.weight", {64, 64}).ToFloat(o.data());
  for (int r = 0; r < 64; ++r) {
    kernels::cpu::DecodeWeightRow(h.layers[2].o_proj.View(), r, row.data());
    for (int i = 0; i < 64; ++i) {
      ASSERT_EQ(row[i], static_cast<float>(static_cast<_Float16>(o[r * 64 + i]))) << r << "," << i;
    }
  }
}

}  // namespace
}  // namespace tq
