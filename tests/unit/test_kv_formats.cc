// The quantized KV formats (int8, int4, tq3, tq4, tqk3v2): sizes, reconstruction
// error, and paged attention over the codes against a slow reference that
// decodes the bytes itself from the layout in docs/kv-cache.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/kv/tq_codec_state.h"
#include "kernels/backend.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/half.h"
#include "kernels/tq/bitplanes.h"

namespace tq {
namespace {

using kernels::KvDtype;

ModelConfig SmallConfig(int32_t head_dim, int32_t kv_heads) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = head_dim * kv_heads * 2;
  c.intermediate_size = 64;
  c.num_hidden_layers = 1;
  c.num_attention_heads = kv_heads * 2;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = 32;
  c.max_position_embeddings = 4096;
  c.rope_theta = 10000.0;
  return c;
}

TEST(KvFormats, BitsPerElementIncludeTheParameters) {
  // tq3: 3-bit codes + one fp16 norm per vector: 3 + 16/d bits.
  EXPECT_DOUBLE_EQ(kernels::KvBitsPerElement(KvDtype::kTq3, 128), 3.125);
  EXPECT_DOUBLE_EQ(kernels::KvBitsPerElement(KvDtype::kTq3, 64), 3.25);
  EXPECT_DOUBLE_EQ(kernels::KvBitsPerElement(KvDtype::kTq3, 8), 5.0);
  // tq4: keys 4 + 16/d, values 3 + 16/d.
  EXPECT_DOUBLE_EQ(kernels::KvBitsPerElement(KvDtype::kTq4, 128), 3.625);
  // tqk3v2: keys 3 + 16/d, values 2 + 16/d.
  EXPECT_DOUBLE_EQ(kernels::KvBitsPerElement(KvDtype::kTqK3V2, 128), 2.625);
  EXPECT_DOUBLE_EQ(kernels::KvBitsPerElement(KvDtype::kTqK3V2, 8), 4.5);
  // int8 / int4: fp16 scale + fp16 zero per vector.
  EXPECT_DOUBLE_EQ(kernels::KvBitsPerElement(KvDtype::kInt8, 128), 8.25);
  EXPECT_DOUBLE_EQ(kernels::KvBitsPerElement(KvDtype::kInt4, 128), 4.25);
  EXPECT_DOUBLE_EQ(kernels::KvBitsPerElement(KvDtype::kF16, 128), 16.0);
}

TEST(KvFormats, Tq3HoldsAtLeast4point9TimesTheTokensOfFp16) {
  // Llama-3-8B shape: 32 layers, 8 KV heads, head_dim 128, blocks of 16; 1 GiB.
  auto layout = [](KvDtype d) {
    kernels::KvLayout l;
    l.dtype = d;
    l.block_size = 16;
    l.num_kv_heads = 8;
    l.head_dim = 128;
    return l;
  };
  const size_t budget = size_t{1} << 30;
  const int64_t fp16 = PagedKvCache::BlocksForBudget(budget, 32, layout(KvDtype::kF16));
  const int64_t tq3 = PagedKvCache::BlocksForBudget(budget, 32, layout(KvDtype::kTq3));
  EXPECT_EQ(fp16, 512);  // 2 MiB per block
  EXPECT_GE(static_cast<double>(tq3) / fp16, 4.9);
  EXPECT_EQ(tq3, static_cast<int64_t>(budget / (32 * 2 * 8 * 16 * 50)));
}

// Mean |x - x̂|² of random unit vectors through the value codec (rotated
// accumulation undone by Rᵀ), as in TurboQuant's MSE bound.
double TqValueMse(KvDtype dtype, int32_t d, int n) {
  const ModelConfig c = SmallConfig(d, 1);
  TqCodecState state(c, dtype, 8, {}, {});
  kernels::KvLayout l{dtype, 1, 1, 1, d};
  const kernels::KvRecord rec = l.VRecord();
  std::vector<uint8_t> record(rec.bytes());
  std::vector<float> x(d), y(d), scratch(2 * d);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  double total = 0.0;
  for (int v = 0; v < n; ++v) {
    double norm = 0.0;
    for (float& e : x) {
      e = normal(rng);
      norm += static_cast<double>(e) * e;
    }
    for (float& e : x) e = static_cast<float>(e / std::sqrt(norm));
    kernels::cpu::EncodeRecord(x.data(), l, state.Layer(0), kernels::cpu::KvSide::kValue, 0,
                               record.data(), record.data() + rec.code_bytes, scratch.data());
    kernels::cpu::DecodeRecord(record.data(), record.data() + rec.code_bytes, l, state.Layer(0),
                               kernels::cpu::KvSide::kValue, 0, y.data());
    state.rotation().Inverse(y.data(), y.data());
    for (int i = 0; i < d; ++i) total += (x[i] - y[i]) * double(x[i] - y[i]);
  }
  return total / n;
}

TEST(KvFormats, Tq3MseOnUnitVectorsIsNearTheOptimum) {
  const double mse = TqValueMse(KvDtype::kTq3, 128, 4000);
  std::printf("tq3 MSE on unit vectors, d=128: %.5f\n", mse);
  EXPECT_LE(mse, 0.035);  // the Lloyd–Max optimum for this density is ≈ 0.034
  EXPECT_GE(mse, 0.030);
}

// tqk3v2 values: 4 Lloyd–Max levels. Max (1960, Table I) gives the 2-bit
// optimum for a Gaussian coordinate as D = 0.1175 (relative to its variance;
// 0.03454 at 3 bits). The codec stores |x| / |ĉ|, so the reconstruction has
// the length of x and its error is 2 - 2 E[x·ĉ] / |ĉ| = 2 - 2 sqrt(1 - D) =
// 0.121 (0.0348 at 3 bits); the sphere's coordinate density at d = 128 is a
// little lighter-tailed than the Gaussian, so slightly less.
TEST(KvFormats, TqK3V2ValueMseOnUnitVectorsIsNearTheTwoBitOptimum) {
  const double mse = TqValueMse(KvDtype::kTqK3V2, 128, 4000);
  std::printf("tqk3v2 value MSE on unit vectors, d=128: %.5f\n", mse);
  EXPECT_LE(mse, 0.125);
  EXPECT_GE(mse, 0.110);
}

TEST(KvFormats, IntFormatsRoundTripWithinHalfAStep) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-3.0f, 5.0f);
  for (KvDtype dtype : {KvDtype::kInt8, KvDtype::kInt4}) {
    for (int32_t d : {8, 64, 7}) {
      kernels::KvLayout l{dtype, 1, 1, 1, d};
      const kernels::KvRecord rec = l.KRecord();
      std::vector<uint8_t> record(rec.bytes());
      std::vector<float> x(d), y(d), scratch(2 * d);
      for (float& e : x) e = u(rng);
      kernels::cpu::EncodeRecord(x.data(), l, nullptr, kernels::cpu::KvSide::kKey, 0, record.data(),
                                 record.data() + rec.code_bytes, scratch.data());
      kernels::cpu::DecodeRecord(record.data(), record.data() + rec.code_bytes, l, nullptr,
                                 kernels::cpu::KvSide::kKey, 0, y.data());
      const float lo = *std::min_element(x.begin(), x.end());
      const float hi = *std::max_element(x.begin(), x.end());
      const float step = (hi - lo) / (dtype == KvDtype::kInt8 ? 255.0f : 15.0f);
      for (int32_t i = 0; i < d; ++i) {
        // Half a step, plus fp16 rounding of scale and zero.
        EXPECT_NEAR(y[i], x[i], 0.5f * step * 1.01f + 4e-3f * std::fabs(hi - lo) / 255.0f + 2e-3f)
            << kernels::KvDtypeName(dtype) << " d " << d << " i " << i;
      }
    }
  }
}

