// Long-context retrieval through every KV format (issue 21 item 3), shared by
// the CPU test (tests/unit/test_kv_retrieval.cc) and the CUDA one
// (tests/cuda/test_cuda_kv_retrieval.cc), which run it on their backend: at
// contexts of 4K, 16K and 32K positions, head_dim 128, GQA 4:1, a "needle"
// key planted at several depths among keys drawn from trained-hd128's
// calibrated pre-RoPE key statistics (tests/data/trained_hd128_key_stats.json:
// layer 2 KV head 0 and layer 3 KV head 1, whose channels include the
// model's outliers: σ up to 18x the median, |μ| up to 28). Every query head
// of a group is aligned with the needle (a random direction at the keys' RMS
// norm, after RoPE; the cache gets its pre-RoPE form at its position) and
// scaled so that fp32 attention gives the needle a weight of 0.3, 0.5, 0.7
// or 0.9. For each format the test checks that
//   1. the needle is still the top-1 key of every query head, in the scores
//      the format's decoded keys give (the CPU codec, which attention reads
//      bit-for-bit: test_kv_formats.cc; CUDA writes the same records up to
//      rare one-code rounding flips: test_cuda_kv.cc), as it is with fp32;
//   2. the attention output of the backend, relative to its output with an
//      fp32 cache, stays within the first-order bound derived below.
//
// The bound. With fp32 probabilities p_j, values v_j and output o = Σ p_j v_j,
// a format adds value errors δv_j and score errors δs_j (logits), so the
// weights become p̂_j = p_j w_j / Σ_i p_i w_i with w_j = e^{δs_j}. Treating the
// per-record errors as independent and zero-mean, with E|δv_j|² = D_v |v_j|²
// (D_v: the format's relative mean squared error on values) and δs_j of
// variance σ_s² for the background keys (w log-normal: Var w / (E w)² =
// e^{σ_s²} − 1) and the needle's own δs_n,
//   E|δo|² ≈ D_v Σ p_j² |v_j|² + (e^{σ_s²} − 1) Σ_bg p_j² |v_j − o|²
//            + (e^{δs_n²} − 1) p_n² |v_n − o|².
// The test requires |δo| / |o| <= 3·sqrt(E|δo|²) / |o| + 2e-4 (three standard
// deviations; 2e-4 absorbs fp32 summation order). D_v, σ_s and δs_n are
// measured from the records (decoded vs written vectors), not from attention,
// so a kernel error at long context (addressing past 2^15 slots, lost
// precision in the softmax or the value sums) shows up as a violation.
// Under a sanitizer (make test-asan) only the 4K and 32K contexts at depth 0.5 run.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_calibration.h"
#include "engine/kv/tq_codec_state.h"
#include "kernels/backend.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/tq/rotation.h"

namespace tq::needle {

using kernels::KvDtype;

using kernels::KvDtype;

constexpr int32_t kD = 128, kKvHeads = 2, kGroup = 4, kHeads = kKvHeads * kGroup;
constexpr int32_t kBlock = 16, kMaxCtx = 32768;
constexpr double kTargetWeight[kGroup] = {0.3, 0.5, 0.7, 0.9};

inline ModelConfig RetrievalConfig() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = kHeads * kD;
  c.intermediate_size = 64;
  c.num_hidden_layers = 1;
  c.num_attention_heads = kHeads;
  c.num_key_value_heads = kKvHeads;
  c.head_dim = kD;
  c.vocab_size = 32;
  c.max_position_embeddings = kMaxCtx;
  c.rope_theta = 500000.0;  // Llama 3
  return c;
}

