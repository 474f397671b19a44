// Integer-unit matmul for int8 / int4 weights in the tiled layout
// (WeightDtype::kInt8Tiles / kInt4Tiles, kernels/op_params.h), the scheme of
// llama.cpp's Q8_0 x Q8_0 dot products: each row of x is quantized once per
// call to int8 in blocks of the weight's group size,
//   d[g] = max_i |x_i| / 127,  q_i = round_half_even(x_i * (127 / max_i |x_i|)),
// (q = 0, d = 0 for an all-zero block), and per output feature o
//   out[o] = sum_g fma-accumulated  t_g * (scale[o, g] * d[g]),
//   t_g    = fma(-zero[o, g], S[g], I_g),  I_g = sum_{i in g} code[o, i] * q_i,
//   S[g]   = sum_{i in g} q_i,
// over groups g in order, from 0 (then + out when accumulating). I_g and
// S[g] are exact integers (below 2^24 for groups <= 512, so their fp32 values
// are exact too), so the AVX-512 VNNI (vpdpbusd), AVX2 (vpmaddubsw +
// vpmaddwd) and scalar paths produce the same bits, and an output depends
// only on its row of x and its row of W: bit-identical across thread counts,
// row counts and ISAs. The accuracy cost is the rounding of x to 8 bits
// (docs/quantization.md "Integer matmul": perplexity).
//
// Tiles of 16 output features sit in lanes (no horizontal sums): one 64-byte
// load feeds one vpdpbusd (int8: 4 inputs x 16 rows; int4: two, low and high
// nibbles, 8 inputs x 16 rows), shared by up to kRowBlock rows of x.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/x86_intrin.h"
#include "kernels/half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define TQ_INT_X86 1
#define TQ_TARGET_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,fma,f16c,avx2")))
#define TQ_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define TQ_INT_X86 0
#endif

