#include "kernels/tq/codec_buffer.h"

#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "kernels/tq/rotation.h"

namespace tq::kernels {
namespace {

// One array of a layer's codec: where its pointer goes, the host array, its length.
struct CodecPart {
  const float** field;
  const float* host;
  size_t count;
};

std::vector<CodecPart> Parts(const TqLayerCodec& c, const KvLayout& l, TqCodecArrays* out) {
  const size_t d = static_cast<size_t>(l.head_dim);
  const size_t stats = static_cast<size_t>(l.num_kv_heads) * d;
  const size_t kl = size_t{1} << TqKeyBits(l.dtype);
  const size_t vl = size_t{1} << TqValueBits(l.dtype);
  const size_t rope = static_cast<size_t>(c.rope_positions) * (d / 2);
  const std::vector<float>& signs = c.rotation->signs();  // empty: dense rotation
  return {{&out->signs, signs.empty() ? nullptr : signs.data(), d},
          {&out->k_centroids, c.k_centroids, kl},
          {&out->k_boundaries, c.k_boundaries, kl - 1},
          {&out->v_centroids, c.v_centroids, vl},
          {&out->v_boundaries, c.v_boundaries, vl - 1},
          {&out->k_mean, c.k_mean, stats},
          {&out->k_scale, c.k_scale, stats},
          {&out->rope_cos, c.rope_cos, rope},
          {&out->rope_sin, c.rope_sin, rope}};
}

}  // namespace

TqCodecBuffer::TqCodecBuffer(Backend* backend, std::span<const TqLayerCodec* const> layers,
                             const KvLayout& layout)
    : layers_(layers.size()) {
  if (!KvStoresPreRopeKeys(layout.dtype)) {
    throw std::invalid_argument("TqCodecBuffer: not a tq KV dtype");
  }
  const bool upload = backend->Capabilities().device_memory;
  std::vector<std::vector<CodecPart>> parts;
  for (size_t l = 0; l < layers.size(); ++l) {
    if (!layers[l] || !layers[l]->rotation) {
      throw std::invalid_argument("TqCodecBuffer: layer " + std::to_string(l) + " has no codec");
    }
    layers_[l].rope_positions = layers[l]->rope_positions;
    parts.push_back(Parts(*layers[l], layout, &layers_[l]));
  }
  if (!upload) {
    for (auto& layer : parts) {
      for (const CodecPart& p : layer) *p.field = p.host;
    }
    return;
  }
  // Each distinct host array once (the layers share the rotation, codebooks
  // and RoPE table), at float offsets into one staging copy.
  std::unordered_map<const float*, size_t> offset_of;
  std::vector<float> staging;
  for (const auto& layer : parts) {
    for (const CodecPart& p : layer) {
      if (!p.host || p.count == 0 || offset_of.count(p.host)) continue;
      offset_of.emplace(p.host, staging.size());
      staging.insert(staging.end(), p.host, p.host + p.count);
    }
  }
  buffer_ = BackendBuffer(backend, staging.size() * sizeof(float));
  backend->CopyToDevice(buffer_.data(), staging.data(), staging.size() * sizeof(float));
  const auto* base = buffer_.as<float>();
  for (auto& layer : parts) {
    for (const CodecPart& p : layer) {
      const auto it = offset_of.find(p.host);
      *p.field = it == offset_of.end() ? nullptr : base + it->second;
    }
  }
}

}  // namespace tq::kernels
