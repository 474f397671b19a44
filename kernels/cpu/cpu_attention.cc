// Paged KV write and causal GQA attention on the CPU (reference backend),
// for every KV format: records are encoded once when written and decoded
// inside attention without ever dequantizing a block into a temporary buffer.
// fp32/fp16/bf16 records are read in place by plain_attention.cc; int8/int4
// one head vector at a time, and the tq formats with a power-of-two head_dim
// 8 keys at a time into a transposed tile (see "tq fast path" below).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/cpu/plain_attention.h"
#include "kernels/cpu/softmax.h"
#include "kernels/half.h"
#include "kernels/tq/rotation.h"

// This level's part of the file (isa_begin.h): everything above is baseline code.
#include "kernels/cpu/isa_begin.h"
#include "kernels/cpu/simd.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {
namespace {

constexpr int32_t kMaxSinkTokens = 8;

// Slot of position j of a sequence whose block table is `table`.
inline int64_t SlotOf(const int32_t* table, int32_t j, int32_t block_size) {
  return static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
}

void CheckTq(const KvLayerView& cache) {
  const bool tq = KvStoresPreRopeKeys(cache.layout.dtype);
  if (tq && (cache.tq == nullptr || cache.tq->rotation == nullptr)) {
    throw std::invalid_argument("tq KV cache without its codec");
  }
  if (cache.layout.head_dim > 512) throw std::invalid_argument("head_dim > 512");
  if (cache.sink_k &&
      (!tq || cache.sink_tokens > kMaxSinkTokens || cache.sink_tokens > cache.layout.block_size)) {
    throw std::invalid_argument("attention sink needs a tq format and <= 8 tokens in one block");
  }
}

// Attention sink: positions [0, SinkCount) use the exact fp32 copies kept
// beside the codes. Their scores replace the codes' scores before the
// softmax; their values are added after Rᵀ, and their code weights zeroed.
inline int32_t SinkCount(const KvLayerView& cache, int32_t ctx) {
  return cache.sink_k ? std::min(cache.sink_tokens, ctx) : 0;
}
inline const float* SinkRow(const float* pool, const KvLayerView& cache, int32_t first_block,
                            int32_t j, int32_t kv_head) {
  const KvLayout& l = cache.layout;
  return pool +
         ((static_cast<size_t>(first_block) * cache.sink_tokens + j) * l.num_kv_heads + kv_head) *
             l.head_dim;
}

// In-place RoPE (rotate_half) of one key from the precomputed table.
inline void RopeKey(float* k, int32_t pos, const TqLayerCodec& tq, int32_t head_dim) {
  const int32_t half = head_dim / 2;
  const float* c = tq.rope_cos + static_cast<size_t>(pos) * half;
  const float* s = tq.rope_sin + static_cast<size_t>(pos) * half;
  for (int32_t i = 0; i < half; ++i) {
    const float x1 = k[i];
    const float x2 = k[i + half];
    k[i] = x1 * c[i] - x2 * s[i];
    k[i + half] = x2 * c[i] + x1 * s[i];
  }
}

// out[0..n) += w · x[0..n), 8 lanes at a time (x and out do not overlap).
// Overwrites scores[g * ctx + j] for the sink positions (keys RoPE'd here).
void SinkScores(const KvLayerView& cache, const int32_t* table, int32_t ctx, int32_t kv_head,
                const float* q0, int32_t group, float scale, float* scores);
// Moves the sink positions' probabilities to probs[j * group + g] (zeroing them
// in scores), for SinkAddValues after the codes' values are un-rotated.
void SinkTakeProbs(const KvLayerView& cache, int32_t ctx, int32_t group, float* scores,
                   float* probs);
void SinkAddValues(const KvLayerView& cache, const int32_t* table, int32_t ctx, int32_t kv_head,
                   int32_t group, const float* probs, float* out0);

inline void Axpy(float w, const float* x, float* out, int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8f o = Load8(out + i) + w * Load8(x + i);
    std::memcpy(out + i, &o, sizeof(o));
  }
  for (; i < n; ++i) out[i] += w * x[i];
}

[[maybe_unused]] inline float LoadHalf(const uint8_t* src) {
  uint16_t h;
  std::memcpy(&h, src, 2);
  return HalfToFloat(h);
}

typedef int32_t v8i __attribute__((vector_size(32)));

