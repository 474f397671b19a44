// The backend interface: every compute op the model runs, behind one virtual
// class, so the same model code drives the CPU reference and the CUDA backend
// (as llama.cpp's ggml-backend does). Ops take plain params structs.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>

#include "kernels/op_params.h"

namespace tq::kernels {

class BackendBuffer;
namespace cpu {
enum class IntIsa;
}

/// A recorded sequence of a backend's ops (a CUDA graph), replayed with the
/// same pointers and sizes it was captured with; the caller rewrites the
/// memory those pointers name (inputs) before each Launch.
class BackendGraph {
 public:
  virtual ~BackendGraph() = default;
  /// Enqueues one replay; ops stay synchronous from the caller's view as
  /// before (the next copy to the host waits for it). Returns false, and runs
  /// nothing, when the backend has since reallocated memory the graph uses
  /// (a grown scratch buffer, a re-uploaded codec): capture again.
  virtual bool Launch() = 0;
};

/// What a backend can do, as data: the engine reads these instead of comparing
/// Name() strings or casting to a concrete backend (issue 16, as llama.cpp's
/// ggml_backend_dev_caps). The defaults describe a host-memory backend without
/// graphs, like the CPU one.
struct BackendCapabilities {
  /// Allocate() returns a device's own memory, whose size QueryDeviceMemory
  /// reports: the KV pool is sized from --gpu-memory-utilization.
  bool device_memory = false;
  /// CaptureGraph() records replayable graphs (decode CUDA graphs).
  bool graphs = false;
  /// LogitsTopK() runs where the logits live, so only k values per row cross
  /// to the host: candidate sampling pays off at large vocabularies.
  bool device_logits_topk = false;
  /// One bit per KvDtype (1 << dtype): the formats KvWrite and PagedAttention
  /// implement.
  uint32_t kv_dtypes = ~0u;
  /// Embedding() reads int8/int4 tables (EmbeddingParams); false: fp32, fp16
  /// and bf16 only, and the loader refuses a quantized embed_tokens.
  bool int_embedding = false;

  bool SupportsKvDtype(KvDtype dtype) const {
    return ((kv_dtypes >> static_cast<unsigned>(dtype)) & 1u) != 0;
  }
};

/// A compute backend. Thread ownership: one backend instance is driven by one
/// thread at a time (the engine thread); ops are synchronous from the caller's
/// view. Pointers in params refer to memory from this backend's Allocate().
class Backend {
 public:
  virtual ~Backend() = default;

  /// "cpu" or "cuda": for logs and messages; decisions use Capabilities().
  virtual std::string_view Name() const = 0;
  /// What this backend implements (constant for its lifetime).
  virtual BackendCapabilities Capabilities() const { return {}; }

  /// Memory for activations, weights and the KV pool, 64-byte aligned and
  /// zero-filled. Throws std::bad_alloc when out of memory.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  /// Copies host memory into backend memory and back.
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;

  /// Returns `w` in the layout this backend's MatMul reads fastest, called
  /// once per linear weight at load time. When it repacks, the new copy lives
  /// in *storage (which the caller keeps as long as the view) and the caller
  /// may free the original; when `w` is already right it returns `w` and
  /// leaves *storage empty. The default keeps every weight as it is.
  virtual WeightView PrepareWeight(const WeightView& w, BackendBuffer* storage) {
    (void)storage;
    return w;
  }

  virtual void Embedding(const EmbeddingParams& p) = 0;
  virtual void RmsNorm(const RmsNormParams& p) = 0;
  virtual void MatMul(const MatMulParams& p) = 0;
  virtual void Rope(const RopeParams& p) = 0;
  virtual void SiluMul(const SiluMulParams& p) = 0;
  virtual void KvWrite(const KvWriteParams& p) = 0;
  virtual void PagedAttention(const PagedAttentionParams& p) = 0;
  /// Top-k logits and log-sum-exp terms per row (op_params.h). The default
  /// copies the rows to the host and runs the CPU reference (for backends
  /// whose memory is the host's or that have no kernel for it).
  virtual void LogitsTopK(const LogitsTopKParams& p);

  /// Records the ops `record` issues into a graph instead of running them
  /// (CUDA stream capture); nullptr when the backend has no graphs (the CPU).
  /// While recording, an op that would synchronize, copy from the host or
  /// allocate (Allocate, Free, Copy*, a scratch buffer that must grow)
  /// throws std::logic_error: run the same
  /// ops once eagerly first (docs/cuda.md "CUDA graphs"). An exception from
  /// `record` ends the capture and propagates.
  virtual std::unique_ptr<BackendGraph> CaptureGraph(const std::function<void()>& record) {
    (void)record;
    return nullptr;
  }
};

/// Owns one Allocate()d region and frees it on destruction.
class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(Backend* backend, size_t bytes)
      : backend_(backend), ptr_(bytes ? backend->Allocate(bytes) : nullptr), bytes_(bytes) {}
  BackendBuffer(BackendBuffer&& o) noexcept { *this = std::move(o); }
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      backend_ = o.backend_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  ~BackendBuffer() { Reset(); }

  void Reset() {
    if (ptr_) backend_->Free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Compute threads the CPU backend uses for a request of `requested`: all
/// cores for <= 0, else at most the core count. More threads than cores only
/// makes the spinning workers of a step wait for each other's time slices
/// (measured: 14,000 -> 46 tokens/s at 3 threads on 2 cores).
int CpuThreadCount(int requested);

/// How the CPU backend runs int8/int4 matmuls. integer: PrepareWeight repacks
/// them (WeightDtype::kInt8Tiles/kInt4Tiles) for the integer-unit kernels,
/// which quantize activations to int8 per group (docs/quantization.md
/// "Integer matmul"); false keeps the float kernels (dequantize in registers,
/// fp32 activations). isa: the integer kernels' instruction set.
struct CpuMatMulChoice {
  bool integer = true;
  cpu::IntIsa isa{};  // kScalar
};

/// The choice from the environment: TQ_CPU_INT_MATMUL unset, "on" or "1" =
/// integer on the ISA of the active kernel level (cpu::ActiveCpuIsa():
/// x86-64 scalar, avx2 and avx512 AVX2, avx512-vnni and native the best); "off" or "0" = the float
/// kernels; "avx512-vnni", "avx2", "scalar" = integer on that ISA. Throws std::invalid_argument for
/// another value or an ISA this CPU lacks.
CpuMatMulChoice CpuMatMulChoiceFromEnv();

/// Creates the CPU backend with CpuThreadCount(num_threads) compute threads
/// (including the caller's) and CpuMatMulChoiceFromEnv().
std::unique_ptr<Backend> CreateCpuBackend(int num_threads);
std::unique_ptr<Backend> CreateCpuBackend(int num_threads, const CpuMatMulChoice& choice);

}  // namespace tq::kernels
