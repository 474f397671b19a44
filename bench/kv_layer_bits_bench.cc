// Per-layer tq key bits chosen from the calibration pass (issue 21 item 2):
// do they pay? docs/kv-cache.md ("Per-layer key bits") has the result.
//
//   tq_bench_kv_layer_bits --model DIR [--text FILE] [--ctx N] [--stride N]
//                          [--max-documents N] [--threads 1]
//                          [--configs fp32,k3v3,k3v2,k3v2+k2@least2,...]
//
// A config is "fp32" or "k<a>v<b>[+k<c>@least<n>|@most<n>]": a-bit tq keys
// and b-bit tq values in every layer (k3v3 = tq3, k4v3 = tq4, k3v2 = tqk3v2),
// then c-bit keys in the n layers whose attention distortion the calibration
// pass predicts to change least (or most) when their keys go from a to c bits.
//
// 1. Calibration, as the loader does for tq3 (the built-in text, per-channel
//    pre-RoPE key statistics). Then a second pass over the same tokens with
//    an exact cache measures, per layer, the mean KL divergence
//    KL(softmax(q·k/√d) || softmax(q·k̂_b/√d)) of every query head's attention
//    over its causal context when the keys are b-bit tq codes (b = 2, 3, 4):
//    the distortion of exactly what attention consumes, with the layer's own
//    queries and score scale. The ranking uses |KL_c − KL_a| per layer.
//    Printed with a cross-check the ranking does not use: the ratio of the
//    auto held-out text's perplexity (256 tokens) with only that layer's keys
//    at 2 or 4 bits to all layers at 3 (k3v3).
// 2. Each config scores --text as `tqserve eval` does (documents at blank
//    lines, BOS first, sliding windows of --ctx advancing by --stride, the
//    same scored positions) and prints perplexity, its ratio to the fp32 row,
//    bits per element (KvBitsPerElement's rule, averaged over layers) and the
//    ratio `--kv-cache-dtype auto` would measure for it (the built-in held-out
//    text, vs fp32). Without --text only that ratio is measured.
//
// The mixed formats are emulated, not stored: a Backend wrapper keeps an fp32
// pool per layer and writes into it each K/V after the tq round trip
// (per-channel normalization, norm, randomized Hadamard rotation, Lloyd–Max
// codes, the fp16 norm correction, decode), keys RoPE'd after decoding, as tq
// attention does. Checked at start against the serving codec (EncodeRecord /
// DecodeRecord of tq3, tq4, tqk3v2: the same floats), and the uniform
// configs reproduce `tqserve eval`'s tq3 / tq4 / tqk3v2 perplexities.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_calibration.h"
#include "engine/kv/lloyd_max.h"
#include "engine/kv/tq_codec_state.h"
#include "engine/model/llama_weights.h"
#include "engine/parallel/tp_plan.h"
#include "engine/runtime/model_executor.h"
#include "engine/runtime/model_loader.h"
#include "engine/runtime/perplexity.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/half.h"
#include "kernels/tq/rotation.h"
#include "tests/unit/forwarding_backend.h"

namespace {

namespace k = tq::kernels;
using Clock = std::chrono::steady_clock;

// Bits of one layer's keys and values; 0 = exact (fp32).
struct LayerFormat {
  int key_bits = 0, value_bits = 0;
};

// The tq round trip of one head vector for any code width (2..4 bits): what
// EncodeRecord + DecodeRecord do for the tq formats, keys before RoPE,
// values un-rotated.
class TqRoundTrip {
 public:
  TqRoundTrip(int32_t head_dim, int32_t num_kv_heads, std::vector<float> mean,
              std::vector<float> scale)
      : d_(head_dim),
        kv_heads_(num_kv_heads),
        rotation_(head_dim, tq::TqCodecState::kRotationSeed),
        mean_(std::move(mean)),
        scale_(std::move(scale)) {
    for (int b = 2; b <= 4; ++b) books_[b] = tq::SphereCoordinateCodebook(head_dim, 1 << b);
  }

  const tq::ScalarCodebook& book(int bits) const { return books_.at(bits); }
  const k::Rotation& rotation() const { return rotation_; }
  const float* mean(int32_t layer) const { return mean_.data() + Stats(layer, 0); }
  const float* scale(int32_t layer) const { return scale_.data() + Stats(layer, 0); }