// exp(x) for x <= 0 (Cephes expf: range reduction by ln 2 in two parts and a
// degree-6 polynomial, within ~2 ulp of expf); x < -87 gives 0 (expf would
// give a subnormal, < 2e-38).
inline v8f ExpNonPositive(v8f x) {
  const v8f zero{};
  const v8i tiny = x < -87.0f;
  x = tiny ? zero - 87.0f : x;
  const v8f magic = zero + 12582912.0f;  // 1.5 * 2^23: round to nearest
  const v8f n = (x * 1.44269504088896341f + magic) - magic;
  x = x - n * 0.693359375f;
  x = x - n * -2.12194440e-4f;
  v8f y = zero + 1.9875691500e-4f;
  y = y * x + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * (x * x) + x + 1.0f;
  const v8i e = (__builtin_convertvector(n, v8i) + 127) << 23;
  y *= reinterpret_cast<v8f>(e);
  return reinterpret_cast<v8f>(reinterpret_cast<v8i>(y) & ~tiny);
}

// ---------------------------------------------------------------------------
// tq fast path (power-of-two head_dim >= 8): 8 keys at a time, transposed.
//
// A tile holds 8 consecutive positions of one KV head as head_dim v8f, one per
// coordinate, lane k = position j0 + k (gathered through the block table, so
// any block_size works; lanes past the context get norm 0 and are ignored).
// In this layout every step is a vertical 8-wide operation: bit-plane unpack
// (shifts/masks on 8 words), centroid lookup (one permute), × norm, all
// log2(d) Walsh–Hadamard stages (add/sub of whole rows), signs/√d·σ + μ,
// RoPE and the GQA dot products (8 scores per v8f). The tile is 8 × head_dim
// floats on the stack (4 KiB at d = 128, in L1): a few keys, never a block.
// Values are accumulated per 8-coordinate chunk from the codes directly
// (lookup × p·norm), still in the rotated space.

typedef uint32_t v8u __attribute__((vector_size(32)));

constexpr int32_t kTile = 8;

struct Codebook {
  v8f lo{}, hi{};  // centroids 0-7 and 8-15 (zero padded)
  const float* table = nullptr;
};

inline Codebook MakeCodebook(const float* centroids, int32_t bits) {
  Codebook cb;
  cb.table = centroids;
  for (int32_t i = 0; i < (1 << bits); ++i) {
    if (i < 8) {
      cb.lo[i] = centroids[i];
    } else {
      cb.hi[i - 8] = centroids[i];
    }
  }
  return cb;
}

// centroids[idx] per lane from the low B bits of idx (higher bits ignored), 2 <= B <= 4.
template <int B>
inline v8f Lookup(const Codebook& cb, v8u idx) {
#if TQ_ISA_AVX2
  // vpermps reads the low 3 bits; fewer index bits need the rest cleared.
  const __m256i i = reinterpret_cast<__m256i>(B < 3 ? idx & ((1u << B) - 1u) : idx);
  const __m256 lo = _mm256_permutevar8x32_ps(reinterpret_cast<__m256>(cb.lo), i);
  if constexpr (B <= 3) {
    return reinterpret_cast<v8f>(lo);
  } else {
    const __m256 hi = _mm256_permutevar8x32_ps(reinterpret_cast<__m256>(cb.hi), i);
    const __m256 sel = _mm256_castsi256_ps(_mm256_slli_epi32(i, 28));  // bit 3 -> sign
    return reinterpret_cast<v8f>(_mm256_blendv_ps(lo, hi, sel));
  }
#else
  v8f r;
  for (int32_t m = 0; m < 8; ++m) r[m] = cb.table[idx[m] & ((1u << B) - 1u)];
  return r;
#endif
}

inline v8u BroadcastU(uint32_t x) {
  return v8u{x, x, x, x, x, x, x, x};
}

// Plane p of run t (t == runs: the tail of T bytes) of one record, as a word
// whose bit j is bit p of index 32t + j.
template <int B>
inline uint32_t PlaneWord(const uint8_t* code, int32_t t, int32_t runs, int32_t tail_bytes,
                          int32_t p) {
  if (t < runs) {
    uint32_t w;
    std::memcpy(&w, code + 4 * B * t + 4 * p, 4);
    return w;
  }
  const uint8_t* src = code + 4 * B * runs + p * tail_bytes;
  uint32_t w = 0;
  for (int32_t b = 0; b < tail_bytes; ++b) w |= static_cast<uint32_t>(src[b]) << (8 * b);
  return w;
}

