// Stands in for the CUDA backend in tests/cuda/test_cuda_kv.cc,
// test_cuda_ops.cc and test_cuda_plan.cc when they are built by
// tests/cuda/emulate/run.sh: KvWrite (kv_write.cu), PagedAttention
// (paged_attention.cu, paged_prefill.cu: decode, prefill tiles, split-K
// merge, host dispatch), Embedding / RmsNorm / Rope / SiluMul
// (elementwise.cu) and the int8/int4 MatMul (quant_gemm.cu between the
// elementwise fp16 conversions, as cuda_backend.cu does) run the real kernels
// under the emulation of emu_prelude.h, on host memory; the dense MatMul
// (cuBLAS on the GPU) runs on the CPU backend. The tests then compare those
// kernels with the CPU backend.
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/quant_gemm.h"
#include "kernels/half.h"
#include "kernels/op_checks.h"
#include "kernels/tq/rotation.h"

namespace tq::kernels {
namespace {

class EmulatedAttentionBackend final : public Backend {
 public:
  EmulatedAttentionBackend() : cpu_(CreateCpuBackend(1)) {}
  std::string_view Name() const override { return "cuda"; }
  // The CUDA kernels' formats; its memory is the host's and it has no graphs.
  BackendCapabilities Capabilities() const override {
    BackendCapabilities caps;
    caps.kv_dtypes = CudaKvDtypes();
    return caps;
  }
  void* Allocate(size_t bytes) override { return cpu_->Allocate(bytes); }
  void Free(void* ptr) override { cpu_->Free(ptr); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    cpu_->CopyToDevice(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    cpu_->CopyToHost(dst, src, bytes);
  }
  void Embedding(const EmbeddingParams& p) override {
    CheckEmbedding("cuda", p);
    cuda::LaunchEmbedding(p, nullptr);
  }
  void RmsNorm(const RmsNormParams& p) override {
    CheckRmsNorm("cuda", p);
    cuda::LaunchRmsNorm(p, nullptr);
  }
  void Rope(const RopeParams& p) override {
    CheckRope("cuda", p);
    cuda::LaunchRope(p, nullptr);
  }
  void SiluMul(const SiluMulParams& p) override {
    CheckSiluMul("cuda", p);
    cuda::LaunchSiluMul(p, nullptr);
  }

  void MatMul(const MatMulParams& p) override {
    CheckMatMul("cuda", p);
    MatMulParams q = p;
    q.bias = nullptr;
    MatMulNoBias(q);
    if (p.bias) cuda::LaunchAddBias(p.out, p.bias, p.rows, p.w.out_features, nullptr);
  }

  // int8/int4: fp16 activations, the weight-only GEMM, fp16 result widened
  // (or added) into the fp32 output, as CudaBackend::QuantMatMul.
  void MatMulNoBias(const MatMulParams& p) {
    const WeightView& w = p.w;
    if (w.dtype == WeightDtype::kF16 || w.dtype == WeightDtype::kBF16) {
      DenseHalfMatMul(p);
      return;
    }
    if (w.dtype != WeightDtype::kInt8 && w.dtype != WeightDtype::kInt4) {
      cpu_->MatMul(p);
      return;
    }
    std::vector<uint16_t> a16(static_cast<size_t>(p.rows) * w.in_features);
    std::vector<uint16_t> out16(static_cast<size_t>(p.rows) * w.out_features);
    cuda::LaunchToHalf(p.x, a16.data(), static_cast<int64_t>(a16.size()), false, nullptr);
    cuda::QuantGemmParams q;
    q.a = a16.data();
    q.weight = static_cast<const uint8_t*>(w.data);
    q.scales = w.scales;
    q.zeros = w.zeros;
    q.out = out16.data();
    q.m = p.rows;
    q.n = w.out_features;
    q.k = w.in_features;
    q.group_size = w.group_size;
    q.dtype = w.dtype;
    if (cuda::QuantGemm(q, nullptr) != cudaSuccess) throw std::runtime_error("QuantGemm failed");
    cuda::LaunchFromHalf(out16.data(), p.out, static_cast<int64_t>(out16.size()), p.accumulate,
                         nullptr);
  }

  void KvWrite(const KvWriteParams& p) override {
    CheckKvWrite("cuda", p);
    cuda::LaunchKvWrite(p, TqArrays(p.cache), nullptr);
  }

  void PagedAttention(const PagedAttentionParams& p) override {
    CheckPagedAttention("cuda", p);
    const TqCodecArrays* tq = TqArrays(p.cache);
    const cuda::AttentionBatchLayout layout = cuda::PlanAttentionBatch(p);
    const cuda::AttentionPlan plan = cuda::PlanAttention(p, kSms, layout);
    std::vector<float> workspace(plan.WorkspaceFloats(p) + 1);
    std::vector<int32_t> flat(layout.tiles);
    flat.insert(flat.end(), layout.decode.begin(), layout.decode.end());
    cuda::LaunchPagedAttention(p, tq, plan, workspace.data(), nullptr, layout,
                               flat.empty() ? nullptr : flat.data());
  }

 private:
  // Stands in for cuBLAS on 16-bit weights: the activations rounded to the
  // weight's format by elementwise.cu's ToHalf kernel (as CudaBackend::MatMul
  // does before cublasGemmEx), then the CPU backend's fp32 matmul.
  void DenseHalfMatMul(const MatMulParams& p) {
    const bool bf16 = p.w.dtype == WeightDtype::kBF16;
    const size_t n = static_cast<size_t>(p.rows) * p.w.in_features;
    std::vector<uint16_t> x16(n);
    cuda::LaunchToHalf(p.x, x16.data(), static_cast<int64_t>(n), bf16, nullptr);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = bf16 ? Bf16ToFloat(x16[i]) : HalfToFloat(x16[i]);
    MatMulParams q = p;
    q.x = x.data();
    cpu_->MatMul(q);
  }

  // The layer's tq codec as the kernels read it (the cache's arrays, as the
  // CUDA backend requires them); null for the other formats.
  static const TqCodecArrays* TqArrays(const KvLayerView& cache) {
    if (!KvStoresPreRopeKeys(cache.layout.dtype)) return nullptr;
    if (!cache.tq_arrays) throw std::invalid_argument("emulated cuda: cache.tq_arrays not set");
    return cache.tq_arrays;
  }

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
