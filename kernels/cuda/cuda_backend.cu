// CudaBackend: memory, copies, cuBLAS GEMMs and dispatch to the kernels in
// elementwise.cu, kv_write.cu and paged_attention.cu. Every op's params are
// checked on the host first (kernels/op_checks.h) plus the limits of these
// kernels, so bad input is a std::invalid_argument, never a device fault.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/quant_gemm.h"
#include "kernels/op_checks.h"

namespace tq::kernels {
namespace {

constexpr std::string_view kName = "cuda";

class CudaBackend;

// A captured and instantiated CUDA graph of one CudaBackend's stream.
class CudaGraph final : public BackendGraph {
 public:
  CudaGraph(CudaBackend* backend, cudaGraphExec_t exec, uint64_t epoch)
      : backend_(backend), exec_(exec), epoch_(epoch) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  bool Launch() override;

 private:
  CudaBackend* backend_;
  cudaGraphExec_t exec_;
  uint64_t epoch_;  // the backend's memory epoch at capture
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    TQ_CUDA_CHECK(cudaSetDevice(device_));
    TQ_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    TQ_CUBLAS_CHECK(cublasCreate(&cublas_));
    TQ_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    TQ_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));  // fp32: no TF32
    TQ_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device_));
    // A workspace of our own, so that cuBLAS never allocates inside a graph
    // capture (cuBLAS docs, "CUDA Graphs support"); the size is cuBLAS's own
    // default (32 MiB on Hopper, 4 MiB before), so eager GEMMs choose the same
    // algorithms as without it.
    int major = 0;
    TQ_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    const size_t cublas_bytes = (major >= 9 ? 32u : 4u) << 20;
    TQ_CUDA_CHECK(cudaMalloc(&cublas_workspace_, cublas_bytes));
    TQ_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, cublas_bytes));
  }
  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    if (gemm_workspace_) cudaFree(gemm_workspace_);
    if (attn_workspace_) cudaFree(attn_workspace_);
    if (layout_buffer_) cudaFree(layout_buffer_);
    if (cublas_workspace_) cudaFree(cublas_workspace_);
    if (staging_) cudaFreeHost(staging_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  std::string_view Name() const override { return kName; }
  BackendCapabilities Capabilities() const override {
    BackendCapabilities caps;
    caps.device_memory = true;
    caps.graphs = true;
    caps.device_logits_topk = true;
    caps.kv_dtypes = CudaKvDtypes();
    return caps;
  }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

  void* Allocate(size_t bytes) override {
    NotCapturing("Allocate");
    Select();
    void* ptr = nullptr;
    if (cudaMalloc(&ptr, bytes ? bytes : 1) != cudaSuccess) {
      cudaGetLastError();
      throw std::bad_alloc();
    }
    TQ_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));
    TQ_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return ptr;
  }
  void Free(void* ptr) override {
    if (!ptr) return;
    NotCapturing("Free");
    Select();
    cudaStreamSynchronize(stream_);  // queued kernels may still read it
    cudaFree(ptr);
  }
  // `src` may be freed on return. A copy that fits the pinned staging ring is
  // copied there and enqueued without waiting (a step's inputs: token ids,
  // positions, slot mapping, block tables); the ring is reused only after a
  // stream synchronize, once per kStagingBytes. Larger copies (weights at
  // load) go from pageable memory and wait.
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    NotCapturing("CopyToDevice");
    Select();
    if (bytes > kStagingBytes) {
      TQ_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
      TQ_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    if (!staging_) {
      TQ_CUDA_CHECK(cudaHostAlloc(&staging_, kStagingBytes, cudaHostAllocDefault));
    }
    if (staging_used_ + bytes > kStagingBytes) {
      TQ_CUDA_CHECK(cudaStreamSynchronize(stream_));  // every earlier copy has read its bytes
      staging_used_ = 0;
    }
    char* at = static_cast<char*>(staging_) + staging_used_;
    std::memcpy(at, src, bytes);
    TQ_CUDA_CHECK(cudaMemcpyAsync(dst, at, bytes, cudaMemcpyHostToDevice, stream_));
    staging_used_ = (staging_used_ + bytes + 255) / 256 * 256;
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    NotCapturing("CopyToHost");
    Select();
    TQ_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    TQ_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void Embedding(const EmbeddingParams& p) override {
    CheckEmbedding(kName, p);
    Select();
    cuda::LaunchEmbedding(p, stream_);
  }
  void RmsNorm(const RmsNormParams& p) override {
    CheckRmsNorm(kName, p);
    Select();
    cuda::LaunchRmsNorm(p, stream_);
  }
  void Rope(const RopeParams& p) override {
    CheckRope(kName, p);
    Select();
    cuda::LaunchRope(p, stream_);
  }
  void SiluMul(const SiluMulParams& p) override {
    CheckSiluMul(kName, p);
    Select();
    cuda::LaunchSiluMul(p, stream_);
  }
  void MatMul(const MatMulParams& p) override;
  void KvWrite(const KvWriteParams& p) override {
    CheckKvWrite(kName, p);
    CheckKvLimits("KvWrite", p.cache);
    Select();
    cuda::LaunchKvWrite(p, TqArrays(p.cache), stream_);
  }
  void PagedAttention(const PagedAttentionParams& p) override;
  void LogitsTopK(const LogitsTopKParams& p) override {
    CheckLogitsTopK(kName, p);
    Select();
    cuda::LaunchLogitsTopK(p, stream_);
  }
  void QuantMatMul(const MatMulParams& p);
  void DenseMatMul(const MatMulParams& p);
  const int32_t* UploadLayout(const cuda::AttentionBatchLayout& layout);
  std::unique_ptr<BackendGraph> CaptureGraph(const std::function<void()>& record) override;

  /// Bumped whenever memory that a captured graph may point at is freed.
  uint64_t epoch() const { return epoch_; }

 private:
  // cudaSetDevice only when needed: it is one more driver call per op, and
  // during a capture every call should be one the capture allows.
  void Select() const {
    int current = -1;
    TQ_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device_) TQ_CUDA_CHECK(cudaSetDevice(device_));
  }

  void NotCapturing(const char* what) const {
    if (capturing_) {
      throw std::logic_error(std::string("cuda ") + what +
                             " during a graph capture (synchronizes or allocates); run the "
                             "captured ops once eagerly before capturing");
    }
  }

  void CheckKvLimits(std::string_view op, const KvLayerView& cache) const {
    const KvLayout& l = cache.layout;
    const std::string where = "cuda " + std::string(op) + ": ";
    if (l.head_dim > cuda::kMaxHeadDim) {
      throw std::invalid_argument(where + "head_dim " + std::to_string(l.head_dim) +
                                  " > 256 is not supported by the CUDA kernels");
    }
    if (l.num_kv_heads > 65535) throw std::invalid_argument(where + "num_kv_heads > 65535");
    if (!KvDtypeSupportedOnCuda(l.dtype)) {
      throw std::invalid_argument(where + "--kv-cache-dtype " + std::string(KvDtypeName(l.dtype)) +
                                  " is CPU-only (no CUDA kernels); use tq3 on CUDA");
    }
    if (!KvStoresPreRopeKeys(l.dtype)) return;
    if (cache.tq_arrays == nullptr) {
      throw std::invalid_argument(where +
                                  "tq KV cache without its device arrays (cache.tq_arrays, "
                                  "uploaded by the KV cache: kernels::TqCodecBuffer)");
    }
    if (cache.tq_arrays->signs == nullptr) {
      throw std::invalid_argument(where + "tq KV cache with head_dim " +
                                  std::to_string(l.head_dim) +
                                  " (not a power of two: dense rotation) is CPU-only; use "
                                  "--kv-cache-dtype fp16 or int8 on CUDA");
    }
    if (cache.tq_arrays->rope_positions <= 0) {
      throw std::invalid_argument(where + "tq KV cache without a RoPE table");
    }
  }

  // The tq codec as the kernels read it (checked by CheckKvLimits); null for
  // the other formats.
  static const TqCodecArrays* TqArrays(const KvLayerView& cache) {
    return KvStoresPreRopeKeys(cache.layout.dtype) ? cache.tq_arrays : nullptr;
  }

  // Grows a device scratch buffer (contents not kept).
  void* Scratch(void** buffer, size_t* capacity, size_t bytes) {
    if (bytes > *capacity) {
      NotCapturing("scratch buffer growth");
      if (*buffer) {
        TQ_CUDA_CHECK(cudaStreamSynchronize(stream_));
        TQ_CUDA_CHECK(cudaFree(*buffer));
        *buffer = nullptr;
        *capacity = 0;
        ++epoch_;
      }
      TQ_CUDA_CHECK(cudaMalloc(buffer, bytes));
      *capacity = bytes;
    }
    return *buffer;
  }

  int device_;
  int num_sms_ = 1;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* gemm_workspace_ = nullptr;
  size_t gemm_workspace_bytes_ = 0;
  void* attn_workspace_ = nullptr;
  size_t attn_workspace_bytes_ = 0;
  void* layout_buffer_ = nullptr;
  size_t layout_buffer_bytes_ = 0;
  std::vector<int32_t> layout_host_;  // what layout_buffer_ holds
  void* cublas_workspace_ = nullptr;
  static constexpr size_t kStagingBytes = size_t{8} << 20;
  void* staging_ = nullptr;  // pinned host memory, kStagingBytes (CopyToDevice)
  size_t staging_used_ = 0;
  bool capturing_ = false;
  uint64_t epoch_ = 0;
};