// Slow reference: decode record (slot, head) of a tq pool from its bytes.
// Keys come back before RoPE.
void ReferenceDecode(const std::vector<uint8_t>& pool, const kernels::KvLayout& l, bool key,
                     int64_t slot, int32_t head, const TqCodecState& state,
                     const std::vector<float>& mean, const std::vector<float>& scale,
                     std::vector<double>* out) {
  const int32_t d = l.head_dim;
  const int32_t bits = key ? kernels::TqKeyBits(l.dtype) : kernels::TqValueBits(l.dtype);
  const size_t code_bytes = kernels::PlaneBytes(d, bits);
  const size_t record = code_bytes + 2;
  // Tile of (block, head): block_size code records, then block_size fp16 norms.
  const size_t tile = (slot / l.block_size * l.num_kv_heads + head) * l.block_size * record;
  const uint8_t* code = pool.data() + tile + slot % l.block_size * code_bytes;
  uint16_t h;
  std::memcpy(&h, pool.data() + tile + l.block_size * code_bytes + slot % l.block_size * 2, 2);
  const float norm = kernels::HalfToFloat(h);
  std::vector<uint8_t> idx(d);
  kernels::UnpackPlanes(code, d, bits, idx.data());
  const auto& cb = key ? state.key_codebook() : state.value_codebook();
  std::vector<float> y(d), x(d);
  for (int32_t i = 0; i < d; ++i) y[i] = cb.centroids[idx[i]];
  state.rotation().Inverse(y.data(), x.data());
  out->resize(d);
  for (int32_t i = 0; i < d; ++i) {
    double v = static_cast<double>(norm) * x[i];
    if (key) v = v * scale[head * d + i] + mean[head * d + i];
    (*out)[i] = v;
  }
}

