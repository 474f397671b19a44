// What a TqLayerCodec points to (kernels/kv_layout.h), owned in one place for
// the CUDA tests and benchmarks, built as engine/kv/TqCodecState builds it for
// a model: a seeded rotation, Lloyd-Max codebooks for the sphere-coordinate
// density (docs/kv-cache.md), optional per-channel key statistics, and a RoPE
// cos/sin table for `positions` positions.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/kv/lloyd_max.h"
#include "kernels/kv_layout.h"
#include "kernels/tq/codec_buffer.h"
#include "kernels/tq/rotation.h"

namespace tq::cudatest {

/// Not copyable or movable: `codec` points into the members.
struct TqCodecParts {
  /// k_mean / k_scale: [kv_heads * head_dim] key statistics, or empty for
  /// none (the kernels then skip the normalization).
  TqCodecParts(kernels::KvDtype dtype, int32_t head_dim, int32_t positions, uint64_t rotation_seed,
               double rope_theta, std::vector<float> k_mean = {}, std::vector<float> k_scale = {})
      : rotation(head_dim, rotation_seed),
        kcb(SphereCoordinateCodebook(head_dim, 1 << kernels::TqKeyBits(dtype))),
        vcb(SphereCoordinateCodebook(head_dim, 1 << kernels::TqValueBits(dtype))),
        mean(std::move(k_mean)),
        scale(std::move(k_scale)) {
    const int32_t half = head_dim / 2;
    cos.resize(static_cast<size_t>(positions) * half);
    sin.resize(cos.size());
    for (int32_t p = 0; p < positions; ++p) {
      for (int32_t i = 0; i < half; ++i) {
        const double a = p * std::pow(rope_theta, -2.0 * i / head_dim);
        cos[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(a));
        sin[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(a));
      }
    }
    codec.rotation = &rotation;
    codec.k_centroids = kcb.centroids.data();
    codec.k_boundaries = kcb.boundaries.data();
    codec.v_centroids = vcb.centroids.data();
    codec.v_boundaries = vcb.boundaries.data();
    if (!mean.empty()) codec.k_mean = mean.data();
    if (!scale.empty()) codec.k_scale = scale.data();
    codec.rope_cos = cos.data();
    codec.rope_sin = sin.data();
    codec.rope_positions = positions;
  }
  /// The codec's arrays in `backend`'s memory, what a CUDA KvLayerView needs
  /// as tq_arrays (PagedKvCache makes them so for a model's cache).
  const kernels::TqCodecArrays* UploadTo(kernels::Backend* backend,
                                         const kernels::KvLayout& layout) {
    const kernels::TqLayerCodec* layers[] = {&codec};
    uploaded = kernels::TqCodecBuffer(backend, layers, layout);
    return uploaded.Layer(0);
  }
  TqCodecParts(const TqCodecParts&) = delete;
  TqCodecParts& operator=(const TqCodecParts&) = delete;

  kernels::Rotation rotation;
  ScalarCodebook kcb, vcb;
  std::vector<float> mean, scale, cos, sin;
  kernels::TqLayerCodec codec;
  kernels::TqCodecBuffer uploaded;  // UploadTo's
};

}  // namespace tq::cudatest