  // x (pre-RoPE key of `head` in `layer`) -> its decoded b-bit tq key.
  void Key(const float* x, int32_t layer, int32_t head, int bits, float* out) const {
    const size_t s = Stats(layer, head);
    std::vector<float> u(d_);
    for (int32_t i = 0; i < d_; ++i) u[i] = (x[i] - mean_[s + i]) / scale_[s + i];
    Unit(u.data(), bits, out);
    for (int32_t i = 0; i < d_; ++i) out[i] = out[i] * scale_[s + i] + mean_[s + i];
  }
  // x (a value) -> its decoded b-bit tq value, back in the original space.
  void Value(const float* x, int bits, float* out) const { Unit(x, bits, out); }

 private:
  size_t Stats(int32_t layer, int32_t head) const {
    return (static_cast<size_t>(layer) * kv_heads_ + head) * d_;
  }
  // norm -> rotate the unit vector -> nearest centroids -> norm/|ĉ| as fp16 -> decode -> Rᵀ.
  void Unit(const float* x, int bits, float* out) const {
    const tq::ScalarCodebook& cb = books_.at(bits);
    const int32_t levels = 1 << bits;
    std::vector<float> u(x, x + d_), y(d_);
    double sum_sq = 0.0;
    for (int32_t i = 0; i < d_; ++i) sum_sq += static_cast<double>(u[i]) * u[i];
    const float norm = static_cast<float>(std::sqrt(sum_sq));
    const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
    for (float& v : u) v *= inv;
    rotation_.Forward(u.data(), y.data());
    double c2 = 0.0;
    for (int32_t i = 0; i < d_; ++i) {
      int idx = 0;
      for (int32_t b = 0; b < levels - 1; ++b) idx += y[i] >= cb.boundaries[b];
      y[i] = cb.centroids[idx];
      c2 += static_cast<double>(y[i]) * y[i];
    }
    const float stored =
        k::HalfToFloat(k::FloatToHalf(c2 > 0.0 ? static_cast<float>(norm / std::sqrt(c2)) : 0.0f));
    for (float& v : y) v *= stored;
    rotation_.Inverse(y.data(), out);
  }

  int32_t d_, kv_heads_;
  k::Rotation rotation_;
  std::vector<float> mean_, scale_;
  std::map<int, tq::ScalarCodebook> books_;
};

// The round trip must give the serving codec's floats for the widths it has
// (keys 3 and 4, values 3 and 2); returns the largest difference seen.
double CheckAgainstServingCodec(const TqRoundTrip& rt, int32_t d, int32_t kv_heads) {
  struct Case {
    k::KvDtype dtype;
    k::cpu::KvSide side;
  };
  const Case cases[] = {{k::KvDtype::kTq3, k::cpu::KvSide::kKey},
                        {k::KvDtype::kTq4, k::cpu::KvSide::kKey},
                        {k::KvDtype::kTq3, k::cpu::KvSide::kValue},
                        {k::KvDtype::kTqK3V2, k::cpu::KvSide::kValue}};
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(state >> 33) % 2001 - 1000) / 100.0f;
  };
  double worst = 0.0;
  for (const Case& c : cases) {
    const bool key = c.side == k::cpu::KvSide::kKey;
    const int kb = k::TqKeyBits(c.dtype), vb = k::TqValueBits(c.dtype);
    k::TqLayerCodec codec;
    codec.rotation = &rt.rotation();
    codec.k_centroids = rt.book(kb).centroids.data();
    codec.k_boundaries = rt.book(kb).boundaries.data();
    codec.v_centroids = rt.book(vb).centroids.data();
    codec.v_boundaries = rt.book(vb).boundaries.data();
    codec.k_mean = rt.mean(0);
    codec.k_scale = rt.scale(0);
    k::KvLayout layout{c.dtype, 1, 1, kv_heads, d};
    const k::KvRecord rec = key ? layout.KRecord() : layout.VRecord();
    std::vector<uint8_t> bytes(rec.bytes());
    std::vector<float> x(d), scratch(2 * d), serving(d), ours(d);
    for (int trial = 0; trial < 64; ++trial) {
      const int32_t head = trial % kv_heads;
      for (float& v : x) v = next();
      if (key) {
        for (int32_t i = 0; i < d; ++i)
          x[i] = x[i] * rt.scale(0)[head * d + i] + rt.mean(0)[head * d + i];
      }
      k::cpu::EncodeRecord(x.data(), layout, &codec, c.side, head, bytes.data(),
                           bytes.data() + rec.code_bytes, scratch.data());
      k::cpu::DecodeRecord(bytes.data(), bytes.data() + rec.code_bytes, layout, &codec, c.side,
                           head, serving.data());
      if (key) {
        rt.Key(x.data(), 0, head, kb, ours.data());
      } else {
        rt.rotation().Inverse(serving.data(), serving.data());
        rt.Value(x.data(), vb, ours.data());
      }
      double norm = 0.0;
      for (float v : serving) norm = std::max(norm, std::fabs(static_cast<double>(v)));
      for (int32_t i = 0; i < d; ++i) {
        worst = std::max(
            worst, std::fabs(static_cast<double>(ours[i]) - serving[i]) / std::max(norm, 1e-30));
      }
    }
  }
  return worst;
}

