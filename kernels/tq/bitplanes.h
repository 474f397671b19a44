// Bit-plane packing of the tq3/tq4 KV cache codes (DESIGN.md "KV cache", Packing).
//
// A head vector of head_dim d has one b-bit index per coordinate (b = 3 for tq3,
// 4 for tq4 keys; any 1 <= b <= 8 works). The indices are stored as bit-planes so
// that no field straddles a 32-bit word and unpacking is shifts and masks only:
//
//   d = 32*k + r  (k full runs of 32 coordinates, a tail of r < 32 coordinates)
//
//   run t (t < k): b little-endian 32-bit words, 4*b bytes at byte offset 4*b*t;
//                  word p (0 <= p < b) holds bit p of each index:
//                  bit j of word p = bit p of index[32*t + j].
//   tail (r > 0):  b planes of T = ceil(r/8) bytes each, at byte offset 4*b*k;
//                  plane p is bytes [4*b*k + p*T, 4*b*k + (p+1)*T) and
//                  bit (j % 8) of byte (j / 8) of plane p = bit p of index[32*k + j];
//                  unused high bits of the last tail byte are written as 0.
//
//   PlaneBytes(d, b) = 4*b*floor(d/32) + b*ceil((d mod 32)/8)
//   e.g. b = 3: d=8 -> 3, d=24 -> 9, d=64 -> 24, d=80 -> 30, d=96 -> 36, d=128 -> 48.
//
// A full-run word read as little-endian bytes is the same as the tail rule with
// T = 4, so both cases read "bit j of the plane" at byte j/8, bit j%8. Nothing
// beyond PlaneBytes(d, b) is read or written; no alignment is assumed (words go
// through memcpy, never through reinterpret casts).
//
// Header-only and STL-free in the hot functions (plain loops, shifts, masks) so the
// CUDA kernels can include it; TQ_BITPLANES_HD marks them __host__ __device__ there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TQ_BITPLANES_HD __host__ __device__
#else
#define TQ_BITPLANES_HD
#include <bit>
static_assert(std::endian::native == std::endian::little,
              "bit-plane words are stored little-endian via memcpy");
#endif

namespace tq::kernels {

/// Bytes of one head vector's packed indices: 4*bits per full run of 32
/// coordinates plus bits*ceil(r/8) for a tail of r = head_dim % 32 coordinates.
TQ_BITPLANES_HD inline size_t PlaneBytes(int32_t head_dim, int32_t bits) {
  const size_t runs = static_cast<size_t>(head_dim) / 32;
  const size_t tail = static_cast<size_t>(head_dim) % 32;
  return runs * 4u * static_cast<size_t>(bits) + static_cast<size_t>(bits) * ((tail + 7) / 8);
}

namespace bitplanes_detail {

TQ_BITPLANES_HD inline uint32_t LoadWord(const uint8_t* p) {
  uint32_t w;
#if defined(__CUDACC__)
  memcpy(&w, p, 4);
#else
  std::memcpy(&w, p, 4);
#endif
  return w;
}

TQ_BITPLANES_HD inline void StoreWord(uint8_t* p, uint32_t w) {
#if defined(__CUDACC__)
  memcpy(p, &w, 4);
#else
  std::memcpy(p, &w, 4);
#endif
}

}  // namespace bitplanes_detail

/// Packs head_dim indices (one per byte; only the low `bits` bits are used) into
/// PlaneBytes(head_dim, bits) bytes at `out`. Writes exactly those bytes.
TQ_BITPLANES_HD inline void PackPlanes(const uint8_t* indices, int32_t head_dim, int32_t bits,
                                       uint8_t* out) {
  const int32_t runs = head_dim / 32;
  for (int32_t t = 0; t < runs; ++t) {
    const uint8_t* idx = indices + 32 * t;
    uint8_t* dst = out + 4 * bits * t;
    for (int32_t p = 0; p < bits; ++p) {
      uint32_t w = 0;
      for (int32_t j = 0; j < 32; ++j) w |= static_cast<uint32_t>((idx[j] >> p) & 1u) << j;
      bitplanes_detail::StoreWord(dst + 4 * p, w);
    }
  }
  const int32_t r = head_dim - 32 * runs;
  if (r == 0) return;
  const uint8_t* idx = indices + 32 * runs;
  const int32_t tail_bytes = (r + 7) / 8;
  uint8_t* dst = out + 4 * bits * runs;
  for (int32_t p = 0; p < bits; ++p) {
    for (int32_t byte = 0; byte < tail_bytes; ++byte) {
      uint32_t v = 0;
      const int32_t n = (r - 8 * byte) < 8 ? (r - 8 * byte) : 8;
      for (int32_t j = 0; j < n; ++j)
        v |= static_cast<uint32_t>((idx[8 * byte + j] >> p) & 1u) << j;
      dst[p * tail_bytes + byte] = static_cast<uint8_t>(v);
    }
  }
}

/// Index of coordinate i (0 <= i < head_dim) from packed planes.
TQ_BITPLANES_HD inline uint32_t UnpackIndex(const uint8_t* planes, int32_t head_dim, int32_t bits,
                                            int32_t i) {
  const int32_t runs = head_dim / 32;
  const int32_t t = i >> 5;
  uint32_t v = 0;
  if (t < runs) {
    const uint8_t* src = planes + 4 * bits * t;
    const int32_t j = i & 31;
    for (int32_t p = 0; p < bits; ++p)
      v |= ((bitplanes_detail::LoadWord(src + 4 * p) >> j) & 1u) << p;
    return v;
  }
  const int32_t r = head_dim - 32 * runs;
  const int32_t tail_bytes = (r + 7) / 8;
  const int32_t j = i - 32 * runs;
  const uint8_t* src = planes + 4 * bits * runs + (j >> 3);
  for (int32_t p = 0; p < bits; ++p)
    v |= ((static_cast<uint32_t>(src[p * tail_bytes]) >> (j & 7)) & 1u) << p;
  return v;
}

/// Unpacks all head_dim indices (one per byte) from packed planes.
TQ_BITPLANES_HD inline void UnpackPlanes(const uint8_t* planes, int32_t head_dim, int32_t bits,
                                         uint8_t* indices) {
  const int32_t runs = head_dim / 32;
  for (int32_t t = 0; t < runs; ++t) {
    const uint8_t* src = planes + 4 * bits * t;
    uint8_t* idx = indices + 32 * t;
    for (int32_t j = 0; j < 32; ++j) idx[j] = 0;
    for (int32_t p = 0; p < bits; ++p) {
      const uint32_t w = bitplanes_detail::LoadWord(src + 4 * p);
      for (int32_t j = 0; j < 32; ++j)
        idx[j] = static_cast<uint8_t>(idx[j] | (((w >> j) & 1u) << p));
    }
  }
  const int32_t r = head_dim - 32 * runs;
  if (r == 0) return;
  const int32_t tail_bytes = (r + 7) / 8;
  const uint8_t* src = planes + 4 * bits * runs;
  uint8_t* idx = indices + 32 * runs;
  for (int32_t j = 0; j < r; ++j) {
    uint32_t v = 0;
    for (int32_t p = 0; p < bits; ++p)
      v |= ((static_cast<uint32_t>(src[p * tail_bytes + (j >> 3)]) >> (j & 7)) & 1u) << p;
    idx[j] = static_cast<uint8_t>(v);
  }
}

}  // namespace tq::kernels