namespace tq::kernels::cpu {
namespace {

constexpr int64_t kChunkBytes = 64;
constexpr int64_t kRowBlock = 64;  // rows of x kept in L2 while tiles pass over them
// Software prefetch distances of the 1-row VNNI GEMV, in chunks of codes and
// in groups of scales: its four streams (codes and scales of two tiles) are
// more than the hardware prefetcher keeps ahead of on the Xeon of issue 22
// (docs/PERFORMANCE.md "Xeon, second pass", item 3: 8-64 chunks tried).
constexpr int64_t kPrefetchChunks = 32;
constexpr int64_t kPrefetchGroups = 8;

// The quantized activations of one call: [rows, k] codes, [rows, groups] d and S.
struct QuantizedActs {
  int64_t k = 0;
  int64_t groups = 0;
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<float> sum;
};

void QuantizeRow(const float* x, int64_t k, int64_t gs, int8_t* q, float* d, float* sum) {
  for (int64_t g = 0; g * gs < k; ++g) {
    const float* xg = x + g * gs;
    float amax = 0.0f;
    for (int64_t i = 0; i < gs; ++i) amax = std::max(amax, std::fabs(xg[i]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t s = 0;
    for (int64_t i = 0; i < gs; ++i) {
      const float r = std::nearbyint(xg[i] * inv);
      const int32_t v = static_cast<int32_t>(std::clamp(r, -127.0f, 127.0f));
      q[g * gs + i] = static_cast<int8_t>(v);
      s += v;
    }
    d[g] = amax / 127.0f;
    sum[g] = static_cast<float>(s);
  }
}

// Everything a tile kernel reads: the weight, the activations, the output.
struct IntJob {
  const MatMulParams* p;
  const QuantizedActs* a;
  bool int4;
};

// out[row, col] for the given tile and row range, (+)= v.
inline void Store(const IntJob& job, int64_t row, int64_t col, float v) {
  float& dst = job.p->out[row * job.p->w.out_features + col];
  dst = job.p->accumulate ? dst + v : v;
}

// The scalar path: the reference the SIMD paths equal bit for bit, and the
// fallback where neither AVX2 nor AVX-512 VNNI is available.
void TilesScalar(const IntJob& job, int64_t row_begin, int64_t row_end, int64_t tile) {
  const WeightView& w = job.p->w;
  const int64_t k = w.in_features, gs = w.group_size, groups = k / gs;
  const int64_t ci = job.int4 ? 8 : 4;
  const uint8_t* codes = static_cast<const uint8_t*>(w.data) + tile * (k / ci) * kChunkBytes;
  const float mid = job.int4 ? 8.0f : 128.0f;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int8_t* q = job.a->q.data() + row * k;
    for (int64_t r = 0; r < kIntTileRows; ++r) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t isum = 0;
        for (int64_t i = g * gs; i < (g + 1) * gs; ++i) {
          const uint8_t b = codes[(i / ci) * kChunkBytes + 4 * r + i % 4];
          const int32_t code = !job.int4 ? b : (i % ci < 4 ? (b & 0x0f) : (b >> 4));
          isum += code * q[i];
        }
        const int64_t e = (tile * groups + g) * kIntTileRows + r;
        const float ws = HalfToFloat(w.scales[e]);
        const float zf = w.zeros ? HalfToFloat(w.zeros[e]) : mid;
        const float t = std::fma(-zf, job.a->sum[row * groups + g], static_cast<float>(isum));
        acc = std::fma(t, ws * job.a->d[row * groups + g], acc);
      }
      Store(job, row, tile * kIntTileRows + r, acc);
    }
  }
}

#if TQ_INT_X86

inline int32_t Load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// QuantizeRow with AVX-512 for group sizes that are multiples of 16: the
// same bits (max is exact, the product is the same IEEE product, vcvtps2dq
// rounds half to even like nearbyint, and integer sums do not depend on
// order). The scalar loop's nearbyint per element cost 2-10% of an int
// matmul at 16-400 rows (docs/PERFORMANCE.md "Xeon, second pass", item 4).
TQ_TARGET_VNNI void QuantizeRowAvx512(const float* x, int64_t k, int64_t gs, int8_t* q, float* d,
                                      float* sum) {
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int64_t g = 0; g * gs < k; ++g) {
    const float* xg = x + g * gs;
    __m512 vmax = _mm512_setzero_ps();
    for (int64_t i = 0; i < gs; i += 16)
      vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(xg + i)));
    const float amax = _mm512_reduce_max_ps(vmax);
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    __m512i vsum = _mm512_setzero_si512();
    for (int64_t i = 0; i < gs; i += 16) {
      __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + i), inv));
      v = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
      vsum = _mm512_add_epi32(vsum, v);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + g * gs + i), _mm512_cvtepi32_epi8(v));
    }
    d[g] = amax / 127.0f;
    sum[g] = static_cast<float>(_mm512_reduce_add_epi32(vsum));
  }
}