double Softmax(std::vector<double>& s) {  // in place; returns log of the normalizer
  const double m = *std::max_element(s.begin(), s.end());
  double z = 0.0;
  for (double& v : s) z += std::exp(v - m);
  const double log_z = m + std::log(z);
  for (double& v : s) v = std::exp(v - log_z);
  return log_z;
}

// Runs the CPU kernels on fp32 pools of its own: each layer's K/V go through
// the tq round trip of that layer's LayerFormat before they are stored (keys
// arrive before RoPE: the model's cache is a tq3-typed one this backend never
// touches). With measuring on, keeps b-bit copies of every key (b = 2, 3, 4)
// and accumulates each layer's attention KL divergence to them.
class LayerBitsBackend : public tq::ForwardingBackend {
 public:
  LayerBitsBackend(int threads, const tq::ModelConfig& c, const TqRoundTrip* rt)
      : ForwardingBackend(threads), c_(c), rt_(rt), inv_freq_(c.RopeInvFreq()) {}

  // Pools of `blocks` blocks for every layer of `cache` (whose K pool
  // pointers identify the layers in KvWrite / PagedAttention).
  void Attach(const tq::PagedKvCache& cache) {
    layout_ = cache.layout();
    layout_.dtype = k::KvDtype::kF32;
    layer_of_.clear();
    const size_t n = layout_.BlockBytes() / sizeof(float) * layout_.num_blocks;
    pools_.assign(cache.num_layers(), {});
    for (int32_t l = 0; l < cache.num_layers(); ++l) {
      layer_of_[cache.Layer(l).k] = l;
      for (auto& p : pools_[l]) p.assign(n, 0.0f);
    }
    kl_sum_.assign(cache.num_layers(), {0.0, 0.0, 0.0, 0.0, 0.0});
    kl_count_.assign(cache.num_layers(), 0);
  }
  void SetFormats(std::vector<LayerFormat> f) { formats_ = std::move(f); }
  void SetMeasuring(bool on) { measuring_ = on; }
  // Mean attention KL divergence of `layer` with b-bit keys (after measuring).
  double MeanKl(int32_t layer, int bits) const {
    return kl_sum_[layer][bits] / std::max<int64_t>(kl_count_[layer], 1);
  }

  void KvWrite(const k::KvWriteParams& p) override {
    const int32_t l = layer_of_.at(p.cache.k);
    const LayerFormat f = formats_.at(l);
    const int32_t d = c_.head_dim, heads = layout_.num_kv_heads;
    const size_t row = static_cast<size_t>(heads) * d, n = p.num_tokens * row;
    std::vector<float> key(p.k, p.k + n), value(p.v, p.v + n);
    for (int32_t t = 0; t < p.num_tokens; ++t) {
      for (int32_t h = 0; h < heads; ++h) {
        const size_t at = t * row + h * d;
        if (f.key_bits) rt_->Key(p.k + at, l, h, f.key_bits, key.data() + at);
        if (f.value_bits) rt_->Value(p.v + at, f.value_bits, value.data() + at);
      }
    }
    Rope(key.data(), p.positions, p.num_tokens);
    Store(pools_[l][0].data(), key.data(), p);
    Store(pools_[l][1].data(), value.data(), p);
    if (!measuring_) return;
    for (int bits = 2; bits <= 4; ++bits) {
      for (int32_t t = 0; t < p.num_tokens; ++t) {
        for (int32_t h = 0; h < heads; ++h) {
          rt_->Key(p.k + t * row + h * d, l, h, bits, key.data() + t * row + h * d);
        }
      }
      Rope(key.data(), p.positions, p.num_tokens);
      Store(pools_[l][bits].data(), key.data(), p);
    }
  }

