// The CPU backend: reference implementation of every op, and the default
// backend when no GPU is present.
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_topk.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_decode.h"
#include "kernels/half.h"
#include "kernels/op_checks.h"

namespace tq::kernels {
namespace {

constexpr size_t kAlignment = 64;

constexpr size_t kHugePage = size_t{2} << 20;

void* Zeroed(void* ptr, size_t bytes) {
  if (!ptr) throw std::bad_alloc();
  std::memset(ptr, 0, bytes);
  return ptr;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(int num_threads, const CpuMatMulChoice& choice)
      : pool_(num_threads), choice_(choice) {}

  std::string_view Name() const override { return "cpu"; }
  BackendCapabilities Capabilities() const override {
    BackendCapabilities caps;
    caps.int_embedding = true;  // cpu::Embedding gathers int8/int4 rows and tiles
    return caps;
  }

  void* Allocate(size_t bytes) override {
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded < kHugePage) return Zeroed(std::aligned_alloc(kAlignment, rounded), rounded);
    // Whole 2 MiB pages of it in transparent huge pages where the kernel
    // allows it (THP "madvise" mode, Debian's default): a decode step streams
    // every weight once, and with 4 KiB pages its TLB misses cost a quarter
    // of the single-thread bandwidth. The reservation is whole huge pages
    // (aligned_alloc's size rule), but only `rounded` bytes are touched and
    // the tail past the last whole page is not advised, so resident memory
    // stays what was asked for.
    const size_t reserved = (rounded + kHugePage - 1) / kHugePage * kHugePage;
    void* ptr = std::aligned_alloc(kHugePage, reserved);
    if (ptr) madvise(ptr, rounded / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice only
    return Zeroed(ptr, rounded);
  }
  void Free(void* ptr) override { std::free(ptr); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }

  void Embedding(const EmbeddingParams& p) override { cpu::Embedding(p, pool_); }

  void RmsNorm(const RmsNormParams& p) override { cpu::RmsNorm(p, pool_); }

  WeightView PrepareWeight(const WeightView& w, BackendBuffer* storage) override {
    if (choice_.integer && cpu::CanTileInt(w)) {
      *storage = BackendBuffer(this, cpu::TiledIntBytes(w));
      return cpu::TileInt(w, storage->data());
    }
    // Packed only when whole panels cover it (true of every real model's
    // matrices), so memory accounting stays exact; others keep the dot kernel.
    const WeightDtype panels = cpu::PanelDtype(w);
    if (panels == w.dtype) return w;
    *storage = BackendBuffer(this, cpu::DenseWeightBytes(w));
    cpu::PackPanels(w, storage->data());
    WeightView packed = w;
    packed.data = storage->data();
    packed.dtype = panels;
    return packed;
  }

  void MatMul(const MatMulParams& p) override {
    CheckWeightView("cpu", "MatMul", p.w);
    switch (p.w.dtype) {
      case WeightDtype::kF32:
        cpu::MatMul(p, pool_);
        break;
      case WeightDtype::kF32Panels:
      case WeightDtype::kF16Panels:
      case WeightDtype::kBF16Panels:
        cpu::MatMulPanels(p, pool_);
        break;
      case WeightDtype::kInt8Tiles:
      case WeightDtype::kInt4Tiles:
        cpu::IntMatMul(p, pool_, choice_.isa);
        break;
      default:
        if (cpu::GemvSupported(p)) {
          cpu::Gemv(p, pool_);
        } else {
          cpu::MatMulPacked(p, pool_);
        }
    }
    if (p.bias) AddBias(p.out, p.bias, p.rows, p.w.out_features);
  }

  void Rope(const RopeParams& p) override { cpu::Rope(p, pool_); }

  void SiluMul(const SiluMulParams& p) override { cpu::SiluMul(p, pool_); }

  void KvWrite(const KvWriteParams& p) override { cpu::KvWrite(p); }

  void PagedAttention(const PagedAttentionParams& p) override { cpu::PagedAttention(p, pool_); }

  void LogitsTopK(const LogitsTopKParams& p) override {
    CheckLogitsTopK(Name(), p);
    cpu::LogitsTopK(p, pool_);
  }

 private:
  // out[r, :] += bias for every row (the nn.Linear bias after the product).
  void AddBias(float* out, const float* bias, int32_t rows, int32_t cols) {
    pool_.ParallelFor(rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* row = out + r * cols;
        for (int32_t i = 0; i < cols; ++i) row[i] += bias[i];
      }
    });
  }

  ThreadPool pool_;
  const CpuMatMulChoice choice_;
};

}  // namespace

int CpuThreadCount(int requested) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return requested <= 0 ? cores : std::min(requested, cores);
}

namespace {

// The integer matmul's ISA at a kernel level (TQ_CPU_ISA=avx2 runs AVX2 there too).
cpu::IntIsa IntIsaAt(cpu::CpuIsa isa) {
  switch (isa) {
    case cpu::CpuIsa::kBaseline:
      return cpu::IntIsa::kScalar;
    case cpu::CpuIsa::kAvx2:
    case cpu::CpuIsa::kAvx512:
      return cpu::IntIsa::kAvx2;
    default:  // kAvx512Vnni, kNative
      return cpu::BestIntIsa();
  }
}

}  // namespace

CpuMatMulChoice CpuMatMulChoiceFromEnv() {
  CpuMatMulChoice c;
  c.isa = IntIsaAt(cpu::ActiveCpuIsa());
  const char* env = std::getenv("TQ_CPU_INT_MATMUL");
  const std::string v = env ? env : "";
  if (v.empty() || v == "1" || v == "on") return c;
  if (v == "0" || v == "off") {
    c.integer = false;
    return c;
  }
  for (cpu::IntIsa isa : {cpu::IntIsa::kScalar, cpu::IntIsa::kAvx2, cpu::IntIsa::kAvx512Vnni}) {
    if (v == cpu::IntIsaName(isa)) {
      if (!cpu::IntIsaSupported(isa)) {
        throw std::invalid_argument("TQ_CPU_INT_MATMUL=" + v + ": this CPU does not support it");
      }
      c.isa = isa;
      return c;
    }
  }
  throw std::invalid_argument("TQ_CPU_INT_MATMUL=" + v +
                              ": expected on, off, scalar, avx2 or avx512-vnni");
}

std::unique_ptr<Backend> CreateCpuBackend(int num_threads) {
  return CreateCpuBackend(num_threads, CpuMatMulChoiceFromEnv());
}

std::unique_ptr<Backend> CreateCpuBackend(int num_threads, const CpuMatMulChoice& choice) {
  return std::make_unique<CpuBackend>(CpuThreadCount(num_threads), choice);
}

}  // namespace tq::kernels