// M rows x T tiles of 16 outputs, AVX-512 VNNI.
template <bool kInt4, int M, int T>
TQ_TARGET_VNNI void TilesVnni(const IntJob& job, int64_t row0, int64_t tile0) {
  const WeightView& w = job.p->w;
  const int64_t k = w.in_features, gs = w.group_size, groups = k / gs;
  constexpr int64_t ci = kInt4 ? 8 : 4;
  const int64_t chunks = k / ci, cpg = gs / ci;
  const uint8_t* tw[T];
  for (int t = 0; t < T; ++t)
    tw[t] = static_cast<const uint8_t*>(w.data) + (tile0 + t) * chunks * kChunkBytes;
  const int8_t* xq[M];
  const float* xd[M];
  const float* xs[M];
  for (int m = 0; m < M; ++m) {
    xq[m] = job.a->q.data() + (row0 + m) * k;
    xd[m] = job.a->d.data() + (row0 + m) * groups;
    xs[m] = job.a->sum.data() + (row0 + m) * groups;
  }
  const __m512i low = _mm512_set1_epi8(0x0f);
  const __m512 mid = _mm512_set1_ps(kInt4 ? 8.0f : 128.0f);
  __m512 acc[M][T];
  for (int m = 0; m < M; ++m)
    for (int t = 0; t < T; ++t) acc[m][t] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    // One row (a GEMV): the high int4 nibbles stay in place (16 * code,
    // below 256) and sum into an accumulator of their own, one op fewer per
    // chunk than shifting them down and two dependency chains instead of
    // one; the sum is a multiple of 16, so the shift back is exact. Rows
    // share the unpacking, and the extra accumulators would spill.
    constexpr bool kSplitHigh = kInt4 && M == 1;
    __m512i isum[M][T], isum_high[M][T];
    for (int m = 0; m < M; ++m)
      for (int t = 0; t < T; ++t) isum[m][t] = isum_high[m][t] = _mm512_setzero_si512();
    for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) {
      for (int t = 0; t < T; ++t) {
        // A prefetch never faults: reading ahead past the weight's end is harmless.
        if constexpr (M == 1)
          _mm_prefetch(tw[t] + (c + kPrefetchChunks) * kChunkBytes, _MM_HINT_T0);
        const __m512i wv = _mm512_loadu_si512(tw[t] + c * kChunkBytes);
        if constexpr (kSplitHigh) {
          const int8_t* x = xq[0] + c * ci;
          const __m512i lo = _mm512_and_si512(wv, low);
          const __m512i hi16 = _mm512_andnot_si512(low, wv);
          isum[0][t] = _mm512_dpbusd_epi32(isum[0][t], lo, _mm512_set1_epi32(Load4(x)));
          isum_high[0][t] =
              _mm512_dpbusd_epi32(isum_high[0][t], hi16, _mm512_set1_epi32(Load4(x + 4)));
        } else if constexpr (kInt4) {
          const __m512i lo = _mm512_and_si512(wv, low);
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), low);
          for (int m = 0; m < M; ++m) {
            const int8_t* x = xq[m] + c * ci;
            isum[m][t] = _mm512_dpbusd_epi32(isum[m][t], lo, _mm512_set1_epi32(Load4(x)));
            isum[m][t] = _mm512_dpbusd_epi32(isum[m][t], hi, _mm512_set1_epi32(Load4(x + 4)));
          }
        } else {
          for (int m = 0; m < M; ++m) {
            isum[m][t] =
                _mm512_dpbusd_epi32(isum[m][t], wv, _mm512_set1_epi32(Load4(xq[m] + c * ci)));
          }
        }
      }
    }
    if constexpr (kSplitHigh) {
      for (int t = 0; t < T; ++t) {
        isum[0][t] = _mm512_add_epi32(isum[0][t], _mm512_srai_epi32(isum_high[0][t], 4));
      }
    }
    for (int t = 0; t < T; ++t) {
      const int64_t e = ((tile0 + t) * groups + g) * kIntTileRows;
      if constexpr (M == 1)
        _mm_prefetch(w.scales + e + kPrefetchGroups * kIntTileRows, _MM_HINT_T0);
      const __m512 ws =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.scales + e)));
      const __m512 zf =
          w.zeros
              ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.zeros + e)))
              : mid;
      for (int m = 0; m < M; ++m) {
        const __m512 tf =
            _mm512_fnmadd_ps(zf, _mm512_set1_ps(xs[m][g]), _mm512_cvtepi32_ps(isum[m][t]));
        acc[m][t] = _mm512_fmadd_ps(tf, _mm512_mul_ps(ws, _mm512_set1_ps(xd[m][g])), acc[m][t]);
      }
    }
  }
  const int64_t n = w.out_features;
  for (int m = 0; m < M; ++m) {
    for (int t = 0; t < T; ++t) {
      float* dst = job.p->out + (row0 + m) * n + (tile0 + t) * kIntTileRows;
      const __m512 v =
          job.p->accumulate ? _mm512_add_ps(_mm512_loadu_ps(dst), acc[m][t]) : acc[m][t];
      _mm512_storeu_ps(dst, v);
    }
  }
}

// vpdpbusd on AVX2 for u8 codes below 16: maddubs pairs (at most
// 2 * 15 * 127, no saturation), madd by `mul` sums them into int32 lanes.
TQ_TARGET_AVX2 inline __m256i DotNibbles(__m256i acc, __m256i codes, __m256i x, __m256i mul) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(codes, x), mul));
}

