// Causal GQA attention over the uncompressed KV formats (fp32, fp16, bf16) on
// the CPU, a block of query rows of one sequence at a time (issue 22 item 3).
//
// Records are read in place: fp16 is widened 8 elements at a time with F16C
// (vcvtph2ps), bf16 by a 16-bit shift, in registers; nothing is converted into
// a buffer. A "lane" is one (query row, query head) of the KV head being
// attended. A pass runs NL lanes against the keys (scores) or the values
// (outputs) with NL x NX = 8 independent accumulators (NX keys, or NX
// 8-coordinate chunks of the output), so every element loaded and converted
// once serves NL lanes, and no add chain waits on the previous one. Prefill
// rows of one sequence share the keys and values they read: a block of up to
// 8 rows reads them once instead of once per row.
//
// Every lane's arithmetic is that of a row attended alone: score_j = (8-lane
// dot of q and k_j by fused multiply-adds, lanes summed as HorizontalSum
// does, then the coordinates past the last multiple of 8) x scale; Softmax();
// out = Σ_j p_j·v_j by fused multiply-adds in order j = 0, 1, ... from 0. This
// file is built with -ffp-contract=off so that the compiler fuses nothing
// else (it would fuse in some kernel variants and not others). So results do
// not depend on the batch, the block or the thread count
// (CpuOpsDeterminismTest.PagedAttentionRowAloneEqualsBatch).
#include "kernels/cpu/plain_attention.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/softmax.h"
#include "kernels/cpu/x86_intrin.h"
#include "kernels/half.h"

// This level's part of the file (isa_begin.h): everything above is baseline code.
#include "kernels/cpu/isa_begin.h"
#include "kernels/cpu/simd.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {
namespace {

typedef uint16_t v8h __attribute__((vector_size(16)));
typedef uint32_t v8u __attribute__((vector_size(32)));

// Elements [i, i + 8) and element i of one record as floats, per format
// (all conversions exact).
struct F32Elems {
  static v8f Load8(const uint8_t* r, int32_t i) {
    v8f v;
    std::memcpy(&v, r + 4 * static_cast<size_t>(i), sizeof(v));
    return v;
  }
  static float Load1(const uint8_t* r, int32_t i) {
    float f;
    std::memcpy(&f, r + 4 * static_cast<size_t>(i), sizeof(f));
    return f;
  }
};

struct F16Elems {
  static float Load1(const uint8_t* r, int32_t i) {
    uint16_t h;
    std::memcpy(&h, r + 2 * static_cast<size_t>(i), sizeof(h));
    return HalfToFloat(h);
  }
  static v8f Load8(const uint8_t* r, int32_t i) {
#if TQ_ISA_F16C
    __m128i h;
    std::memcpy(&h, r + 2 * static_cast<size_t>(i), sizeof(h));
    return reinterpret_cast<v8f>(_mm256_cvtph_ps(h));
#else
    v8f v;
    for (int32_t k = 0; k < 8; ++k) v[k] = Load1(r, i + k);
    return v;
#endif
  }
};

struct Bf16Elems {
  static v8f Load8(const uint8_t* r, int32_t i) {
    v8h h;
    std::memcpy(&h, r + 2 * static_cast<size_t>(i), sizeof(h));
    const v8u w = __builtin_convertvector(h, v8u) << 16;
    return reinterpret_cast<v8f>(w);
  }
  static float Load1(const uint8_t* r, int32_t i) {
    uint16_t h;
    std::memcpy(&h, r + 2 * static_cast<size_t>(i), sizeof(h));
    return Bf16ToFloat(h);
  }
};

// a·b + c per lane: one fused multiply-add (one rounding) where the CPU has
// FMA, else a rounded product and a rounded sum; the same for every caller.
inline v8f MulAdd(v8f a, v8f b, v8f c) {
#if TQ_ISA_FMA
  return reinterpret_cast<v8f>(_mm256_fmadd_ps(
      reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b), reinterpret_cast<__m256>(c)));
#else
  return a * b + c;
#endif
}

// One (query row, query head) of the KV head being attended.
struct Lane {
  const float* q = nullptr;  // [hd], RoPE applied
  float* scores = nullptr;   // [ctx]: scores, then probabilities
  float* out = nullptr;      // [hd]
  int32_t ctx = 0;           // positions [0, ctx) attended
};

constexpr int32_t kMaxRows = 8;         // query rows of one sequence per block
constexpr int32_t kAccumulators = 8;    // v8f accumulators per pass: lanes x keys (or chunks)
constexpr int32_t kTilePositions = 32;  // positions per tile: 16 KiB of fp32 records at d = 128

