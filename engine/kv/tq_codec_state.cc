#include "engine/kv/tq_codec_state.h"

#include <cmath>
#include <stdexcept>

namespace tq {

TqCodecState::TqCodecState(const ModelConfig& config, kernels::KvDtype dtype, int32_t max_positions,
                           std::vector<float> k_mean, std::vector<float> k_scale)
    : rotation_(config.head_dim, kRotationSeed),
      k_mean_(std::move(k_mean)),
      k_scale_(std::move(k_scale)) {
  const int32_t key_bits = kernels::TqKeyBits(dtype);
  const int32_t value_bits = kernels::TqValueBits(dtype);
  if (key_bits == 0) throw std::invalid_argument("TqCodecState: not a tq KV dtype");
  const size_t stats =
      static_cast<size_t>(config.num_hidden_layers) * config.num_key_value_heads * config.head_dim;
  if ((!k_mean_.empty() && k_mean_.size() != stats) ||
      (!k_scale_.empty() && k_scale_.size() != stats)) {
    throw std::invalid_argument("TqCodecState: key statistics do not match the model");
  }
  key_codebook_ = SphereCoordinateCodebook(config.head_dim, 1 << key_bits);
  value_codebook_ = SphereCoordinateCodebook(config.head_dim, 1 << value_bits);

  const std::vector<float> inv_freq = config.RopeInvFreq();
  const size_t half = inv_freq.size();
  rope_cos_.resize(static_cast<size_t>(max_positions) * half);
  rope_sin_.resize(rope_cos_.size());
  for (int32_t pos = 0; pos < max_positions; ++pos) {
    for (size_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * inv_freq[i];
      rope_cos_[pos * half + i] = static_cast<float>(std::cos(angle));
      rope_sin_[pos * half + i] = static_cast<float>(std::sin(angle));
    }
  }

  const size_t per_layer = static_cast<size_t>(config.num_key_value_heads) * config.head_dim;
  layers_.resize(config.num_hidden_layers);
  for (int32_t l = 0; l < config.num_hidden_layers; ++l) {
    kernels::TqLayerCodec& c = layers_[l];
    c.rotation = &rotation_;
    c.k_centroids = key_codebook_.centroids.data();
    c.k_boundaries = key_codebook_.boundaries.data();
    c.v_centroids = value_codebook_.centroids.data();
    c.v_boundaries = value_codebook_.boundaries.data();
    c.k_mean = k_mean_.empty() ? nullptr : k_mean_.data() + l * per_layer;
    c.k_scale = k_scale_.empty() ? nullptr : k_scale_.data() + l * per_layer;
    c.rope_cos = rope_cos_.data();
    c.rope_sin = rope_sin_.data();
    c.rope_positions = max_positions;
  }
}

}  // namespace tq