// cos/sin of pos·θ_i, [kMaxCtx][kD / 2], computed once in double.
struct RopeTable {
  std::vector<double> cos, sin;
  explicit RopeTable(const std::vector<float>& inv_freq)
      : cos(static_cast<size_t>(kMaxCtx) * kD / 2), sin(cos.size()) {
    for (int32_t pos = 0; pos < kMaxCtx; ++pos) {
      for (int32_t i = 0; i < kD / 2; ++i) {
        const double a = static_cast<double>(pos) * inv_freq[i];
        cos[static_cast<size_t>(pos) * kD / 2 + i] = std::cos(a);
        sin[static_cast<size_t>(pos) * kD / 2 + i] = std::sin(a);
      }
    }
  }
  // RoPE (rotate_half, as HF Llama) of a pre-RoPE key at `pos` into out[kD].
  template <typename T>
  void Apply(const T* k, int32_t pos, double* out) const {
    const double* c = cos.data() + static_cast<size_t>(pos) * kD / 2;
    const double* s = sin.data() + static_cast<size_t>(pos) * kD / 2;
    for (int32_t i = 0; i < kD / 2; ++i) {
      const double x1 = k[i], x2 = k[i + kD / 2];
      out[i] = x1 * c[i] - x2 * s[i];
      out[i + kD / 2] = x2 * c[i] + x1 * s[i];
    }
  }
  // The pre-RoPE key whose RoPE at `pos` is k (rotation by the opposite angles).
  void Invert(const double* k, int32_t pos, float* out) const {
    const double* c = cos.data() + static_cast<size_t>(pos) * kD / 2;
    const double* s = sin.data() + static_cast<size_t>(pos) * kD / 2;
    for (int32_t i = 0; i < kD / 2; ++i) {
      const double x1 = k[i], x2 = k[i + kD / 2];
      out[i] = static_cast<float>(x1 * c[i] + x2 * s[i]);
      out[i + kD / 2] = static_cast<float>(x2 * c[i] - x1 * s[i]);
    }
  }
  std::vector<double> operator()(const float* k, int32_t pos) const {
    std::vector<double> out(kD);
    Apply(k, pos, out.data());
    return out;
  }
};

inline double Dot(const double* a, const double* b) {
  double s = 0.0;
  for (int32_t i = 0; i < kD; ++i) s += a[i] * b[i];
  return s;
}

// The test data: pre-RoPE keys and values of kMaxCtx positions, the needle, the stats.
struct Data {
  std::vector<float> mean, scale;   // [kKvHeads][kD]
  std::vector<float> keys, values;  // [kMaxCtx][kKvHeads][kD], keys before RoPE
  // [kKvHeads][kD], after RoPE: a random direction (the query's) at the keys'
  // RMS norm sqrt(Σ μ_i² + σ_i²), the same at every position.
  std::vector<double> needle;
};

inline Data MakeData() {
  // Layer 2 head 0 and layer 3 head 1 of trained-hd128 (the largest outliers).
  const KeyChannelStats stats =
      LoadKeyStats(std::string(TQ_TEST_DATA_DIR) + "/trained_hd128_key_stats.json", 4, 2, kD);
  Data d;
  const std::pair<int, int> heads[kKvHeads] = {{2, 0}, {3, 1}};
  for (const auto& [layer, head] : heads) {
    d.mean.insert(d.mean.end(), stats.Mean(layer) + head * kD, stats.Mean(layer) + (head + 1) * kD);
    d.scale.insert(d.scale.end(), stats.Scale(layer) + head * kD,
                   stats.Scale(layer) + (head + 1) * kD);
  }
  std::mt19937_64 rng(21);
  std::normal_distribution<float> normal;
  auto draw_key = [&](float* k) {
    for (int32_t i = 0; i < kKvHeads * kD; ++i) k[i] = d.mean[i] + d.scale[i] * normal(rng);
  };
  d.keys.resize(static_cast<size_t>(kMaxCtx) * kKvHeads * kD);
  d.values.resize(d.keys.size());
  for (int32_t j = 0; j < kMaxCtx; ++j)
    draw_key(d.keys.data() + static_cast<size_t>(j) * kKvHeads * kD);
  for (float& v : d.values) v = normal(rng);
  d.needle.resize(kKvHeads * kD);
  for (int32_t h = 0; h < kKvHeads; ++h) {
    double* n = d.needle.data() + h * kD;
    double n2 = 0.0, k2 = 0.0;
    for (int32_t i = 0; i < kD; ++i) {
      n[i] = normal(rng);
      n2 += n[i] * n[i];
      k2 += static_cast<double>(d.mean[h * kD + i]) * d.mean[h * kD + i] +
            static_cast<double>(d.scale[h * kD + i]) * d.scale[h * kD + i];
    }
    for (int32_t i = 0; i < kD; ++i) n[i] *= std::sqrt(k2 / n2);
  }
  return d;
}

// One retrieval case: context, needle position, queries, fp32 reference quantities.
struct Case {
  int32_t ctx = 0, needle_pos = 0;
  std::vector<float> q;  // [kHeads][kD], after RoPE
  // Per query head, from exact keys and values (fp32 probabilities p_j, output o):
  std::vector<std::vector<double>> s;  // exact scores (logits) [kHeads][ctx]
  // Σ p_j² |v_j|² and Σ p_j² |v_j − o|² over the background (bg) and the needle (n); |o|.
  double a_bg[kHeads], a_n[kHeads], b_bg[kHeads], b_n[kHeads], o_norm[kHeads];
};