// {HorizontalSum(a[0]), ..., HorizontalSum(a[7])}: the same additions in the
// same order (((v0+v1)+(v2+v3))+((v4+v5)+(v6+v7)) per vector), done on the
// eight vectors at once.
inline v8f HorizontalSums8(const v8f* a) {
#if TQ_ISA_AVX
  auto m = [&](int32_t k) { return reinterpret_cast<__m256>(a[k]); };
  const __m256 h01 = _mm256_hadd_ps(m(0), m(1));  // a0: 01 23, a1: 01 23 | a0: 45 67, a1: 45 67
  const __m256 h23 = _mm256_hadd_ps(m(2), m(3));
  const __m256 h45 = _mm256_hadd_ps(m(4), m(5));
  const __m256 h67 = _mm256_hadd_ps(m(6), m(7));
  const __m256 q0 = _mm256_hadd_ps(h01, h23);  // a0..a3: 0123 | a0..a3: 4567
  const __m256 q1 = _mm256_hadd_ps(h45, h67);
  const __m256 lo = _mm256_permute2f128_ps(q0, q1, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(q0, q1, 0x31);
  return reinterpret_cast<v8f>(_mm256_add_ps(lo, hi));
#else
  v8f r;
  for (int32_t k = 0; k < 8; ++k) r[k] = HorizontalSum(a[k]);
  return r;
#endif
}

// Scores of lanes[0, NL) for keys [j0, j1), NX keys at a time; returns the
// first key not done (j1 - (j1 - j0) % NX).
template <class E, int NL, int NX>
int32_t ScoreKeys(const Lane* lanes, const uint8_t* const* keys, int32_t j0, int32_t j1, int32_t hd,
                  float scale) {
  int32_t j = j0;
  for (; j + NX <= j1; j += NX) {
    v8f acc[NX * NL] = {};  // [x][l]
    int32_t i = 0;
    for (; i + 8 <= hd; i += 8) {
      v8f q[NL];
      for (int32_t l = 0; l < NL; ++l) q[l] = Load8(lanes[l].q + i);
      for (int32_t x = 0; x < NX; ++x) {
        const v8f k = E::Load8(keys[j + x], i);
        for (int32_t l = 0; l < NL; ++l) acc[x * NL + l] = MulAdd(q[l], k, acc[x * NL + l]);
      }
    }
    float sums[NX * NL];
    if constexpr (NX * NL == 8) {
      const v8f s8 = HorizontalSums8(acc);
      std::memcpy(sums, &s8, sizeof(s8));
    } else {
      for (int32_t a = 0; a < NX * NL; ++a) sums[a] = HorizontalSum(acc[a]);
    }
    for (int32_t x = 0; x < NX; ++x) {
      for (int32_t l = 0; l < NL; ++l) {
        float sum = sums[x * NL + l];
        for (int32_t r = i; r < hd; ++r) sum += lanes[l].q[r] * E::Load1(keys[j + x], r);
        lanes[l].scores[j + x] = sum * scale;
      }
    }
  }
  return j;
}

// Lanes' positions in [j0, j1): [j0, jc) is seen by every lane of a group.
inline int32_t CommonEnd(const Lane* lanes, int32_t nl, int32_t j0, int32_t j1) {
  int32_t common = lanes[0].ctx;
  for (int32_t l = 1; l < nl; ++l) common = std::min(common, lanes[l].ctx);
  return std::clamp(common, j0, j1);
}

// Scores of lanes[0, NL) for keys [j0, j1): the keys all lanes see together,
// then each lane's own last keys.
template <class E, int NL>
void ScorePass(const Lane* lanes, const uint8_t* const* keys, int32_t j0, int32_t j1, int32_t hd,
               float scale) {
  const int32_t jc = CommonEnd(lanes, NL, j0, j1);
  const int32_t j = ScoreKeys<E, NL, kAccumulators / NL>(lanes, keys, j0, jc, hd, scale);
  ScoreKeys<E, NL, 1>(lanes, keys, j, jc, hd, scale);
  for (int32_t l = 0; l < NL; ++l) {
    const int32_t end = std::min(lanes[l].ctx, j1);
    const int32_t k = ScoreKeys<E, 1, 8>(lanes + l, keys, jc, end, hd, scale);
    ScoreKeys<E, 1, 1>(lanes + l, keys, k, end, hd, scale);
  }
}

// Adds positions [j0, j1) to output chunks [c0, c1) (8 coordinates each) of
// lanes[0, NL), NX chunks at a time: out += p_j·v_j, j ascending (out starts
// at 0 when j0 == 0). Returns the first chunk not done.
template <class E, int NL, int NX>
int32_t AccumulateValues(const Lane* lanes, const uint8_t* const* values, int32_t j0, int32_t j1,
                         int32_t c0, int32_t c1) {
  const int32_t jc = CommonEnd(lanes, NL, j0, j1);
  int32_t c = c0;
  for (; c + NX <= c1; c += NX) {
    v8f acc[NX][NL] = {};
    if (j0 > 0) {
      for (int32_t x = 0; x < NX; ++x)
        for (int32_t l = 0; l < NL; ++l) acc[x][l] = Load8(lanes[l].out + 8 * (c + x));
    }
    for (int32_t j = j0; j < jc; ++j) {
      for (int32_t x = 0; x < NX; ++x) {
        const v8f v = E::Load8(values[j], 8 * (c + x));
        for (int32_t l = 0; l < NL; ++l)
          acc[x][l] = MulAdd(Splat<v8f>(lanes[l].scores[j]), v, acc[x][l]);
      }
    }
    for (int32_t l = 0; l < NL; ++l) {
      for (int32_t j = jc; j < std::min(lanes[l].ctx, j1); ++j) {
        for (int32_t x = 0; x < NX; ++x) {
          acc[x][l] =
              MulAdd(Splat<v8f>(lanes[l].scores[j]), E::Load8(values[j], 8 * (c + x)), acc[x][l]);
        }
      }
      for (int32_t x = 0; x < NX; ++x) {
        std::memcpy(lanes[l].out + 8 * (c + x), &acc[x][l], sizeof(v8f));
      }
    }
  }
  return c;
}

// Positions [j0, j1) into the first hd / 8 * 8 output coordinates of lanes[0, NL).
template <class E, int NL>
void ValuePass(const Lane* lanes, const uint8_t* const* values, int32_t j0, int32_t j1,
               int32_t hd) {
  const int32_t chunks = hd / 8;
  const int32_t c = AccumulateValues<E, NL, kAccumulators / NL>(lanes, values, j0, j1, 0, chunks);
  AccumulateValues<E, NL, 1>(lanes, values, j0, j1, c, chunks);
}

// The output coordinates past the last multiple of 8 (hd % 8 of them), all positions.
template <class E>
void ValueTail(const Lane& lane, const uint8_t* const* values, int32_t hd) {
  for (int32_t i = hd / 8 * 8; i < hd; ++i) {
    float acc = 0.0f;
    for (int32_t j = 0; j < lane.ctx; ++j) acc += lane.scores[j] * E::Load1(values[j], i);
    lane.out[i] = acc;
  }
}

// Runs pass<NL> over lanes[0, n) in groups of 8, then 4, 2, 1 lanes.
template <class Fn>
void ForLaneGroups(Lane* lanes, int32_t n, Fn&& pass) {
  int32_t l = 0;
  for (; l + 8 <= n; l += 8) pass(lanes + l, std::integral_constant<int, 8>{});
  if (l + 4 <= n) pass(lanes + l, std::integral_constant<int, 4>{}), l += 4;
  if (l + 2 <= n) pass(lanes + l, std::integral_constant<int, 2>{}), l += 2;
  if (l < n) pass(lanes + l, std::integral_constant<int, 1>{});
}

// Per-thread buffers of AttendBlock.
struct Scratch {
  std::vector<const uint8_t*> keys, values;  // record of position j
  std::vector<float> scores;                 // [lanes][max ctx]
  std::vector<Lane> lanes;
};

// Record addresses of positions [0, n) of one KV head: one block table
// lookup per block, no division per position.
void LocateRecords(const uint8_t* pool, const KvLayout& l, const int32_t* table, int32_t n,
                   int32_t kv_head, const uint8_t** out) {
  const KvRecord rec = l.KRecord();  // plain formats: K and V records alike
  const size_t tile_bytes = static_cast<size_t>(l.block_size) * rec.bytes();
  for (int32_t j = 0; j < n; j += l.block_size) {
    const uint8_t* base =
        pool +
        (static_cast<size_t>(table[j / l.block_size]) * l.num_kv_heads + kv_head) * tile_bytes;
    const int32_t m = std::min(l.block_size, n - j);
    for (int32_t o = 0; o < m; ++o) out[j + o] = base + static_cast<size_t>(o) * rec.code_bytes;
  }
}

// Query rows [first, first + rows) of one sequence (positions >= 0) x the
// group of query heads of kv_head.
template <class E>
void AttendBlock(const PagedAttentionParams& p, const AttentionRowBlock& b, int32_t kv_head,
                 Scratch* s) {
  const KvLayout& l = p.cache.layout;
  const int32_t hd = l.head_dim;
  const int32_t group = p.num_heads / l.num_kv_heads;
  int32_t max_ctx = 0;
  for (int32_t r = 0; r < b.rows; ++r) max_ctx = std::max(max_ctx, p.token_pos[b.first + r] + 1);
  const int32_t* table =
      p.block_tables + static_cast<int64_t>(p.token_seq[b.first]) * p.max_blocks_per_seq;
  s->keys.resize(max_ctx);
  s->values.resize(max_ctx);
  LocateRecords(static_cast<const uint8_t*>(p.cache.k), l, table, max_ctx, kv_head, s->keys.data());
  LocateRecords(static_cast<const uint8_t*>(p.cache.v), l, table, max_ctx, kv_head,
                s->values.data());
  const int32_t n = b.rows * group;
  s->scores.resize(static_cast<size_t>(n) * max_ctx);
  s->lanes.resize(n);
  for (int32_t r = 0; r < b.rows; ++r) {
    const int32_t t = b.first + r;
    for (int32_t g = 0; g < group; ++g) {
      const int64_t at = (static_cast<int64_t>(t) * p.num_heads + kv_head * group + g) * hd;
      Lane& lane = s->lanes[r * group + g];
      lane.q = p.q + at;
      lane.out = p.out + at;
      lane.scores = s->scores.data() + static_cast<size_t>(r * group + g) * max_ctx;
      lane.ctx = p.token_pos[t] + 1;
    }
  }
  // Positions in tiles of kTilePositions, so that the lane groups after the
  // first find the tile's records in L1.
  Lane* lanes = s->lanes.data();
  for (int32_t j0 = 0; j0 < max_ctx; j0 += kTilePositions) {
    const int32_t j1 = std::min(j0 + kTilePositions, max_ctx);
    ForLaneGroups(lanes, n, [&](const Lane* group_lanes, auto nl) {
      ScorePass<E, decltype(nl)::value>(group_lanes, s->keys.data(), j0, j1, hd, p.scale);
    });
  }
  for (int32_t i = 0; i < n; ++i) Softmax(lanes[i].scores, lanes[i].ctx);
  for (int32_t j0 = 0; j0 < max_ctx; j0 += kTilePositions) {
    const int32_t j1 = std::min(j0 + kTilePositions, max_ctx);
    ForLaneGroups(lanes, n, [&](const Lane* group_lanes, auto nl) {
      ValuePass<E, decltype(nl)::value>(group_lanes, s->values.data(), j0, j1, hd);
    });
  }
  if (hd % 8 != 0) {
    for (int32_t i = 0; i < n; ++i) ValueTail<E>(lanes[i], s->values.data(), hd);
  }
}

template <class E>
void Attend(const PagedAttentionParams& p, ThreadPool& pool) {
  const KvLayout& l = p.cache.layout;
  const int32_t group = p.num_heads / l.num_kv_heads;
  const std::vector<AttentionRowBlock> blocks =
      PlanRowBlocks(p.token_seq, p.token_pos, p.num_tokens);
  const int64_t work = static_cast<int64_t>(blocks.size()) * l.num_kv_heads;
  pool.ParallelFor(work, 1, [&](int64_t begin, int64_t end) {
    Scratch s;
    for (int64_t item = begin; item < end; ++item) {
      const AttentionRowBlock& b = blocks[item / l.num_kv_heads];
      const auto kv_head = static_cast<int32_t>(item % l.num_kv_heads);
      if (p.token_pos[b.first] < 0) {  // a padding row (CUDA graph buckets): outputs zeros
        float* out0 =
            p.out + (static_cast<int64_t>(b.first) * p.num_heads + kv_head * group) * l.head_dim;
        std::fill(out0, out0 + static_cast<int64_t>(group) * l.head_dim, 0.0f);
        continue;
      }
      AttendBlock<E>(p, b, kv_head, &s);
    }
  });
}

}  // namespace

std::vector<AttentionRowBlock> PlanRowBlocks(const int32_t* token_seq, const int32_t* token_pos,
                                             int32_t num_tokens) {
  std::vector<AttentionRowBlock> blocks;
  for (int32_t t = 0; t < num_tokens; ++t) {
    const bool padding = token_pos[t] < 0;
    if (!blocks.empty() && !padding) {
      AttentionRowBlock& last = blocks.back();
      if (last.rows < kMaxRows && token_pos[last.first] >= 0 &&
          token_seq[last.first] == token_seq[t]) {
        ++last.rows;
        continue;
      }
    }
    blocks.push_back({t, 1});
  }
  return blocks;
}

void PlainPagedAttention(const PagedAttentionParams& p, ThreadPool& pool) {
  switch (p.cache.layout.dtype) {
    case KvDtype::kF32:
      Attend<F32Elems>(p, pool);
      return;
    case KvDtype::kF16:
      Attend<F16Elems>(p, pool);
      return;
    case KvDtype::kBF16:
      Attend<Bf16Elems>(p, pool);
      return;
    default:
      break;
  }
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