// tile[i] (lane k) = norm_k · c[idx_k,i]: the rotated, scaled reconstruction.
template <int B>
void UnpackKeyTile(const uint8_t* const* codes, v8f norms, int32_t d, const Codebook& cb,
                   v8f* tile) {
  const int32_t runs = d / 32;
  const int32_t r = d % 32;
  const int32_t tail_bytes = (r + 7) / 8;
  for (int32_t t = 0; t < runs + (r > 0 ? 1 : 0); ++t) {
    v8u w[B];
    for (int32_t p = 0; p < B; ++p) {
      for (int32_t k = 0; k < kTile; ++k) w[p][k] = PlaneWord<B>(codes[k], t, runs, tail_bytes, p);
    }
    v8f* out = tile + 32 * t;
    // Two halves of 16 bits: u[p] = (w[p] >> 16h) << p puts bit p of index j
    // at bit p of u[p] >> j without losing high bits; Lookup ignores bits
    // above B - 1, so the last plane needs no mask.
    const int32_t n = t < runs ? 32 : r;
    for (int32_t half = 0; 16 * half < n; ++half) {
      v8u u[B];
      for (int32_t p = 0; p < B; ++p) u[p] = (w[p] >> (16 * half)) << p;
      auto value = [&]() {
        v8u idx = u[B - 1] & ~((1u << (B - 1)) - 1u);
        for (int32_t p = 0; p < B - 1; ++p) idx |= u[p] & (1u << p);
        for (int32_t p = 0; p < B; ++p) u[p] >>= 1;
        return Lookup<B>(cb, idx) * norms;
      };
      for (int32_t j = 0; j < std::min(16, n - 16 * half); ++j) out[16 * half + j] = value();
    }
  }
}

