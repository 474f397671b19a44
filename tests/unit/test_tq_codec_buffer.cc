// kernels::TqCodecBuffer and PagedKvCache's upload of the tq codec: one copy
// per cache on a device backend, holding exactly the host codec's values
// (TqCodecState's arrays are the reference), and no copy on a host backend.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "engine/kv/kv_cache.h"
#include "engine/kv/tq_codec_state.h"
#include "engine/model/model_config.h"
#include "kernels/backend.h"
#include "kernels/tq/codec_buffer.h"
#include "kernels/tq/rotation.h"
#include "tests/unit/forwarding_backend.h"

namespace tq {
namespace {

using kernels::KvDtype;

// The CPU backend reporting device memory, so that the cache uploads; counts
// the host->device copies and their bytes.
class CountingDeviceBackend final : public ForwardingBackend {
 public:
  kernels::BackendCapabilities Capabilities() const override {
    kernels::BackendCapabilities caps = ForwardingBackend::Capabilities();
    caps.device_memory = true;
    return caps;
  }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    ++copies;
    copied_bytes += bytes;
    ForwardingBackend::CopyToDevice(dst, src, bytes);
  }

  int copies = 0;
  size_t copied_bytes = 0;
};

constexpr int32_t kLayers = 2, kKvHeads = 2, kPositions = 10;

ModelConfig Config(int32_t head_dim) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = head_dim * kKvHeads * 2;
  c.intermediate_size = 64;
  c.num_hidden_layers = kLayers;
  c.num_attention_heads = kKvHeads * 2;
  c.num_key_value_heads = kKvHeads;
  c.head_dim = head_dim;
  c.vocab_size = 32;
  c.max_position_embeddings = 4096;
  c.rope_theta = 10000.0;
  return c;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::shared_ptr<const TqCodecState> State(int32_t head_dim, bool stats) {
  const size_t n = static_cast<size_t>(kLayers) * kKvHeads * head_dim;
  return std::make_shared<TqCodecState>(Config(head_dim), KvDtype::kTq3, kPositions,
                                        stats ? Random(n, 1) : std::vector<float>{},
                                        stats ? Random(n, 2) : std::vector<float>{});
}

kernels::KvLayout Layout(int32_t head_dim) {
  return {KvDtype::kTq3, 4, 16, kKvHeads, head_dim};
}

void ExpectSameFloats(const float* device, const float* host, size_t n, const char* what) {
  ASSERT_NE(device, nullptr) << what;
  ASSERT_NE(host, nullptr) << what;
  EXPECT_NE(device, host) << what << ": not copied";
  EXPECT_EQ(std::memcmp(device, host, n * sizeof(float)), 0) << what;
}

TEST(TqCodecBuffer, DeviceCacheUploadsEachDistinctArrayOnceInOneCopy) {
  CountingDeviceBackend backend;
  const auto state = State(16, true);
  PagedKvCache cache(&backend, kLayers, Layout(16), state);
  EXPECT_EQ(backend.copies, 1);
  // tq3: 3-bit keys and values. Shared by the layers: 16 signs, 8 + 7 key and
  // 8 + 7 value codebook floats, a 10 x 8 cos and sin table; per layer 2 x 16
  // means and scales.
  const size_t floats = 16 + 15 + 15 + 2 * 10 * 8 + kLayers * 2 * (kKvHeads * 16);
  EXPECT_EQ(floats, 334u);
  EXPECT_EQ(backend.copied_bytes, floats * sizeof(float));

  const kernels::TqCodecArrays* first = cache.Layer(0).tq_arrays;
  for (int32_t l = 0; l < kLayers; ++l) {
    SCOPED_TRACE(l);
    const kernels::KvLayerView view = cache.Layer(l);
    const kernels::TqLayerCodec& host = *view.tq;
    const kernels::TqCodecArrays& dev = *view.tq_arrays;
    ExpectSameFloats(dev.signs, state->rotation().signs().data(), 16, "signs");
    ExpectSameFloats(dev.k_centroids, host.k_centroids, 8, "k_centroids");
    ExpectSameFloats(dev.k_boundaries, host.k_boundaries, 7, "k_boundaries");
    ExpectSameFloats(dev.v_centroids, host.v_centroids, 8, "v_centroids");
    ExpectSameFloats(dev.v_boundaries, host.v_boundaries, 7, "v_boundaries");
    ExpectSameFloats(dev.k_mean, host.k_mean, kKvHeads * 16, "k_mean");
    ExpectSameFloats(dev.k_scale, host.k_scale, kKvHeads * 16, "k_scale");
    ExpectSameFloats(dev.rope_cos, host.rope_cos, kPositions * 8, "rope_cos");
    ExpectSameFloats(dev.rope_sin, host.rope_sin, kPositions * 8, "rope_sin");
    EXPECT_EQ(dev.rope_positions, kPositions);
    // One copy of what the layers share; each layer's own statistics.
    EXPECT_EQ(dev.signs, first->signs);
    EXPECT_EQ(dev.rope_cos, first->rope_cos);
    if (l > 0) {
      EXPECT_NE(dev.k_mean, first->k_mean);
    }
  }
}

TEST(TqCodecBuffer, HostBackendReadsTheHostCodecWithoutACopy) {
  const std::unique_ptr<kernels::Backend> cpu = kernels::CreateCpuBackend(1);
  const auto state = State(16, true);
  PagedKvCache cache(cpu.get(), kLayers, Layout(16), state);
  const kernels::KvLayerView view = cache.Layer(1);
  EXPECT_EQ(view.tq_arrays->signs, state->rotation().signs().data());
  EXPECT_EQ(view.tq_arrays->k_mean, view.tq->k_mean);
  EXPECT_EQ(view.tq_arrays->rope_sin, view.tq->rope_sin);
}

TEST(TqCodecBuffer, AbsentStatisticsAndADenseRotationStayNull) {
  CountingDeviceBackend backend;
  PagedKvCache no_stats(&backend, kLayers, Layout(16), State(16, false));
  EXPECT_EQ(no_stats.Layer(1).tq_arrays->k_mean, nullptr);
  EXPECT_EQ(no_stats.Layer(1).tq_arrays->k_scale, nullptr);
  EXPECT_EQ(backend.copied_bytes, (16 + 15 + 15 + 2 * 10 * 8) * sizeof(float));
  // head_dim 12 is not a power of two: a dense rotation, no signs (the CUDA
  // backend refuses it, the CPU reads the rotation itself).
  PagedKvCache dense(&backend, kLayers, Layout(12), State(12, true));
  EXPECT_FALSE(dense.Layer(0).tq->rotation->is_hadamard());
  EXPECT_EQ(dense.Layer(0).tq_arrays->signs, nullptr);
  EXPECT_NE(dense.Layer(0).tq_arrays->k_centroids, nullptr);
}

TEST(TqCodecBuffer, RefusesANonTqLayoutAndAMissingCodec) {
  CountingDeviceBackend backend;
  const kernels::TqLayerCodec* none[] = {nullptr};
  EXPECT_THROW(kernels::TqCodecBuffer(&backend, none, Layout(16)), std::invalid_argument);
  const auto state = State(16, true);
  const kernels::TqLayerCodec* one[] = {state->Layer(0)};
  kernels::KvLayout fp16 = Layout(16);
  fp16.dtype = KvDtype::kF16;
  EXPECT_THROW(kernels::TqCodecBuffer(&backend, one, fp16), std::invalid_argument);
  EXPECT_EQ(backend.copies, 0);
}

}  // namespace
}  // namespace tq
