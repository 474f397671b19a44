// Repacking of int8 / int4 weights into the tiled layout of the integer
// matmul (WeightDtype::kInt8Tiles / kInt4Tiles, kernels/op_params.h), and
// decoding one row of it back to fp32 (for the fallback kernels and tests).
// Codes, scales and zeros keep their bytes: only their order changes, so
// memory accounting is the same as for the row-major formats.
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/half.h"

namespace tq::kernels::cpu {
namespace {

constexpr int64_t kTileBytes = 64;  // one chunk of one tile: 16 rows x 4 bytes

int64_t CodeBytes(const WeightView& w) {
  const bool int4 = LogicalWeightDtype(w.dtype) == WeightDtype::kInt4;
  return int64_t{w.out_features} * (int4 ? w.in_features / 2 : w.in_features);
}

int64_t Groups(const WeightView& w) {
  return w.in_features / w.group_size;
}

// Inputs per 4-byte lane of a chunk: 4 int8 codes or 8 int4 codes.
int64_t ChunkInputs(WeightDtype logical) {
  return logical == WeightDtype::kInt4 ? 8 : 4;
}

// Row-major code of w[o, i] (a kInt8 / kInt4 view).
uint8_t RowMajorCode(const WeightView& w, int64_t o, int64_t i) {
  const uint8_t* data = static_cast<const uint8_t*>(w.data);
  if (w.dtype == WeightDtype::kInt8) return data[o * w.in_features + i];
  const uint8_t b = data[(o * w.in_features + i) / 2];
  return i % 2 == 0 ? (b & 0x0f) : (b >> 4);
}

}  // namespace

bool CanTileInt(const WeightView& w) {
  if (w.dtype != WeightDtype::kInt8 && w.dtype != WeightDtype::kInt4) return false;
  return w.out_features % kIntTileRows == 0 && w.group_size > 0 &&
         w.group_size <= kIntTileMaxGroup && w.group_size % ChunkInputs(w.dtype) == 0 &&
         w.in_features % w.group_size == 0;
}

size_t TiledIntBytes(const WeightView& w) {
  const int64_t groups = int64_t{w.out_features} * Groups(w);
  return static_cast<size_t>(CodeBytes(w) + groups * 2 * (w.zeros ? 2 : 1));
}

WeightView TileInt(const WeightView& w, void* storage) {
  const int64_t k = w.in_features;
  const int64_t chunk_inputs = ChunkInputs(w.dtype);
  const int64_t chunks = k / chunk_inputs;
  const int64_t tiles = w.out_features / kIntTileRows;
  const int64_t groups = Groups(w);
  uint8_t* codes = static_cast<uint8_t*>(storage);
  for (int64_t t = 0; t < tiles; ++t) {
    for (int64_t c = 0; c < chunks; ++c) {
      uint8_t* dst = codes + (t * chunks + c) * kTileBytes;
      for (int64_t r = 0; r < kIntTileRows; ++r) {
        const int64_t o = t * kIntTileRows + r;
        for (int64_t j = 0; j < 4; ++j) {
          if (w.dtype == WeightDtype::kInt8) {
            dst[4 * r + j] = RowMajorCode(w, o, 4 * c + j);
          } else {
            dst[4 * r + j] = static_cast<uint8_t>(RowMajorCode(w, o, 8 * c + j) |
                                                  RowMajorCode(w, o, 8 * c + 4 + j) << 4);
          }
        }
      }
    }
  }
  // Scales then zeros, [tiles, groups, 16] each, after the codes.
  uint16_t* scales = reinterpret_cast<uint16_t*>(codes + CodeBytes(w));
  uint16_t* zeros = w.zeros ? scales + int64_t{w.out_features} * groups : nullptr;
  for (int64_t o = 0; o < w.out_features; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t dst = ((o / kIntTileRows) * groups + g) * kIntTileRows + o % kIntTileRows;
      scales[dst] = w.scales[o * groups + g];
      if (zeros) zeros[dst] = w.zeros[o * groups + g];
    }
  }
  WeightView tiled = w;
  tiled.data = storage;
  tiled.dtype = w.dtype == WeightDtype::kInt8 ? WeightDtype::kInt8Tiles : WeightDtype::kInt4Tiles;
  tiled.scales = scales;
  tiled.zeros = zeros;
  return tiled;
}

void DecodeTiledIntRow(const WeightView& w, int64_t o, float* dst) {
  const WeightDtype logical = LogicalWeightDtype(w.dtype);
  const int64_t k = w.in_features;
  const int64_t chunk_inputs = ChunkInputs(logical);
  const int64_t chunks = k / chunk_inputs;
  const int64_t groups = Groups(w);
  const int64_t t = o / kIntTileRows;
  const int64_t r = o % kIntTileRows;
  const uint8_t* codes = static_cast<const uint8_t*>(w.data);
  const float midpoint = logical == WeightDtype::kInt4 ? 8.0f : 128.0f;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t c = i / chunk_inputs;
    const int64_t j = i % chunk_inputs;
    const uint8_t b = codes[(t * chunks + c) * kTileBytes + 4 * r + j % 4];
    const uint8_t code = logical == WeightDtype::kInt8 ? b : (j < 4 ? (b & 0x0f) : (b >> 4));
    const int64_t q = (t * groups + i / w.group_size) * kIntTileRows + r;
    const float scale = HalfToFloat(w.scales[q]);
    const float zero = w.zeros ? HalfToFloat(w.zeros[q]) : midpoint;
    dst[i] = (static_cast<float>(code) - zero) * scale;
  }
}

}  // namespace tq::kernels::cpu
