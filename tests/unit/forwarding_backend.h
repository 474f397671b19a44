// A test backend that forwards every op to a CPU backend, for tests that
// change one behaviour (capabilities, graphs, copies) and keep the CPU's
// kernels for the rest.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "kernels/backend.h"

namespace tq {

/// Forwards everything to CreateCpuBackend(num_threads); override what the
/// test changes. Name() is "forwarding" unless overridden.
class ForwardingBackend : public kernels::Backend {
 public:
  explicit ForwardingBackend(int num_threads = 1) : cpu_(kernels::CreateCpuBackend(num_threads)) {}
  std::string_view Name() const override { return "forwarding"; }
  kernels::BackendCapabilities Capabilities() const override { return cpu_->Capabilities(); }
  void* Allocate(size_t bytes) override { return cpu_->Allocate(bytes); }
  void Free(void* ptr) override { cpu_->Free(ptr); }
  void CopyToDevice(void* d, const void* s, size_t n) override { cpu_->CopyToDevice(d, s, n); }
  void CopyToHost(void* d, const void* s, size_t n) override { cpu_->CopyToHost(d, s, n); }
  kernels::WeightView PrepareWeight(const kernels::WeightView& w,
                                    kernels::BackendBuffer* storage) override {
    return cpu_->PrepareWeight(w, storage);
  }
  void Embedding(const kernels::EmbeddingParams& p) override { cpu_->Embedding(p); }
  void RmsNorm(const kernels::RmsNormParams& p) override { cpu_->RmsNorm(p); }
  void MatMul(const kernels::MatMulParams& p) override { cpu_->MatMul(p); }
  void Rope(const kernels::RopeParams& p) override { cpu_->Rope(p); }
  void SiluMul(const kernels::SiluMulParams& p) override { cpu_->SiluMul(p); }
  void KvWrite(const kernels::KvWriteParams& p) override { cpu_->KvWrite(p); }
  void PagedAttention(const kernels::PagedAttentionParams& p) override { cpu_->PagedAttention(p); }
  void LogitsTopK(const kernels::LogitsTopKParams& p) override { cpu_->LogitsTopK(p); }

 private:
  std::unique_ptr<kernels::Backend> cpu_;
};

}  // namespace tq