void CudaBackend::MatMul(const MatMulParams& p) {
  CheckMatMul(kName, p);
  if (p.rows == 0) return;
  const WeightView& w = p.w;
  if (w.dtype != LogicalWeightDtype(w.dtype)) {  // panels, int tiles
    throw std::invalid_argument("cuda MatMul: " + WeightDtypeName(w.dtype) +
                                " is the CPU backend's private layout");
  }
  Select();
  if (w.dtype == WeightDtype::kInt8 || w.dtype == WeightDtype::kInt4) {
    QuantMatMul(p);
  } else {
    DenseMatMul(p);
  }
  if (p.bias) cuda::LaunchAddBias(p.out, p.bias, p.rows, w.out_features, stream_);
}

// fp32/fp16/bf16 weights: one cuBLAS GEMM (16-bit activations for 16-bit weights).
void CudaBackend::DenseMatMul(const MatMulParams& p) {
  const WeightView& w = p.w;
  const float alpha = 1.0f;
  const float beta = p.accumulate ? 1.0f : 0.0f;
  // Row-major out[rows, out] = x[rows, in] · Wᵀ is, column-major,
  // outᵀ[out, rows] = W(as stored: col-major [in, out], transposed) · xᵀ.
  const void* b = p.x;
  cudaDataType_t type = CUDA_R_32F;
  if (w.dtype != WeightDtype::kF32) {
    const bool bf16 = w.dtype == WeightDtype::kBF16;
    type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const int64_t n = static_cast<int64_t>(p.rows) * w.in_features;
    auto* x16 = static_cast<uint16_t*>(
        Scratch(&gemm_workspace_, &gemm_workspace_bytes_, static_cast<size_t>(n) * 2));
    cuda::LaunchToHalf(p.x, x16, n, bf16, stream_);
    b = x16;
  }
  TQ_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, w.out_features, p.rows,
                               w.in_features, &alpha, w.data, type, w.in_features, b, type,
                               w.in_features, &beta, p.out, CUDA_R_32F, w.out_features,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// int8/int4 group-wise weights: the weight-only GEMM of kernels/cuda/quant_gemm
// (fp16 activations and output), with the activations rounded to fp16 first
// and its fp16 result widened into (or added to) the fp32 output.
void CudaBackend::QuantMatMul(const MatMulParams& p) {
  const WeightView& w = p.w;
  const size_t in_elems = static_cast<size_t>(p.rows) * w.in_features;
  const size_t out_elems = static_cast<size_t>(p.rows) * w.out_features;
  const size_t out_at = (in_elems * 2 + 255) / 256 * 256;
  auto* base = static_cast<uint8_t*>(
      Scratch(&gemm_workspace_, &gemm_workspace_bytes_, out_at + out_elems * 2));
  auto* a16 = reinterpret_cast<uint16_t*>(base);
  auto* out16 = reinterpret_cast<uint16_t*>(base + out_at);
  cuda::LaunchToHalf(p.x, a16, static_cast<int64_t>(in_elems), false, stream_);
  cuda::QuantGemmParams q;
  q.a = a16;
  q.weight = static_cast<const uint8_t*>(w.data);
  q.scales = w.scales;
  q.zeros = w.zeros;
  q.out = out16;
  q.m = p.rows;
  q.n = w.out_features;
  q.k = w.in_features;
  q.group_size = w.group_size;
  q.dtype = w.dtype;
  TQ_CUDA_CHECK(cuda::QuantGemm(q, stream_));
  cuda::LaunchFromHalf(out16, p.out, static_cast<int64_t>(out_elems), p.accumulate, stream_);
}

void CudaBackend::PagedAttention(const PagedAttentionParams& p) {
  CheckPagedAttention(kName, p);
  CheckKvLimits("PagedAttention", p.cache);
  const int64_t group = p.num_heads / p.cache.layout.num_kv_heads;
  if (static_cast<int64_t>(p.cache.layout.num_kv_heads) * ((group + 7) / 8) > 65535) {
    throw std::invalid_argument("cuda PagedAttention: num_kv_heads x head groups > 65535");
  }
  if (p.num_tokens == 0) return;
  Select();
  const TqCodecArrays* tq = TqArrays(p.cache);
  const cuda::AttentionBatchLayout layout = cuda::PlanAttentionBatch(p);
  const cuda::AttentionPlan plan = cuda::PlanAttention(p, num_sms_, layout);
  float* workspace = nullptr;
  if (plan.splits > 1) {
    workspace = static_cast<float*>(
        Scratch(&attn_workspace_, &attn_workspace_bytes_, plan.WorkspaceFloats(p) * sizeof(float)));
  }
  cuda::LaunchPagedAttention(p, tq, plan, workspace, stream_, layout, UploadLayout(layout));
}

// Device copy of the layout's tiles then decode tokens, or null without
// tiles (or during a graph capture, where a copy from pageable memory is not
// allowed: every token then takes the decode kernel). Every layer of a step
// has the same layout: it is uploaded once.
const int32_t* CudaBackend::UploadLayout(const cuda::AttentionBatchLayout& layout) {
  if (layout.tiles.empty() || capturing_) return nullptr;
  std::vector<int32_t> flat(layout.tiles);
  flat.insert(flat.end(), layout.decode.begin(), layout.decode.end());
  if (flat != layout_host_) {
    Scratch(&layout_buffer_, &layout_buffer_bytes_, flat.size() * sizeof(int32_t));
    layout_host_ = std::move(flat);
    // Pageable source: staged before the call returns; ordered on the stream
    // after the kernels that read the previous layout.
    TQ_CUDA_CHECK(cudaMemcpyAsync(layout_buffer_, layout_host_.data(),
                                  layout_host_.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                  stream_));
  }
  return static_cast<const int32_t*>(layout_buffer_);
}

// Stream capture in thread-local mode: only this thread's unsafe calls
// (synchronization, allocation) invalidate it, so a metrics thread calling
// cudaMemGetInfo meanwhile does not (CUDA Programming Guide, "CUDA Graphs").
std::unique_ptr<BackendGraph> CudaBackend::CaptureGraph(const std::function<void()>& record) {
  NotCapturing("CaptureGraph");
  Select();
  TQ_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const uint64_t epoch = epoch_;
  TQ_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  cudaGraph_t graph = nullptr;
  try {
    record();
  } catch (...) {
    capturing_ = false;
    if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  capturing_ = false;
  TQ_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TQ_CUDA_CHECK(err);
  return std::make_unique<CudaGraph>(this, exec, epoch);
}

bool CudaGraph::Launch() {
  if (backend_->epoch() != epoch_) return false;
  TQ_CUDA_CHECK(cudaGraphLaunch(exec_, backend_->stream()));
  return true;
}

}  // namespace

std::unique_ptr<Backend> CreateCudaBackend(int device) {
  return std::make_unique<CudaBackend>(device);
}

void* CudaBackendStream(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda ? static_cast<void*>(cuda->stream()) : nullptr;
}

int CudaBackendDevice(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  return cuda ? cuda->device() : -1;
}

}  // namespace tq::kernels