// Stages h = first, 2·first, ..., < end of the in-place unnormalized
// Walsh–Hadamard transform of n rows (n a power of two): the same butterflies
// in the same order as FastWalshHadamard (radix-4 passes fuse stages h and
// 2h), so the full transform is bit-identical per lane.
void WhtTile(v8f* x, int32_t n, int32_t first, int32_t end) {
  int32_t h = first;
  for (; 2 * h < end; h *= 4) {
    for (int32_t i = 0; i < n; i += 4 * h) {
      for (int32_t j = i; j < i + h; ++j) {
        const v8f a = x[j], b = x[j + h], c = x[j + 2 * h], e = x[j + 3 * h];
        const v8f s0 = a + b, d0 = a - b, s1 = c + e, d1 = c - e;
        x[j] = s0 + s1;
        x[j + 2 * h] = s0 - s1;
        x[j + h] = d0 + d1;
        x[j + 3 * h] = d0 - d1;
      }
    }
  }
  if (h < end) {
    for (int32_t i = 0; i < n; i += 2 * h) {
      for (int32_t j = i; j < i + h; ++j) {
        const v8f a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

// Per-call RoPE helper: cos/sin of k·θ_i for k = 0..7 (lanes), so that the
// tile's angles (j0 + k)·θ_i follow from row j0 of the table by angle addition
// (valid when row 0 of the table is cos 1, sin 0, i.e. no extra scaling; the
// kernel gathers the 8 table rows otherwise).
struct RopeSteps {
  std::vector<v8f> cos_k, sin_k;  // [half]
  bool angle_addition = false;
};

RopeSteps MakeRopeSteps(const TqLayerCodec& tq, int32_t head_dim) {
  const int32_t half = head_dim / 2;
  RopeSteps r;
  r.cos_k.assign(half, v8f{});
  r.sin_k.assign(half, v8f{});
  r.angle_addition = true;
  for (int32_t i = 0; i < half; ++i) {
    if (tq.rope_cos[i] != 1.0f || tq.rope_sin[i] != 0.0f) r.angle_addition = false;
  }
  const int32_t rows = std::min(kTile, tq.rope_positions);
  for (int32_t k = 0; k < rows; ++k) {
    for (int32_t i = 0; i < half; ++i) {
      r.cos_k[i][k] = tq.rope_cos[static_cast<size_t>(k) * half + i];
      r.sin_k[i][k] = tq.rope_sin[static_cast<size_t>(k) * half + i];
    }
  }
  return r;
}

// Keys of the tile -> scores[g * ctx + j0 + k] for the n valid lanes.
// post[4i..4i+3] = (a_i, μ_i, a_{i+h}, μ_{i+h}) with a = sign/√d·σ, h = d/2.
// G > 0: the group size; dots fused with RoPE in registers, the queries packed
// as qpack[i * 2G + g] = q_g[i], qpack[i * 2G + G + g] = q_g[i + h].
// G = 0: any group, the RoPE'd keys go back to the tile first (q0 as is).
template <int B, int G>
void ScoreTile(const uint8_t* const* codes, v8f norms, int32_t j0, int32_t n, int32_t d,
               const Codebook& cb, const float* post, const TqLayerCodec& tq, const RopeSteps& rope,
               const float* q0, const float* qpack, int32_t group, float scale, int32_t ctx,
               float* scores) {
  alignas(32) v8f tile[512];
  const int32_t half = d / 2;
  // All Walsh–Hadamard stages but the last (h = d/2), which rope_pair does.
  UnpackKeyTile<B>(codes, norms, d, cb, tile);
  WhtTile(tile, d, 1, half);
  const float* cj = tq.rope_cos + static_cast<size_t>(j0) * half;
  const float* sj = tq.rope_sin + static_cast<size_t>(j0) * half;
  const v8f* cos_k = rope.cos_k.data();
  const v8f* sin_k = rope.sin_k.data();
  // Coordinates i and i + half of the 8 keys: last WHT stage, × a + μ, RoPE.
  auto rope_pair = [&](auto angle_addition, int32_t i, v8f* r1, v8f* r2) {
    const float* pi = post + 4 * i;
    const v8f a = tile[i], b = tile[i + half];  // last stage, h = d/2
    const v8f x1 = (a + b) * pi[0] + pi[1];
    const v8f x2 = (a - b) * pi[2] + pi[3];
    v8f c, s;
    if constexpr (decltype(angle_addition)::value) {
      c = cj[i] * cos_k[i] - sj[i] * sin_k[i];
      s = sj[i] * cos_k[i] + cj[i] * sin_k[i];
    } else {
      c = v8f{};
      s = v8f{};
      for (int32_t k = 0; k < n; ++k) {
        c[k] = cj[static_cast<size_t>(k) * half + i];
        s[k] = sj[static_cast<size_t>(k) * half + i];
      }
    }
    *r1 = x1 * c - x2 * s;
    *r2 = x2 * c + x1 * s;
  };
  auto store = [&](int32_t g, v8f acc) {
    acc *= scale;
    float* out = scores + static_cast<size_t>(g) * ctx + j0;
    for (int32_t k = 0; k < n; ++k) out[k] = acc[k];
  };
  if constexpr (G > 0) {
    auto run = [&](auto angle_addition) {
      v8f a1[G] = {}, a2[G] = {};
      for (int32_t i = 0; i < half; ++i) {
        v8f r1, r2;
        rope_pair(angle_addition, i, &r1, &r2);
        const float* qi = qpack + 2 * G * i;
        for (int32_t g = 0; g < G; ++g) {
          a1[g] += qi[g] * r1;
          a2[g] += qi[G + g] * r2;
        }
      }
      for (int32_t g = 0; g < G; ++g) store(g, a1[g] + a2[g]);
    };
    if (rope.angle_addition) {
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
  } else {
    for (int32_t i = 0; i < half; ++i) {
      if (rope.angle_addition) {
        rope_pair(std::true_type{}, i, &tile[i], &tile[i + half]);
      } else {
        rope_pair(std::false_type{}, i, &tile[i], &tile[i + half]);
      }
    }
    for (int32_t g = 0; g < group; ++g) {
      const float* q = q0 + static_cast<size_t>(g) * d;
      v8f acc0{}, acc1{}, acc2{}, acc3{};
      int32_t i = 0;
      for (; i + 4 <= d; i += 4) {
        acc0 += q[i] * tile[i];
        acc1 += q[i + 1] * tile[i + 1];
        acc2 += q[i + 2] * tile[i + 2];
        acc3 += q[i + 3] * tile[i + 3];
      }
      for (; i < d; ++i) acc0 += q[i] * tile[i];
      store(g, (acc0 + acc1) + (acc2 + acc3));
    }
  }
}

// out_g[i] += Σ_k w[k][g] · c[idx_k,i] over the 8 lanes (rotated space), 8
// coordinates at a time; d % 8 == 0. Lanes past the context carry w = 0 (and
// a valid record's codes). G > 0: the group size (unrolled, two accumulator
// chains per query head); G = 0: any group.
template <int B, int G>
void AccumulateValueTile(const uint8_t* const* codes, const float* w /*[kTile][group]*/, int32_t d,
                         const Codebook& cb, int32_t group, float* out0) {
  const int32_t runs = d / 32;
  const int32_t tail_bytes = ((d % 32) + 7) / 8;
  const v8u lane_shift{0, 1, 2, 3, 4, 5, 6, 7};
  for (int32_t c = 0; c < d / 8; ++c) {
    // Byte offset of chunk c in plane p: full runs hold 4 bytes per plane.
    const int32_t t = c / 4;
    const int32_t base = t < runs ? 4 * B * t + (c % 4) : 4 * B * runs + (c - 4 * runs);
    const int32_t stride = t < runs ? 4 : tail_bytes;
    auto values = [&](int32_t k) {
      uint32_t x = 0;
      for (int32_t p = 0; p < B; ++p)
        x |= static_cast<uint32_t>(codes[k][base + p * stride]) << (8 * p);
      const v8u v = BroadcastU(x) >> lane_shift;
      // Bit p of the index sits at bit 8p of v; bits above B - 1 are ignored.
      v8u idx = (v >> (7 * (B - 1))) & ~((1u << (B - 1)) - 1u);
      for (int32_t p = 0; p < B - 1; ++p) idx |= (v >> (7 * p)) & (1u << p);
      return Lookup<B>(cb, idx);
    };
    if constexpr (G > 0) {
      v8f acc[G], acc2[G];
      for (int32_t g = 0; g < G; ++g) {
        acc[g] = Load8(out0 + static_cast<size_t>(g) * d + 8 * c);
        acc2[g] = v8f{};
      }
      for (int32_t k = 0; k < kTile; k += 2) {
        const v8f v0 = values(k);
        const v8f v1 = values(k + 1);
        for (int32_t g = 0; g < G; ++g) {
          acc[g] += w[k * G + g] * v0;
          acc2[g] += w[(k + 1) * G + g] * v1;
        }
      }
      for (int32_t g = 0; g < G; ++g) {
        const v8f sum = acc[g] + acc2[g];
        std::memcpy(out0 + static_cast<size_t>(g) * d + 8 * c, &sum, sizeof(sum));
      }
    } else {
      v8f vals[kTile];
      for (int32_t k = 0; k < kTile; ++k) vals[k] = values(k);
      for (int32_t g = 0; g < group; ++g) {
        float* o = out0 + static_cast<size_t>(g) * d + 8 * c;
        v8f acc = Load8(o);
        for (int32_t k = 0; k < kTile; ++k) acc += w[k * group + g] * vals[k];
        std::memcpy(o, &acc, sizeof(acc));
      }
    }
  }
}

// Codes and params of positions j0 .. j0 + 7 of one KV head (lanes past
// ctx repeat the last valid position): one division per tile instead of two
// per record, then a walk through the block table.
struct TileRecords {
  const uint8_t* codes[kTile];
  const uint8_t* params[kTile];
};

inline void LocateTile(const uint8_t* pool, const KvLayout& l, const KvRecord& rec,
                       const int32_t* table, int32_t j0, int32_t n, int32_t head,
                       TileRecords* out) {
  const int32_t bs = l.block_size;
  const size_t tile_bytes = static_cast<size_t>(bs) * rec.bytes();
  const size_t params_at = static_cast<size_t>(bs) * rec.code_bytes;
  int32_t b = j0 / bs;
  int32_t o = j0 - b * bs;
  const uint8_t* base = pool + (static_cast<size_t>(table[b]) * l.num_kv_heads + head) * tile_bytes;
  for (int32_t k = 0; k < kTile; ++k) {
    if (k > 0 && k < n && ++o == bs) {
      o = 0;
      ++b;
      base = pool + (static_cast<size_t>(table[b]) * l.num_kv_heads + head) * tile_bytes;
    }
    out->codes[k] = base + static_cast<size_t>(o) * rec.code_bytes;
    out->params[k] = base + params_at + static_cast<size_t>(o) * rec.param_bytes;
  }
}

inline void PrefetchTile(const TileRecords& r, int32_t code_bytes) {
  for (int32_t k = 0; k < kTile; ++k) {
    for (int32_t off = 0; off < code_bytes; off += 64) __builtin_prefetch(r.codes[k] + off);
    __builtin_prefetch(r.params[k]);
  }
}

// The 8 fp16 norms (0 for lanes >= n).
inline v8f LoadNorms(const TileRecords& r, int32_t n) {
#if TQ_ISA_F16C
  alignas(16) uint16_t h[kTile] = {};
  for (int32_t k = 0; k < n; ++k) std::memcpy(&h[k], r.params[k], 2);
  __m128i hv;
  std::memcpy(&hv, h, sizeof(hv));
  return reinterpret_cast<v8f>(_mm256_cvtph_ps(hv));
#else
  v8f norms{};
  for (int32_t k = 0; k < n; ++k) norms[k] = LoadHalf(r.params[k]);
  return norms;
#endif
}

// f(std::integral_constant<int, G>{}) with G = group for the unrolled group
// sizes 1, 2 and 4, else G = 0 (any group).
template <typename F>
void WithGroup(int32_t group, F&& f) {
  switch (group) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, 0>{});
  }
}

template <int KB, int VB>
void TqAttentionItem(const KvLayerView& cache, const KvRecord& krec, const KvRecord& vrec,
                     const int32_t* table, int32_t ctx, int32_t kv_head, const float* q0,
                     int32_t group, float scale, const RopeSteps& rope, float* scores,
                     float* out0) {
  const KvLayout& l = cache.layout;
  const TqLayerCodec& tq = *cache.tq;
  const int32_t d = l.head_dim;
  const auto* kpool = static_cast<const uint8_t*>(cache.k);
  const auto* vpool = static_cast<const uint8_t*>(cache.v);
  const Codebook kcb = MakeCodebook(tq.k_centroids, KB);
  const Codebook vcb = MakeCodebook(tq.v_centroids, VB);
  // Inverse rotation's signs/√d fused with σ (×) and μ (+) per coordinate.
  const int32_t half = d / 2;
  float post[2 * 512];
  const std::vector<float>& signs = tq.rotation->signs();
  const float inv_sqrt_d = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const size_t stats = static_cast<size_t>(kv_head) * d;
  for (int32_t i = 0; i < d; ++i) {
    const int32_t at = 4 * (i % half) + 2 * (i / half);
    post[at] = inv_sqrt_d * signs[i] * (tq.k_scale ? tq.k_scale[stats + i] : 1.0f);
    post[at + 1] = tq.k_mean ? tq.k_mean[stats + i] : 0.0f;
  }
  // Queries interleaved for the fused dots (group <= 4).
  float qpack[4 * 512];
  if (group <= 4) {
    for (int32_t i = 0; i < half; ++i) {
      for (int32_t g = 0; g < group; ++g) {
        qpack[2 * group * i + g] = q0[g * d + i];
        qpack[2 * group * i + group + g] = q0[g * d + i + half];
      }
    }
  }

  TileRecords cur{}, next{};
  LocateTile(kpool, l, krec, table, 0, std::min(kTile, ctx), kv_head, &cur);
  for (int32_t j0 = 0; j0 < ctx; j0 += kTile) {
    const int32_t n = std::min(kTile, ctx - j0);
    if (j0 + kTile < ctx) {
      LocateTile(kpool, l, krec, table, j0 + kTile, std::min(kTile, ctx - j0 - kTile), kv_head,
                 &next);
      PrefetchTile(next, krec.code_bytes);
    }
    const v8f norms = LoadNorms(cur, n);
    WithGroup(group, [&](auto g) {
      ScoreTile<KB, decltype(g)::value>(cur.codes, norms, j0, n, d, kcb, post, tq, rope, q0, qpack,
                                        group, scale, ctx, scores);
    });
    cur = next;
  }
  SinkScores(cache, table, ctx, kv_head, q0, group, scale, scores);
  // Softmax per query head.
  for (int32_t g = 0; g < group; ++g) Softmax(scores + static_cast<size_t>(g) * ctx, ctx);
  float sink_probs[kMaxSinkTokens * 64];
  SinkTakeProbs(cache, ctx, group, scores, sink_probs);
  std::fill(out0, out0 + static_cast<int64_t>(group) * d, 0.0f);
  float w[kTile * 64];
  LocateTile(vpool, l, vrec, table, 0, std::min(kTile, ctx), kv_head, &cur);
  for (int32_t j0 = 0; j0 < ctx; j0 += kTile) {
    const int32_t n = std::min(kTile, ctx - j0);
    if (j0 + kTile < ctx) {
      LocateTile(vpool, l, vrec, table, j0 + kTile, std::min(kTile, ctx - j0 - kTile), kv_head,
                 &next);
      PrefetchTile(next, vrec.code_bytes);
    }
    const v8f norms = LoadNorms(cur, n);
    for (int32_t k = 0; k < kTile; ++k) {
      for (int32_t g = 0; g < group; ++g) {
        w[k * group + g] = k < n ? scores[static_cast<size_t>(g) * ctx + j0 + k] * norms[k] : 0.0f;
      }
    }
    WithGroup(group, [&](auto g) {
      AccumulateValueTile<VB, decltype(g)::value>(cur.codes, w, d, vcb, group, out0);
    });
    cur = next;
  }
  for (int32_t g = 0; g < group; ++g) tq.rotation->Inverse(out0 + g * d, out0 + g * d);
  SinkAddValues(cache, table, ctx, kv_head, group, sink_probs, out0);
}

void SinkScores(const KvLayerView& cache, const int32_t* table, int32_t ctx, int32_t kv_head,
                const float* q0, int32_t group, float scale, float* scores) {
  const int32_t d = cache.layout.head_dim;
  float key[512];
  for (int32_t j = 0; j < SinkCount(cache, ctx); ++j) {
    std::copy_n(SinkRow(cache.sink_k, cache, table[0], j, kv_head), d, key);
    RopeKey(key, j, *cache.tq, d);
    for (int32_t g = 0; g < group; ++g) {
      scores[static_cast<size_t>(g) * ctx + j] = Dot(q0 + g * d, key, d) * scale;
    }
  }
}

void SinkTakeProbs(const KvLayerView& cache, int32_t ctx, int32_t group, float* scores,
                   float* probs) {
  for (int32_t j = 0; j < SinkCount(cache, ctx); ++j) {
    for (int32_t g = 0; g < group; ++g) {
      probs[j * group + g] = scores[static_cast<size_t>(g) * ctx + j];
      scores[static_cast<size_t>(g) * ctx + j] = 0.0f;
    }
  }
}

void SinkAddValues(const KvLayerView& cache, const int32_t* table, int32_t ctx, int32_t kv_head,
                   int32_t group, const float* probs, float* out0) {
  const int32_t d = cache.layout.head_dim;
  for (int32_t j = 0; j < SinkCount(cache, ctx); ++j) {
    const float* value = SinkRow(cache.sink_v, cache, table[0], j, kv_head);
    for (int32_t g = 0; g < group; ++g) Axpy(probs[j * group + g], value, out0 + g * d, d);
  }
}

}  // namespace

void Softmax(float* s, int32_t n) {
  v8f m8 = Splat<v8f>(s[0]);
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const v8f x = Load8(s + j);
    m8 = x > m8 ? x : m8;
  }
  float max_score = m8[0];
  for (int32_t k = 1; k < 8; ++k) max_score = std::max(max_score, m8[k]);
  for (; j < n; ++j) max_score = std::max(max_score, s[j]);
  v8f sum8{};
  for (j = 0; j + 8 <= n; j += 8) {
    const v8f e = ExpNonPositive(Load8(s + j) - max_score);
    sum8 += e;
    std::memcpy(s + j, &e, sizeof(e));
  }
  float sum = HorizontalSum(sum8);
  for (; j < n; ++j) {
    s[j] = std::exp(s[j] - max_score);
    sum += s[j];
  }
  const float inv = 1.0f / sum;
  for (j = 0; j < n; ++j) s[j] *= inv;
}

void KvWrite(const KvWriteParams& p) {
  CheckTq(p.cache);
  const KvLayout& l = p.cache.layout;
  const KvRecord krec = l.KRecord();
  const KvRecord vrec = l.VRecord();
  const int64_t row = static_cast<int64_t>(l.num_kv_heads) * l.head_dim;
  std::vector<float> scratch(2 * static_cast<size_t>(l.head_dim));
  auto* kpool = static_cast<uint8_t*>(p.cache.k);
  auto* vpool = static_cast<uint8_t*>(p.cache.v);
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    for (int32_t h = 0; h < l.num_kv_heads; ++h) {
      const KvRecordAddress ka = RecordAddress(l, krec, slot, h);
      const KvRecordAddress va = RecordAddress(l, vrec, slot, h);
      TQ_CPU_ISA_NS::EncodeRecord(p.k + t * row + h * l.head_dim, l, p.cache.tq, KvSide::kKey, h,
                                  kpool + ka.code_offset, kpool + ka.param_offset, scratch.data());
      TQ_CPU_ISA_NS::EncodeRecord(p.v + t * row + h * l.head_dim, l, p.cache.tq, KvSide::kValue, h,
                                  vpool + va.code_offset, vpool + va.param_offset, scratch.data());
    }
    // Sink positions are also kept exact, in their first block's sink row.
    if (p.cache.sink_k && p.positions && p.positions[t] < p.cache.sink_tokens) {
      const size_t at =
          (static_cast<size_t>(slot / l.block_size) * p.cache.sink_tokens + p.positions[t]) * row;
      std::copy_n(p.k + t * row, row, p.cache.sink_k + at);
      std::copy_n(p.v + t * row, row, p.cache.sink_v + at);
    }
  }
}

