// Stands in for the CUDA backend in tests/cuda/test_cuda_kv.cc and
// test_cuda_plan.cc when they are built by tests/cuda/emulate/run.sh: every
// op runs on the CPU backend except PagedAttention, which runs the real
// kernels/cuda/paged_attention.cu and paged_prefill.cu (decode, prefill
// tiles, split-K merge, host dispatch) under the emulation of emu_prelude.h,
// on host memory. The tests then compare those kernels with the CPU backend.
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_info.h"
#include "kernels/op_checks.h"
#include "kernels/tq/rotation.h"

namespace tq::kernels {
namespace {

class EmulatedAttentionBackend final : public Backend {
 public:
  EmulatedAttentionBackend() : cpu_(CreateCpuBackend(1)) {}
  std::string_view Name() const override { return "cuda"; }
  void* Allocate(size_t bytes) override { return cpu_->Allocate(bytes); }
  void Free(void* ptr) override { cpu_->Free(ptr); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    cpu_->CopyToDevice(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    cpu_->CopyToHost(dst, src, bytes);
  }
  void Embedding(const EmbeddingParams& p) override { cpu_->Embedding(p); }
  void RmsNorm(const RmsNormParams& p) override { cpu_->RmsNorm(p); }
  void MatMul(const MatMulParams& p) override { cpu_->MatMul(p); }
  void Rope(const RopeParams& p) override { cpu_->Rope(p); }
  void SiluMul(const SiluMulParams& p) override { cpu_->SiluMul(p); }
  void KvWrite(const KvWriteParams& p) override { cpu_->KvWrite(p); }

  void PagedAttention(const PagedAttentionParams& p) override {
    CheckPagedAttention("cuda", p);
    cuda::DeviceTqCodec codec;
    const TqLayerCodec* c = p.cache.tq;
    if (KvStoresPreRopeKeys(p.cache.layout.dtype)) {
      codec = {c->rotation->signs().data(),
               c->k_centroids,
               c->k_boundaries,
               c->v_centroids,
               c->v_boundaries,
               c->k_mean,
               c->k_scale,
               c->rope_cos,
               c->rope_sin,
               c->rope_positions};
    }
    const cuda::AttentionBatchLayout layout = cuda::PlanAttentionBatch(p);
    const cuda::AttentionPlan plan = cuda::PlanAttention(p, kSms, layout);
    std::vector<float> workspace(plan.WorkspaceFloats(p) + 1);
    std::vector<int32_t> flat(layout.tiles);
    flat.insert(flat.end(), layout.decode.begin(), layout.decode.end());
    cuda::LaunchPagedAttention(p, c ? &codec : nullptr, plan, workspace.data(), nullptr, layout,
                               flat.empty() ? nullptr : flat.data());
  }

 private:
  // Few SMs, so that small test batches split the context too.
  static constexpr int32_t kSms = 2;
  std::unique_ptr<Backend> cpu_;
};

}  // namespace

namespace cuda {
int DeviceCount(std::string*) {
  return 1;
}
}  // namespace cuda

std::unique_ptr<Backend> CreateCudaBackend(int) {
  return std::make_unique<EmulatedAttentionBackend>();
}

}  // namespace tq::kernels