// M rows x one tile of 16 outputs (two 8-lane halves), AVX2. int8 codes
// are split into nibbles: code * q = 16 * (hi * q) + lo * q.
template <bool kInt4, int M>
TQ_TARGET_AVX2 void TilesAvx2(const IntJob& job, int64_t row0, int64_t tile) {
  const WeightView& w = job.p->w;
  const int64_t k = w.in_features, gs = w.group_size, groups = k / gs;
  constexpr int64_t ci = kInt4 ? 8 : 4;
  const int64_t chunks = k / ci, cpg = gs / ci;
  const uint8_t* tw = static_cast<const uint8_t*>(w.data) + tile * chunks * kChunkBytes;
  const __m256i low = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i sixteen = _mm256_set1_epi16(16);
  const __m256 mid = _mm256_set1_ps(kInt4 ? 8.0f : 128.0f);
  __m256 acc[M][2];
  for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i isum[M][2];
    for (int m = 0; m < M; ++m) isum[m][0] = isum[m][1] = _mm256_setzero_si256();
    for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) {
      for (int h = 0; h < 2; ++h) {
        const __m256i wv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tw + c * kChunkBytes + 32 * h));
        const __m256i lo = _mm256_and_si256(wv, low);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), low);
        for (int m = 0; m < M; ++m) {
          const int8_t* x = job.a->q.data() + (row0 + m) * k + c * ci;
          const __m256i x0 = _mm256_set1_epi32(Load4(x));
          if constexpr (kInt4) {
            isum[m][h] = DotNibbles(isum[m][h], lo, x0, ones);
            isum[m][h] = DotNibbles(isum[m][h], hi, _mm256_set1_epi32(Load4(x + 4)), ones);
          } else {
            isum[m][h] = DotNibbles(isum[m][h], lo, x0, ones);
            isum[m][h] = DotNibbles(isum[m][h], hi, x0, sixteen);
          }
        }
      }
    }
    const int64_t e = (tile * groups + g) * kIntTileRows;
    for (int h = 0; h < 2; ++h) {
      const __m256 ws =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales + e + 8 * h)));
      const __m256 zf = w.zeros ? _mm256_cvtph_ps(_mm_loadu_si128(
                                      reinterpret_cast<const __m128i*>(w.zeros + e + 8 * h)))
                                : mid;
      for (int m = 0; m < M; ++m) {
        const int64_t a = (row0 + m) * groups + g;
        const __m256 tf =
            _mm256_fnmadd_ps(zf, _mm256_set1_ps(job.a->sum[a]), _mm256_cvtepi32_ps(isum[m][h]));
        acc[m][h] = _mm256_fmadd_ps(tf, _mm256_mul_ps(ws, _mm256_set1_ps(job.a->d[a])), acc[m][h]);
      }
    }
  }
  const int64_t n = w.out_features;
  for (int m = 0; m < M; ++m) {
    for (int h = 0; h < 2; ++h) {
      float* dst = job.p->out + (row0 + m) * n + tile * kIntTileRows + 8 * h;
      const __m256 v =
          job.p->accumulate ? _mm256_add_ps(_mm256_loadu_ps(dst), acc[m][h]) : acc[m][h];
      _mm256_storeu_ps(dst, v);
    }
  }
}

// Rows [row_begin, row_end) x tiles [tb, te) with VNNI: blocks of 4 rows x
// 2 tiles (1 row x 2 tiles for a GEMV: 4 streams of codes and scales read
// DRAM faster than 8 on the Xeon of issue 22, int4 14.5 vs 13.7 GB/s), then
// the leftovers.
template <bool kInt4>
void RangeVnni(const IntJob& job, int64_t row_begin, int64_t row_end, int64_t tb, int64_t te) {
  if (row_end - row_begin == 1) {
    int64_t t = tb;
    for (; t + 2 <= te; t += 2) TilesVnni<kInt4, 1, 2>(job, row_begin, t);
    for (; t < te; ++t) TilesVnni<kInt4, 1, 1>(job, row_begin, t);
    return;
  }
  int64_t t = tb;
  for (; t < te; t += 2) {
    const bool pair = t + 2 <= te;
    int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) {
      if (pair) {
        TilesVnni<kInt4, 4, 2>(job, r, t);
      } else {
        TilesVnni<kInt4, 4, 1>(job, r, t);
      }
    }
    for (; r < row_end; ++r) {
      if (pair) {
        TilesVnni<kInt4, 1, 2>(job, r, t);
      } else {
        TilesVnni<kInt4, 1, 1>(job, r, t);
      }
    }
  }
}