  void PagedAttention(const k::PagedAttentionParams& p) override {
    const int32_t l = layer_of_.at(p.cache.k);
    if (measuring_) MeasureKl(l, p);
    k::PagedAttentionParams q = p;
    q.cache = k::KvLayerView{pools_[l][0].data(), pools_[l][1].data(), layout_};
    ForwardingBackend::PagedAttention(q);
  }

 private:
  void Rope(float* keys, const int32_t* positions, int32_t n) {
    ForwardingBackend::Rope(
        {keys, positions, inv_freq_.data(), n, layout_.num_kv_heads, c_.head_dim, 1.0f});
  }
  const float* Record(const std::vector<float>& pool, int64_t slot, int32_t head) const {
    const k::KvRecordAddress a = k::RecordAddress(layout_, layout_.KRecord(), slot, head);
    return pool.data() + a.code_offset / sizeof(float);
  }
  void Store(float* pool, const float* x, const k::KvWriteParams& p) const {
    const int32_t d = c_.head_dim;
    for (int32_t t = 0; t < p.num_tokens; ++t) {
      if (p.slot_mapping[t] < 0) continue;
      for (int32_t h = 0; h < layout_.num_kv_heads; ++h) {
        const k::KvRecordAddress a =
            k::RecordAddress(layout_, layout_.KRecord(), p.slot_mapping[t], h);
        std::copy_n(x + (static_cast<size_t>(t) * layout_.num_kv_heads + h) * d, d,
                    pool + a.code_offset / sizeof(float));
      }
    }
  }
  // Σ over the batch's tokens and query heads of KL(exact attention || b-bit keys).
  void MeasureKl(int32_t l, const k::PagedAttentionParams& p) {
    const int32_t d = c_.head_dim, group = p.num_heads / layout_.num_kv_heads;
    for (int32_t t = 0; t < p.num_tokens; ++t) {
      const int32_t ctx = p.token_pos[t] + 1;
      const int32_t* table =
          p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks_per_seq;
      for (int32_t hq = 0; hq < p.num_heads; ++hq) {
        const float* q = p.q + (static_cast<size_t>(t) * p.num_heads + hq) * d;
        auto scores = [&](const std::vector<float>& pool) {
          std::vector<double> s(ctx);
          for (int32_t j = 0; j < ctx; ++j) {
            const int64_t slot =
                static_cast<int64_t>(table[j / layout_.block_size]) * layout_.block_size +
                j % layout_.block_size;
            const float* key = Record(pool, slot, hq / group);
            double dot = 0.0;
            for (int32_t i = 0; i < d; ++i) dot += static_cast<double>(q[i]) * key[i];
            s[j] = dot * p.scale;
          }
          return s;
        };
        std::vector<double> exact = scores(pools_[l][0]);
        std::vector<double> log_p = exact;
        const double log_z = Softmax(exact);
        for (double& v : log_p) v -= log_z;
        for (int bits = 2; bits <= 4; ++bits) {
          std::vector<double> s = scores(pools_[l][bits]);
          std::vector<double> log_q = s;
          const double log_zq = Softmax(s);
          double kl = 0.0;
          for (int32_t j = 0; j < ctx; ++j) kl += exact[j] * (log_p[j] - (log_q[j] - log_zq));
          kl_sum_[l][bits] += kl;
        }
        ++kl_count_[l];
      }
    }
  }

  tq::ModelConfig c_;
  const TqRoundTrip* rt_;
  std::vector<float> inv_freq_;
  k::KvLayout layout_;
  std::map<const void*, int32_t> layer_of_;
  // Per layer: [0] keys as stored, [1] values, [2..4] keys at 2..4 bits (measuring).
  std::vector<std::array<std::vector<float>, 5>> pools_;
  std::vector<LayerFormat> formats_;
  bool measuring_ = false;
  std::vector<std::array<double, 5>> kl_sum_;
  std::vector<int64_t> kl_count_;
};

