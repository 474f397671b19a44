// Start-up state of the tq3/tq4 KV formats, shared by all layers of a cache.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/kv/lloyd_max.h"
#include "engine/model/model_config.h"
#include "kernels/kv_layout.h"
#include "kernels/tq/rotation.h"

namespace tq {

/// Owns what the tq formats need besides the codes (DESIGN.md "KV cache"):
/// the seeded rotation for head_dim, the Lloyd–Max codebooks for the exact
/// sphere-coordinate density at head_dim (keys at TqKeyBits, values at
/// TqValueBits), the per-layer pre-RoPE key statistics, and a RoPE cos/sin
/// table for the reconstructed keys. Immutable after construction; shared
/// read-only by the engine thread and the CPU compute threads.
class TqCodecState {
 public:
  /// Seed of the rotation; fixed so that a saved cache and calibration stay valid.
  static constexpr uint64_t kRotationSeed = 0x7451'5151'2026ull;

  /// k_mean / k_scale: [num_layers][num_kv_heads][head_dim] pre-RoPE key
  /// statistics, or empty for no normalization. Throws std::invalid_argument
  /// on a non-tq dtype or mismatched sizes.
  TqCodecState(const ModelConfig& config, kernels::KvDtype dtype, int32_t max_positions,
               std::vector<float> k_mean, std::vector<float> k_scale);

  /// The codec of one layer (pointers into this object).
  const kernels::TqLayerCodec* Layer(int32_t layer) const { return &layers_[layer]; }
  const ScalarCodebook& key_codebook() const { return key_codebook_; }
  const ScalarCodebook& value_codebook() const { return value_codebook_; }
  const kernels::Rotation& rotation() const { return rotation_; }

 private:
  kernels::Rotation rotation_;
  ScalarCodebook key_codebook_;
  ScalarCodebook value_codebook_;
  std::vector<float> k_mean_, k_scale_;
  std::vector<float> rope_cos_, rope_sin_;
  std::vector<kernels::TqLayerCodec> layers_;
};

}  // namespace tq