// The scale β of q = β·RoPE(needle)/|needle| giving the needle weight `target`
// under exact scores `s_unit[j]` (scores of the unit-norm query, softmax scale included).
inline double SolveBeta(const std::vector<double>& s_unit, int32_t needle, double target) {
  auto weight = [&](double beta) {
    double m = -INFINITY;
    for (double s : s_unit) m = std::max(m, beta * s);
    double sum = 0.0;
    for (double s : s_unit) sum += std::exp(beta * s - m);
    return std::exp(beta * s_unit[needle] - m) / sum;
  };
  double lo = 0.0, hi = 1.0;
  for (int doublings = 0; weight(hi) < target; ++doublings) {
    if (doublings == 64) return NAN;  // unreachable: a background key outscores the needle
    hi *= 2.0;
  }
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    (weight(mid) < target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// The keys, values and RoPE of the test, built once per process (~0.2 GB).
struct NeedleWorld {
  Data data = MakeData();
  RopeTable rope{RetrievalConfig().RopeInvFreq()};
  // Post-RoPE exact keys (what an fp32 cache stores) for the reference scores.
  std::vector<double> post = std::vector<double>(static_cast<size_t>(kMaxCtx) * kKvHeads * kD);

  NeedleWorld() {
    for (size_t r = 0; r < static_cast<size_t>(kMaxCtx) * kKvHeads; ++r) {
      rope.Apply(data.keys.data() + r * kD, static_cast<int32_t>(r / kKvHeads),
                 post.data() + r * kD);
    }
  }
  static const NeedleWorld& Get() {
    static const NeedleWorld world;
    return world;
  }
  const double* Post(int32_t j, int32_t h) const {
    return post.data() + (static_cast<size_t>(j) * kKvHeads + h) * kD;
  }
  const float* Value(int32_t j, int32_t h) const {
    return data.values.data() + (static_cast<size_t>(j) * kKvHeads + h) * kD;
  }

  // Case c's exact scores of query head hq (q as stored, post-RoPE) and the
  // bound's sums over fp32 probabilities; `needle` is the head's post-RoPE needle.
  void ReferenceTerms(Case& c, int32_t hq, const double* needle) const {
    const int32_t h = hq / kGroup;
    const double scale = 1.0 / std::sqrt(static_cast<double>(kD));
    double q[kD];
    std::copy(c.q.begin() + hq * kD, c.q.begin() + (hq + 1) * kD, q);
    c.s.resize(kHeads);
    std::vector<double>& s = c.s[hq];
    s.resize(c.ctx);
    for (int32_t j = 0; j < c.ctx; ++j) {
      s[j] = Dot(q, j == c.needle_pos ? needle : Post(j, h)) * scale;
    }
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (double x : s) sum += std::exp(x - m);
    std::vector<double> o(kD, 0.0), p(c.ctx);
    for (int32_t j = 0; j < c.ctx; ++j) {
      p[j] = std::exp(s[j] - m) / sum;
      for (int32_t i = 0; i < kD; ++i) o[i] += p[j] * Value(j, h)[i];
    }
    c.a_bg[hq] = c.a_n[hq] = c.b_bg[hq] = c.b_n[hq] = 0.0;
    for (int32_t j = 0; j < c.ctx; ++j) {
      double v2 = 0.0, vo2 = 0.0;
      for (int32_t i = 0; i < kD; ++i) {
        const double v = Value(j, h)[i];
        v2 += v * v;
        vo2 += (v - o[i]) * (v - o[i]);
      }
      const bool n = j == c.needle_pos;
      (n ? c.a_n : c.a_bg)[hq] += p[j] * p[j] * v2;
      (n ? c.b_n : c.b_bg)[hq] += p[j] * p[j] * vo2;
    }
    c.o_norm[hq] = std::sqrt(Dot(o.data(), o.data()));
  }
};

// A buffer of `backend` holding `host` (host memory on the CPU backend).
template <typename T>
kernels::BackendBuffer ToBackend(kernels::Backend& backend, const T* host, size_t n) {
  kernels::BackendBuffer b(&backend, std::max<size_t>(n * sizeof(T), 1));
  backend.CopyToDevice(b.data(), host, n * sizeof(T));
  return b;
}

// The retrieval cases: 3 contexts x 3 depths (under a sanitizer 2 x 1);
// queries solved against the exact keys.
inline std::vector<Case> NeedleCases(const NeedleWorld& w) {
  const double softmax_scale = 1.0 / std::sqrt(static_cast<double>(kD));
  std::vector<Case> cases;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const std::vector<int32_t> contexts = {4096, 32768};
  const std::vector<double> depths = {0.5};
#else
  const std::vector<int32_t> contexts = {4096, 16384, 32768};
  const std::vector<double> depths = {0.1, 0.5, 0.9};
#endif
  for (int32_t ctx : contexts) {
    for (double depth : depths) {
      Case c;
      c.ctx = ctx;
      c.needle_pos = static_cast<int32_t>(depth * (ctx - 1));
      c.q.resize(kHeads * kD);
      for (int32_t h = 0; h < kKvHeads; ++h) {
        const std::vector<double> n(w.data.needle.begin() + h * kD,
                                    w.data.needle.begin() + (h + 1) * kD);
        const double norm = std::sqrt(Dot(n.data(), n.data()));
        std::vector<double> s_unit(ctx);
        for (int32_t j = 0; j < ctx; ++j) {
          s_unit[j] =
              Dot(n.data(), j == c.needle_pos ? n.data() : w.Post(j, h)) / norm * softmax_scale;
        }
        for (int32_t g = 0; g < kGroup; ++g) {
          const double beta = SolveBeta(s_unit, c.needle_pos, kTargetWeight[g]);
          EXPECT_TRUE(std::isfinite(beta)) << "ctx " << ctx << " depth " << depth;
          const int32_t hq = h * kGroup + g;
          for (int32_t i = 0; i < kD; ++i) {
            c.q[hq * kD + i] = static_cast<float>(beta * n[i] / norm);
          }
          w.ReferenceTerms(c, hq, n.data());
        }
      }
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// Runs every case through `backend`'s KvWrite and PagedAttention with each of
// `dtypes` (kF32 first: it is the reference of the output error), checks 1.
// and 2. of the comment above, and prints one table row per dtype and context.
inline void RunNeedleRetrieval(kernels::Backend& backend, std::span<const KvDtype> dtypes) {
  ASSERT_FALSE(dtypes.empty());
  ASSERT_EQ(dtypes.front(), KvDtype::kF32);
  const NeedleWorld& w = NeedleWorld::Get();
  const ModelConfig config = RetrievalConfig();
  const double softmax_scale = 1.0 / std::sqrt(static_cast<double>(kD));
  const Data& data = w.data;
  const RopeTable& rope = w.rope;
  const std::vector<Case> cases = NeedleCases(w);
  if (::testing::Test::HasFailure()) return;

  // A block table in a shuffled order, as a long-running pool hands blocks out.
  const int32_t num_blocks = kMaxCtx / kBlock;
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(5));
  auto slot_of = [&](int32_t j) { return table[j / kBlock] * kBlock + j % kBlock; };
  const kernels::BackendBuffer table_b = ToBackend(backend, table.data(), table.size());
  const int32_t seq = 0;
  const kernels::BackendBuffer seq_b = ToBackend(backend, &seq, 1);

  std::vector<std::vector<float>> fp32_out(cases.size());
  std::printf(
      "| backend | dtype | context | needle top-1 (query heads x depths) | max rel. error vs fp32 "
      "| bound there | max σ_s (nats) |\n");
  for (KvDtype dtype : dtypes) {
    SCOPED_TRACE(std::string(kernels::KvDtypeName(dtype)));
    const bool pre_rope = kernels::KvStoresPreRopeKeys(dtype);
    std::shared_ptr<TqCodecState> state;
    if (pre_rope) {
      state = std::make_shared<TqCodecState>(config, dtype, kMaxCtx, data.mean, data.scale);
    }
    const kernels::KvLayout layout{dtype, num_blocks, kBlock, kKvHeads, kD};
    PagedKvCache cache(&backend, 1, layout, state);
    const kernels::KvLayerView view = cache.Layer(0);
    // Host copies of the pools, for decoding the records attention reads.
    std::vector<uint8_t> host_k(layout.BlockBytes() * num_blocks),
        host_v(layout.VBlockBytes() * num_blocks);

    // Writes positions' keys (pre-RoPE `k`, RoPE'd here unless the format
    // stores them before RoPE) and values as the model would.
    auto write = [&](int32_t first, int32_t n, const float* k, const float* v) {
      std::vector<float> stored(k, k + static_cast<size_t>(n) * kKvHeads * kD);
      std::vector<int32_t> slots(n);
      std::vector<double> r(kD);
      for (int32_t t = 0; t < n; ++t) {
        slots[t] = slot_of(first + t);
        for (int32_t h = 0; h < kKvHeads && !pre_rope; ++h) {
          float* x = stored.data() + (static_cast<size_t>(t) * kKvHeads + h) * kD;
          rope.Apply(x, first + t, r.data());
          std::transform(r.begin(), r.end(), x, [](double e) { return static_cast<float>(e); });
        }
      }
      const kernels::BackendBuffer k_b = ToBackend(backend, stored.data(), stored.size());
      const kernels::BackendBuffer v_b =
          ToBackend(backend, v, static_cast<size_t>(n) * kKvHeads * kD);
      const kernels::BackendBuffer slots_b = ToBackend(backend, slots.data(), slots.size());
      backend.KvWrite({k_b.as<float>(), v_b.as<float>(), slots_b.as<int32_t>(), n, view});
    };
    write(0, kMaxCtx, data.keys.data(), data.values.data());
    backend.CopyToHost(host_k.data(), view.k, host_k.size());
    backend.CopyToHost(host_v.data(), view.v, host_v.size());

    // The decoded post-RoPE key / value (tq: un-rotated) of (position j, head h),
    // as attention reads them (from the host copies).
    const kernels::KvRecord krec = layout.KRecord(), vrec = layout.VRecord();
    auto decode = [&](bool key, int32_t j, int32_t h, double* out) {
      const auto a = kernels::RecordAddress(layout, key ? krec : vrec, slot_of(j), h);
      const uint8_t* pool = key ? host_k.data() : host_v.data();
      float buf[kD];
      kernels::cpu::DecodeRecord(pool + a.code_offset, pool + a.param_offset, layout, view.tq,
                                 key ? kernels::cpu::KvSide::kKey : kernels::cpu::KvSide::kValue, h,
                                 buf);
      if (key && pre_rope) {
        rope.Apply(buf, j, out);
        return;
      }
      if (!key && pre_rope) view.tq->rotation->Inverse(buf, buf);
      std::copy(buf, buf + kD, out);
    };
    // Refreshes the host copy of position j's K records (every head).
    auto fetch_keys = [&](int32_t j) {
      for (int32_t h = 0; h < kKvHeads; ++h) {
        const auto a = kernels::RecordAddress(layout, krec, slot_of(j), h);
        const auto* pool = static_cast<const uint8_t*>(view.k);
        backend.CopyToHost(host_k.data() + a.code_offset, pool + a.code_offset, krec.code_bytes);
        backend.CopyToHost(host_k.data() + a.param_offset, pool + a.param_offset, krec.param_bytes);
      }
    };
    // Decoded keys of every position, and D_v: the values' relative MSE, per head.
    std::vector<double> dk(static_cast<size_t>(kMaxCtx) * kKvHeads * kD);
    double d_v[kKvHeads] = {};
    for (int32_t h = 0; h < kKvHeads; ++h) {
      double err = 0.0, ref = 0.0, dv[kD];
      for (int32_t j = 0; j < kMaxCtx; ++j) {
        decode(true, j, h, dk.data() + (static_cast<size_t>(j) * kKvHeads + h) * kD);
        decode(false, j, h, dv);
        for (int32_t i = 0; i < kD; ++i) {
          err += (dv[i] - w.Value(j, h)[i]) * (dv[i] - w.Value(j, h)[i]);
          ref += static_cast<double>(w.Value(j, h)[i]) * w.Value(j, h)[i];
        }
      }
      d_v[h] = err / ref;
    }

    int32_t row_ctx = 0, top1 = 0, total = 0;
    double max_err = 0.0, bound_there = 0.0, max_sigma = 0.0;
    auto print_row = [&]() {
      if (row_ctx == 0) return;
      std::printf("| %s | %s | %d | %d/%d | %.3g | %.3g | %.3g |\n",
                  std::string(backend.Name()).c_str(),
                  std::string(kernels::KvDtypeName(dtype)).c_str(), row_ctx, top1, total, max_err,
                  bound_there, max_sigma);
      top1 = total = 0;
      max_err = bound_there = max_sigma = 0.0;
    };
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      if (c.ctx != row_ctx) {
        print_row();
        row_ctx = c.ctx;
      }
      float needle_pre[kKvHeads * kD];
      for (int32_t h = 0; h < kKvHeads; ++h) {
        rope.Invert(data.needle.data() + h * kD, c.needle_pos, needle_pre + h * kD);
      }
      write(c.needle_pos, 1, needle_pre, w.Value(c.needle_pos, 0));
      fetch_keys(c.needle_pos);
      const int32_t pos = c.ctx - 1;
      const kernels::BackendBuffer q_b = ToBackend(backend, c.q.data(), c.q.size());
      const kernels::BackendBuffer pos_b = ToBackend(backend, &pos, 1);
      const std::vector<float> poison(kHeads * kD, NAN);
      const kernels::BackendBuffer out_b = ToBackend(backend, poison.data(), poison.size());
      kernels::PagedAttentionParams p;
      p.q = q_b.as<float>();
      p.out = out_b.as<float>();
      p.token_seq = seq_b.as<int32_t>();
      p.token_pos = pos_b.as<int32_t>();
      p.block_tables = table_b.as<int32_t>();
      p.num_tokens = 1;
      p.num_heads = kHeads;
      p.max_blocks_per_seq = num_blocks;
      p.scale = static_cast<float>(softmax_scale);
      p.cache = view;
      backend.PagedAttention(p);
      std::vector<float> out(kHeads * kD);
      backend.CopyToHost(out.data(), out_b.data(), out.size() * sizeof(float));
      if (dtype == KvDtype::kF32) fp32_out[ci] = out;

      for (int32_t h = 0; h < kKvHeads; ++h) {
        double needle_dk[kD];
        decode(true, c.needle_pos, h, needle_dk);
        for (int32_t g = 0; g < kGroup; ++g) {
          const int32_t hq = h * kGroup + g;
          const std::vector<double> q(c.q.begin() + hq * kD, c.q.begin() + (hq + 1) * kD);
          // Decoded scores: σ_s² = their mean squared error over the background, δs_n the needle's.
          const std::vector<double>& exact = c.s[hq];
          std::vector<double> sd(c.ctx);
          double bg_err2 = 0.0, needle_err = 0.0;
          for (int32_t j = 0; j < c.ctx; ++j) {
            const bool n = j == c.needle_pos;
            sd[j] = Dot(q.data(),
                        n ? needle_dk : dk.data() + (static_cast<size_t>(j) * kKvHeads + h) * kD) *
                    softmax_scale;
            (n ? needle_err : bg_err2) += (sd[j] - exact[j]) * (sd[j] - exact[j]);
          }
          const double sigma_s2 = bg_err2 / (c.ctx - 1);
          EXPECT_EQ(std::max_element(exact.begin(), exact.end()) - exact.begin(),
                    c.needle_pos);  // by design
          const bool hit = std::max_element(sd.begin(), sd.end()) - sd.begin() == c.needle_pos;
          EXPECT_TRUE(hit) << "ctx " << c.ctx << " needle at " << c.needle_pos << " head " << hq;
          top1 += hit;
          ++total;
          // The bound: weights e^{δs} are log-normal, Var/E² = e^{σ²} − 1.
          const double var = d_v[h] * (c.a_bg[hq] + c.a_n[hq]) + std::expm1(sigma_s2) * c.b_bg[hq] +
                             std::expm1(needle_err) * c.b_n[hq];
          const double bound = 3.0 * std::sqrt(var) / c.o_norm[hq] + 2e-4;
          max_sigma = std::max(max_sigma, std::sqrt(sigma_s2));
          double err2 = 0.0, ref2 = 0.0;
          for (int32_t i = 0; i < kD; ++i) {
            const double r = fp32_out[ci][hq * kD + i];
            err2 += (out[hq * kD + i] - r) * (out[hq * kD + i] - r);
            ref2 += r * r;
          }
          const double err = std::sqrt(err2 / ref2);
          EXPECT_LE(err, bound) << "ctx " << c.ctx << " needle at " << c.needle_pos << " head "
                                << hq;
          if (err > max_err) {
            max_err = err;
            bound_there = bound;
          }
        }
      }
      // The background key back at the needle's position for the next case.
      write(c.needle_pos, 1, data.keys.data() + static_cast<size_t>(c.needle_pos) * kKvHeads * kD,
            w.Value(c.needle_pos, 0));
      fetch_keys(c.needle_pos);
    }
    print_row();
  }
}

}  // namespace tq::needle