template <bool kInt4>
void RangeAvx2(const IntJob& job, int64_t row_begin, int64_t row_end, int64_t tb, int64_t te) {
  for (int64_t t = tb; t < te; ++t) {
    int64_t r = row_begin;
    for (; r + 2 <= row_end; r += 2) TilesAvx2<kInt4, 2>(job, r, t);
    for (; r < row_end; ++r) TilesAvx2<kInt4, 1>(job, r, t);
  }
}

#endif  // TQ_INT_X86

void Range(IntIsa isa, const IntJob& job, int64_t row_begin, int64_t row_end, int64_t tb,
           int64_t te) {
#if TQ_INT_X86
  if (isa == IntIsa::kAvx512Vnni) {
    return job.int4 ? RangeVnni<true>(job, row_begin, row_end, tb, te)
                    : RangeVnni<false>(job, row_begin, row_end, tb, te);
  }
  if (isa == IntIsa::kAvx2) {
    return job.int4 ? RangeAvx2<true>(job, row_begin, row_end, tb, te)
                    : RangeAvx2<false>(job, row_begin, row_end, tb, te);
  }
#endif
  (void)isa;
  for (int64_t t = tb; t < te; ++t) TilesScalar(job, row_begin, row_end, t);
}

}  // namespace

bool IntIsaSupported(IntIsa isa) {
  switch (isa) {
    case IntIsa::kScalar:
      return true;
#if TQ_INT_X86
    case IntIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case IntIsa::kAvx512Vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
             __builtin_cpu_supports("avx512dq");
#endif
    default:
      return false;
  }
}

IntIsa BestIntIsa() {
  static const IntIsa best = IntIsaSupported(IntIsa::kAvx512Vnni) ? IntIsa::kAvx512Vnni
                             : IntIsaSupported(IntIsa::kAvx2)     ? IntIsa::kAvx2
                                                                  : IntIsa::kScalar;
  return best;
}

const char* IntIsaName(IntIsa isa) {
  switch (isa) {
    case IntIsa::kAvx512Vnni:
      return "avx512-vnni";
    case IntIsa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

void IntMatMul(const MatMulParams& p, ThreadPool& pool, IntIsa isa) {
  if (p.rows <= 0) return;
  const WeightView& w = p.w;
  const int64_t k = w.in_features, gs = w.group_size;
  // Reused across calls on the calling (engine) thread: activations only.
  thread_local QuantizedActs acts;
  acts.k = k;
  acts.groups = k / gs;
  acts.q.resize(static_cast<size_t>(p.rows) * k);
  acts.d.resize(static_cast<size_t>(p.rows) * acts.groups);
  acts.sum.resize(acts.d.size());
  QuantizedActs& a = acts;
  auto* quantize = &QuantizeRow;
#if TQ_INT_X86
  if (isa == IntIsa::kAvx512Vnni && gs % 16 == 0) quantize = &QuantizeRowAvx512;
#endif
  pool.ParallelFor(p.rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      quantize(p.x + r * k, k, gs, a.q.data() + r * k, a.d.data() + r * a.groups,
               a.sum.data() + r * a.groups);
    }
  });
  const IntJob job{&p, &a, LogicalWeightDtype(w.dtype) == WeightDtype::kInt4};
  const int64_t tiles = w.out_features / kIntTileRows;
  pool.ParallelFor(tiles, 4, [&](int64_t tb, int64_t te) {
    for (int64_t rb = 0; rb < p.rows; rb += kRowBlock) {
      Range(isa, job, rb, std::min<int64_t>(p.rows, rb + kRowBlock), tb, te);
    }
  });
}

}  // namespace tq::kernels::cpu