// Causal attention in float64 of one query head (q[d]) at position t: key(j)
// gives the pre-RoPE key of position j (RoPE, rotate_half, is applied here),
// value(j) its value.
std::vector<double> ReferenceAttention(const float* q, int32_t t, int32_t d,
                                       const std::vector<float>& inv_freq,
                                       const std::function<std::vector<double>(int32_t)>& key,
                                       const std::function<std::vector<double>(int32_t)>& value) {
  std::vector<double> scores(t + 1), acc(d, 0.0);
  for (int32_t j = 0; j <= t; ++j) {
    std::vector<double> k = key(j);
    for (int32_t i = 0; i < d / 2; ++i) {
      const double a = j * static_cast<double>(inv_freq[i]);
      const double x1 = k[i], x2 = k[i + d / 2];
      k[i] = x1 * std::cos(a) - x2 * std::sin(a);
      k[i + d / 2] = x2 * std::cos(a) + x1 * std::sin(a);
    }
    double dot = 0.0;
    for (int32_t i = 0; i < d; ++i) dot += q[i] * k[i];
    scores[j] = dot / std::sqrt(static_cast<double>(d));
  }
  const double mx = *std::max_element(scores.begin(), scores.end());
  double sum = 0.0;
  for (double& e : scores) {
    e = std::exp(e - mx);
    sum += e;
  }
  for (int32_t j = 0; j <= t; ++j) {
    const std::vector<double> v = value(j);
    for (int32_t i = 0; i < d; ++i) acc[i] += scores[j] / sum * v[i];
  }
  return acc;
}

TEST(KvFormats, TqAttentionEqualsAttentionOverDequantizedVectors) {
  for (KvDtype dtype : {KvDtype::kTq3, KvDtype::kTq4, KvDtype::kTqK3V2}) {
    for (int32_t d : {128, 8, 96}) {
      SCOPED_TRACE(std::string(kernels::KvDtypeName(dtype)) + " d " + std::to_string(d));
      const int32_t kv_heads = 2, group = 2, heads = kv_heads * group, block = 16, ctx = 37;
      const ModelConfig c = SmallConfig(d, kv_heads);
      std::mt19937_64 rng(3);
      std::normal_distribution<float> normal;
      std::uniform_real_distribution<float> uni(0.5f, 2.0f);
      std::vector<float> mean(kv_heads * d), scale(kv_heads * d);
      for (float& m : mean) m = normal(rng);
      for (float& s : scale) s = uni(rng);
      TqCodecState state(c, dtype, c.max_position_embeddings, mean, scale);

      auto backend = kernels::CreateCpuBackend(2);
      kernels::KvLayout l{dtype, 4, block, kv_heads, d};
      PagedKvCache cache(
          backend.get(), 1, l,
          std::make_shared<TqCodecState>(c, dtype, c.max_position_embeddings, mean, scale));
      // One sequence of ctx tokens in blocks {2, 0, 3}.
      const std::vector<int32_t> table = {2, 0, 3, -1};
      std::vector<int32_t> slots(ctx), pos(ctx), seq(ctx, 0);
      for (int32_t j = 0; j < ctx; ++j) {
        slots[j] = table[j / block] * block + j % block;
        pos[j] = j;
      }
      std::vector<float> k(ctx * kv_heads * d), v(k.size()), q(ctx * heads * d);
      for (float& e : k) e = normal(rng) * 2.0f + 1.0f;
      for (float& e : v) e = normal(rng);
      for (float& e : q) e = normal(rng);
      kernels::KvLayerView view = cache.Layer(0);
      backend->KvWrite({k.data(), v.data(), slots.data(), ctx, view});
      std::vector<float> out(q.size(), NAN);
      kernels::PagedAttentionParams p;
      p.q = q.data();
      p.out = out.data();
      p.token_seq = seq.data();
      p.token_pos = pos.data();
      p.block_tables = table.data();
      p.num_tokens = ctx;
      p.num_heads = heads;
      p.max_blocks_per_seq = 4;
      p.scale = 1.0f / std::sqrt(static_cast<float>(d));
      p.cache = view;
      backend->PagedAttention(p);

      const size_t kbytes = l.BlockBytes() * l.num_blocks, vbytes = l.VBlockBytes() * l.num_blocks;
      std::vector<uint8_t> kpool(kbytes), vpool(vbytes);
      std::memcpy(kpool.data(), view.k, kbytes);
      std::memcpy(vpool.data(), view.v, vbytes);
      const std::vector<float> inv_freq = c.RopeInvFreq();
      double max_err = 0.0, max_ref = 0.0;
      for (int32_t t = 0; t < ctx; ++t) {
        for (int32_t hq = 0; hq < heads; ++hq) {
          const int32_t hk = hq / group;
          const std::vector<double> acc = ReferenceAttention(
              q.data() + (t * heads + hq) * d, t, d, inv_freq,
              [&](int32_t j) {
                std::vector<double> key;
                ReferenceDecode(kpool, l, true, slots[j], hk, state, mean, scale, &key);
                return key;
              },
              [&](int32_t j) {
                std::vector<double> value;
                ReferenceDecode(vpool, l, false, slots[j], hk, state, mean, scale, &value);
                return value;
              });
          for (int32_t i = 0; i < d; ++i) {
            max_err = std::max(max_err, std::fabs(out[(t * heads + hq) * d + i] - acc[i]));
            max_ref = std::max(max_ref, std::fabs(acc[i]));
          }
        }
      }
      EXPECT_LT(max_err / max_ref, 1e-4) << "max err " << max_err << " of " << max_ref;
    }
  }
}