struct Nll {
  double sum = 0.0;
  int64_t count = 0;
  double Perplexity() const { return std::exp(sum / static_cast<double>(count)); }
};

// Scores one document as EvaluatePerplexity does (windows of ctx advancing by
// stride; positions after the previous window's end, never a window's first).
void ScoreDocument(tq::LlamaModel& model, tq::PagedKvCache& cache, const std::vector<int32_t>& doc,
                   int32_t ctx, int32_t stride, Nll* nll) {
  const int64_t n = static_cast<int64_t>(doc.size());
  const int32_t vocab = model.config().vocab_size, bs = cache.layout().block_size;
  tq::BlockPool pool(cache.layout().num_blocks);
  int64_t prev_end = 0;
  for (int64_t begin = 0; n >= 2; begin += stride) {
    const int64_t end = std::min<int64_t>(begin + ctx, n), first = std::max(prev_end, begin + 1);
    if (first < end) {
      const std::span<const int32_t> window(doc.data() + begin, static_cast<size_t>(end - begin));
      tq::BlockTable table(bs);
      table.EnsureCapacity(pool, static_cast<int32_t>(window.size()));
      // Window row r predicts doc[begin + r + 1]; only tokens from `first` are scored.
      tq::PrefillSequence(
          [&](const tq::ForwardBatch& b, std::vector<float>* out) { model.Forward(b, cache, out); },
          table, window, 0, ctx,
          [&](int32_t row0, int32_t rows, const float* logits) {
            for (int64_t r = row0; r < row0 + rows; ++r) {
              const int64_t p = begin + r + 1;
              if (p < first || p >= end) continue;
              nll->sum += tq::NegLogProb(logits + (r - row0) * vocab, vocab, doc[p]);
            }
          });
      table.Release(pool);
      nll->count += end - first;
    }
    prev_end = end;
    if (end == n) break;
  }
}

struct Config {
  std::string name;
  int key_bits = 0, value_bits = 0;  // 0: fp32
  int alt_bits = 0, alt_layers = 0;
  bool most = false;  // alt bits on the layers predicted to change most (else least)
};

Config ParseConfig(const std::string& s) {
  Config c{s};
  if (s == "fp32") return c;
  int consumed = 0;
  if (std::sscanf(s.c_str(), "k%dv%d%n", &c.key_bits, &c.value_bits, &consumed) != 2) {
    throw std::invalid_argument("bad config " + s);
  }
  if (static_cast<size_t>(consumed) == s.size()) return c;
  char which[8] = {};
  if (std::sscanf(s.c_str() + consumed, "+k%d@%5[a-z]%d", &c.alt_bits, which, &c.alt_layers) != 3 ||
      (std::strcmp(which, "least") != 0 && std::strcmp(which, "most") != 0)) {
    throw std::invalid_argument("bad config " + s + " (k<a>v<b>+k<c>@least<n>|most<n>)");
  }
  c.most = std::strcmp(which, "most") == 0;
  return c;
}

// Layer formats of `c`: the ranking is |KL_alt − KL_base| from the calibration pass.
std::vector<LayerFormat> Formats(const Config& c, const LayerBitsBackend& b, int32_t layers) {
  std::vector<LayerFormat> f(layers, {c.key_bits, c.value_bits});
  if (c.alt_layers == 0) return f;
  std::vector<int32_t> order(layers);
  std::iota(order.begin(), order.end(), 0);
  auto change = [&](int32_t l) {
    return std::fabs(b.MeanKl(l, c.alt_bits) - b.MeanKl(l, c.key_bits));
  };
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    return c.most ? change(x) > change(y) : change(x) < change(y);
  });
  for (int32_t i = 0; i < std::min(c.alt_layers, layers); ++i) f[order[i]].key_bits = c.alt_bits;
  return f;
}

// Average stored bits per K and V element (KvBitsPerElement's rule: b-bit
// codes plus an fp16 norm per head vector; fp32 = 32), over layers.
double BitsPerElement(const std::vector<LayerFormat>& f, int32_t d) {
  auto bits = [d](int b) { return b == 0 ? 32.0 : b + 16.0 / d; };
  double sum = 0.0;
  for (const LayerFormat& l : f) sum += (bits(l.key_bits) + bits(l.value_bits)) / 2.0;
  return sum / static_cast<double>(f.size());
}