void PagedAttention(const PagedAttentionParams& p, ThreadPool& pool) {
  CheckTq(p.cache);
  const KvLayout& l = p.cache.layout;
  if (IsPlainKvDtype(l.dtype)) {  // fp32 / fp16 / bf16: plain_attention.cc
    PlainPagedAttention(p, pool);
    return;
  }
  const KvRecord krec = l.KRecord();
  const KvRecord vrec = l.VRecord();
  const int32_t hd = l.head_dim;
  const int32_t group = p.num_heads / l.num_kv_heads;
  const int64_t work = static_cast<int64_t>(p.num_tokens) * l.num_kv_heads;
  const bool pre_rope_keys = KvStoresPreRopeKeys(l.dtype);
  const bool rotated_values = pre_rope_keys;  // tq formats accumulate V rotated
  const auto* kpool = static_cast<const uint8_t*>(p.cache.k);
  const auto* vpool = static_cast<const uint8_t*>(p.cache.v);

  // tq with the randomized Hadamard rotation: the 8-key tile path, one
  // instantiation per (key bits, value bits): tq3 (3, 3), tq4 (4, 3), tqk3v2 (3, 2).
  using ItemFn = decltype(&TqAttentionItem<3, 3>);
  ItemFn item_fn = nullptr;
  if (pre_rope_keys) {
    const int32_t kb = TqKeyBits(l.dtype), vb = TqValueBits(l.dtype);
    item_fn = kb == 3 && vb == 3   ? &TqAttentionItem<3, 3>
              : kb == 4 && vb == 3 ? &TqAttentionItem<4, 3>
              : kb == 3 && vb == 2 ? &TqAttentionItem<3, 2>
                                   : nullptr;
  }
  const bool tiled = item_fn != nullptr && p.cache.tq->rotation->is_hadamard() && hd >= 8 &&
                     group <= 64 && p.cache.tq->rope_positions > 0;
  RopeSteps rope;
  if (tiled) rope = MakeRopeSteps(*p.cache.tq, hd);

  pool.ParallelFor(work, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    std::vector<float> head(hd);
    for (int64_t item = begin; item < end; ++item) {
      const int32_t t = static_cast<int32_t>(item / l.num_kv_heads);
      const int32_t kv_head = static_cast<int32_t>(item % l.num_kv_heads);
      const int32_t ctx = p.token_pos[t] + 1;
      float* out0 = p.out + (static_cast<int64_t>(t) * p.num_heads + kv_head * group) * hd;
      if (ctx <= 0) {  // a padding row (CUDA graph buckets): reads nothing, outputs zeros
        std::fill(out0, out0 + static_cast<int64_t>(group) * hd, 0.0f);
        continue;
      }
      const int32_t* table =
          p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks_per_seq;
      scores.assign(static_cast<size_t>(group) * ctx, 0.0f);
      const float* q0 = p.q + (static_cast<int64_t>(t) * p.num_heads + kv_head * group) * hd;
      if (tiled) {
        item_fn(p.cache, krec, vrec, table, ctx, kv_head, q0, group, p.scale, rope, scores.data(),
                out0);
        continue;
      }

      // Scores: each key is decoded once (in registers/L1, not into a block
      // buffer) and shared by the group's query heads.
      for (int32_t j = 0; j < ctx; ++j) {
        const KvRecordAddress a = RecordAddress(l, krec, SlotOf(table, j, l.block_size), kv_head);
        TQ_CPU_ISA_NS::DecodeRecord(kpool + a.code_offset, kpool + a.param_offset, l, p.cache.tq,
                                    KvSide::kKey, kv_head, head.data());
        if (pre_rope_keys) RopeKey(head.data(), j, *p.cache.tq, hd);
        const float* key = head.data();
        for (int32_t g = 0; g < group; ++g) {
          scores[static_cast<size_t>(g) * ctx + j] = Dot(q0 + g * hd, key, hd) * p.scale;
        }
      }
      SinkScores(p.cache, table, ctx, kv_head, q0, group, p.scale, scores.data());
      // Softmax per query head.
      for (int32_t g = 0; g < group; ++g)
        Softmax(scores.data() + static_cast<size_t>(g) * ctx, ctx);
      float sink_probs[kMaxSinkTokens * 64];
      SinkTakeProbs(p.cache, ctx, group, scores.data(), sink_probs);
      // Weighted sum of values (tq: in the rotated space, un-rotated once below).
      std::fill(out0, out0 + static_cast<int64_t>(group) * hd, 0.0f);
      for (int32_t j = 0; j < ctx; ++j) {
        const KvRecordAddress a = RecordAddress(l, vrec, SlotOf(table, j, l.block_size), kv_head);
        TQ_CPU_ISA_NS::DecodeRecord(vpool + a.code_offset, vpool + a.param_offset, l, p.cache.tq,
                                    KvSide::kValue, kv_head, head.data());
        const float* value = head.data();
        for (int32_t g = 0; g < group; ++g) {
          const float w = scores[static_cast<size_t>(g) * ctx + j];
          float* out = out0 + g * hd;
          Axpy(w, value, out, hd);
        }
      }
      if (rotated_values) {
        for (int32_t g = 0; g < group; ++g)
          p.cache.tq->rotation->Inverse(out0 + g * hd, out0 + g * hd);
      }
      SinkAddValues(p.cache, table, ctx, kv_head, group, sink_probs, out0);
    }
  });
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