// With every position inside the attention sink, tq attention must equal
// exact attention over the original (unquantized) K and V.
TEST(KvFormats, SinkPositionsAreExact) {
  for (int32_t d : {128, 96}) {  // tiled (Hadamard) and per-record (dense) paths
    SCOPED_TRACE("d " + std::to_string(d));
    const int32_t kv_heads = 2, group = 2, heads = kv_heads * group, ctx = 6, sink = 8;
    const ModelConfig c = SmallConfig(d, kv_heads);
    auto backend = kernels::CreateCpuBackend(1);
    kernels::KvLayout l{KvDtype::kTq3, 2, 16, kv_heads, d};
    PagedKvCache cache(backend.get(), 1, l,
                       std::make_shared<TqCodecState>(c, KvDtype::kTq3, c.max_position_embeddings,
                                                      std::vector<float>{}, std::vector<float>{}),
                       sink);
    std::mt19937_64 rng(9);
    std::normal_distribution<float> normal;
    const std::vector<int32_t> table = {1, -1};
    std::vector<int32_t> slots(ctx), pos(ctx), seq(ctx, 0);
    for (int32_t j = 0; j < ctx; ++j) {
      slots[j] = 16 + j;
      pos[j] = j;
    }
    std::vector<float> k(ctx * kv_heads * d), v(k.size()), q(ctx * heads * d);
    for (float& e : k) e = normal(rng);
    for (float& e : v) e = normal(rng);
    for (float& e : q) e = normal(rng);
    const kernels::KvLayerView view = cache.Layer(0);
    backend->KvWrite({k.data(), v.data(), slots.data(), ctx, view, pos.data()});
    std::vector<float> out(q.size(), NAN);
    kernels::PagedAttentionParams p;
    p.q = q.data();
    p.out = out.data();
    p.token_seq = seq.data();
    p.token_pos = pos.data();
    p.block_tables = table.data();
    p.num_tokens = ctx;
    p.num_heads = heads;
    p.max_blocks_per_seq = 2;
    p.scale = 1.0f / std::sqrt(static_cast<float>(d));
    p.cache = view;
    backend->PagedAttention(p);

    const std::vector<float> inv_freq = c.RopeInvFreq();
    double max_err = 0.0;
    for (int32_t t = 0; t < ctx; ++t) {
      for (int32_t hq = 0; hq < heads; ++hq) {
        const int32_t hk = hq / group;
        auto row = [&](const std::vector<float>& x, int32_t j) {
          return std::vector<double>(x.begin() + (j * kv_heads + hk) * d,
                                     x.begin() + (j * kv_heads + hk + 1) * d);
        };
        const std::vector<double> acc = ReferenceAttention(
            q.data() + (t * heads + hq) * d, t, d, inv_freq, [&](int32_t j) { return row(k, j); },
            [&](int32_t j) { return row(v, j); });
        for (int32_t i = 0; i < d; ++i) {
          max_err = std::max(max_err, std::fabs(out[(t * heads + hq) * d + i] - acc[i]));
        }
      }
    }
    EXPECT_LT(max_err, 1e-4);
  }
}

}  // namespace
}  // namespace tq