std::string KeyBitsList(const std::vector<LayerFormat>& f) {
  std::string s;
  for (const LayerFormat& l : f) s += (s.empty() ? "" : ",") + std::to_string(l.key_bits);
  return s;
}

struct Flags {
  std::string model = "models/stories260K", text;
  int32_t ctx = 0, stride = 0, threads = 1;
  size_t max_documents = 0;
  std::vector<std::string> configs = {"fp32", "k3v3", "k4v3", "k3v2"};
};

int Run(int argc, char** argv) {
  Flags flags;
  CLI::App app("Perplexity per mixed per-layer key bits (docs/kv-cache.md).",
               "tq_bench_kv_layer_bits");
  app.add_option("--model", flags.model, "Model directory")->capture_default_str();
  app.add_option("--text", flags.text, "Text to score (without: auto's held-out ratios only)");
  app.add_option("--ctx", flags.ctx, "Window (0: max_model_len)")->capture_default_str();
  app.add_option("--stride", flags.stride, "Window advance (0: ctx / 2)")->capture_default_str();
  app.add_option("--max-documents", flags.max_documents, "0: all")->capture_default_str();
  app.add_option("--threads", flags.threads)->capture_default_str();
  tq::bench::AddList(app, "--configs", flags.configs, "Configurations");
  tq::bench::ParseOrExit(app, argc, argv);
  tq::EngineOptions options;
  options.model_dir = flags.model;
  options.num_threads = flags.threads;
  options.kv_cache_dtype = k::KvDtype::kTq3;  // calibrates the key statistics as tq3 does
  tq::LoadedModel loaded = tq::LoadModel(options);
  const tq::ModelConfig& c = loaded.files.config;
  const int32_t layers = c.num_hidden_layers, heads = c.num_key_value_heads, d = c.head_dim;
  const tq::TqCodecState& state = *loaded.executor->cache().tq();
  std::vector<float> mean, scale;
  for (int32_t l = 0; l < layers; ++l) {
    mean.insert(mean.end(), state.Layer(l)->k_mean, state.Layer(l)->k_mean + heads * d);
    scale.insert(scale.end(), state.Layer(l)->k_scale, state.Layer(l)->k_scale + heads * d);
  }
  const TqRoundTrip rt(d, heads, mean, scale);
  std::printf("model %s: %d layers, head_dim %d; tq keys %s\n", options.model_dir.c_str(), layers,
              d, loaded.kv_calibration_source.c_str());
  std::printf(
      "round trip vs the serving codec (tq3/tq4 keys, tq3/tqk3v2 values): max rel. diff %.2e\n",
      CheckAgainstServingCodec(rt, d, heads));

  // Our own model on the emulating backend, and a tq3-typed cache (so that keys arrive before
  // RoPE).
  const int32_t ctx = flags.ctx > 0 ? flags.ctx : loaded.max_model_len;
  const int32_t stride = flags.stride > 0 ? flags.stride : std::max(1, ctx / 2);
  LayerBitsBackend backend(std::max(1, options.num_threads), c, &rt);
  const tq::TpPlan plan = tq::MakeTpPlan(c, 0, 1);
  tq::LlamaModel model(c, tq::LoadLlamaWeights(options.model_dir, c, &backend, plan), &backend,
                       plan);
  const int32_t bs = options.block_size;
  k::KvLayout layout{k::KvDtype::kTq3, (loaded.max_model_len + bs - 1) / bs, bs, heads, d};
  tq::PagedKvCache cache(
      &backend, layers, layout,
      std::make_shared<tq::TqCodecState>(c, k::KvDtype::kTq3, loaded.max_model_len, mean, scale));
  backend.Attach(cache);

  // Calibration pass 2: attention KL per layer and key width on the calibration tokens.
  std::vector<int32_t> calib = loaded.tokenizer->Encode(tq::BuiltinCalibrationText());
  if (static_cast<int32_t>(calib.size()) > loaded.max_model_len) calib.resize(loaded.max_model_len);
  backend.SetFormats(std::vector<LayerFormat>(layers));
  backend.SetMeasuring(true);
  Nll calib_nll;
  ScoreDocument(model, cache, calib, loaded.max_model_len, loaded.max_model_len, &calib_nll);
  backend.SetMeasuring(false);
  // Cross-check: the auto held-out text with one layer's keys changed.
  std::vector<int32_t> held = {calib.front()};
  const std::vector<int32_t> text = loaded.tokenizer->Encode(tq::BuiltinHeldOutText(), false);
  held.insert(
      held.end(), text.begin(),
      text.begin() + std::min<size_t>(text.size(), std::min(256, loaded.max_model_len - 1)));
  auto held_ppl = [&](std::vector<LayerFormat> f) {
    backend.SetFormats(std::move(f));
    Nll nll;
    ScoreDocument(model, cache, held, loaded.max_model_len, loaded.max_model_len, &nll);
    return nll.Perplexity();
  };
  const double held_base = held_ppl(std::vector<LayerFormat>(layers, {3, 3}));
  std::printf(
      "\ncalibration pass: %zu tokens; attention KL(exact || b-bit keys), mean over positions and "
      "query heads;\n"
      "held-out ratio: %zu-token auto held-out text, one layer's keys at b bits / all k3v3\n",
      calib.size(), held.size() - 1);
  std::printf(
      "| layer | KL 2-bit | KL 3-bit | KL 4-bit | held-out ratio k2 | held-out ratio k4 |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  for (int32_t l = 0; l < layers; ++l) {
    double ratio[5] = {};
    for (int bits : {2, 4}) {
      std::vector<LayerFormat> f(layers, {3, 3});
      f[l].key_bits = bits;
      ratio[bits] = held_ppl(f) / held_base;
    }
    std::printf("| %d | %.3e | %.3e | %.3e | %.4f | %.4f |\n", l, backend.MeanKl(l, 2),
                backend.MeanKl(l, 3), backend.MeanKl(l, 4), ratio[2], ratio[4]);
  }

  std::vector<std::vector<int32_t>> docs;  // none without --text: auto's ratios only
  if (!flags.text.empty()) {
    std::ifstream in(flags.text, std::ios::binary);
    if (!in) throw std::runtime_error(flags.text + ": cannot read");
    std::stringstream ss;
    ss << in.rdbuf();
    std::vector<std::string> texts = tq::SplitDocuments(ss.str());
    if (flags.max_documents > 0 && texts.size() > flags.max_documents) {
      texts.resize(flags.max_documents);
    }
    for (const std::string& t : texts) {
      std::vector<int32_t> ids = loaded.tokenizer->Encode(t, false);
      ids.insert(ids.begin(), loaded.tokenizer->bos_id());
      docs.push_back(std::move(ids));
    }
  }
  std::printf("\n%s: %zu documents, ctx %d, stride %d\n", flags.text.c_str(), docs.size(), ctx,
              stride);
  std::printf(
      "| config | key bits per layer | bits/el. | perplexity | vs fp32 | tokens | auto's held-out "
      "ratio | s |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  const double held_fp32 = held_ppl(std::vector<LayerFormat>(layers));
  double fp32 = 0.0;
  for (const std::string& name : flags.configs) {
    const Config cfg = ParseConfig(name);
    const std::vector<LayerFormat> f = Formats(cfg, backend, layers);
    const double held_ratio = held_ppl(f) / held_fp32;  // what auto would measure
    backend.SetFormats(f);
    const auto start = Clock::now();
    Nll nll;
    for (const auto& doc : docs) ScoreDocument(model, cache, doc, ctx, stride, &nll);
    const double ppl = nll.Perplexity();
    if (name == "fp32") fp32 = ppl;
    char vs[32] = "";
    if (fp32 > 0.0) std::snprintf(vs, sizeof(vs), "%+.2f%%", 100.0 * (ppl / fp32 - 1.0));
    std::printf("| %s | %s | %.3f | %.4f | %s | %lld | %.4f | %.0f |\n", name.c_str(),
                KeyBitsList(f).c_str(), BitsPerElement(f, d), ppl, vs,
                static_cast<long long>(nll.count), held_ratio,
                std::chrono::duration<double>(Clock::now() - start).count());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tq_bench_kv_layer_bits: %s\n", e.what());
    return 1;
  }
}
