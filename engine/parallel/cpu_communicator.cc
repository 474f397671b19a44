#include "engine/parallel/cpu_communicator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/common/error.h"
#include "kernels/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TQ_COMM_RELAX() _mm_pause()
#else
#define TQ_COMM_RELAX() std::this_thread::yield()
#endif

namespace tq {
namespace {

// Spins (~0.1-0.3 ms) before sleeping: a rank normally arrives within the
// duration of one matmul of the others; sleeping costs a scheduler slice.
constexpr int kSpinIterations = 1 << 13;

// A reusable barrier for a fixed number of threads that can be aborted.
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}

  /// Returns when all count threads have arrived; throws tq::Error once aborted.
  void ArriveAndWait() {
    const uint32_t gen = generation_.load(std::memory_order_acquire);
    if (aborted_.load(std::memory_order_acquire)) throw Aborted();
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == count_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_acq_rel);
      generation_.notify_all();
      return;
    }
    for (int spin = 0; spin < kSpinIterations; ++spin) {
      if (generation_.load(std::memory_order_acquire) != gen) break;
      TQ_COMM_RELAX();
    }
    while (generation_.load(std::memory_order_acquire) == gen) generation_.wait(gen);
    if (aborted_.load(std::memory_order_acquire)) throw Aborted();
  }

  void Abort() {
    aborted_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
  }
  void Reset() {
    arrived_.store(0);
    aborted_.store(false);
  }

 private:
  static Error Aborted() {
    return Error("tensor-parallel group aborted: another rank failed during this step");
  }
  const int count_;
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> aborted_{false};
};

float Load(const void* p, size_t i, CommDtype t) {
  switch (t) {
    case CommDtype::kF32:
      return static_cast<const float*>(p)[i];
    case CommDtype::kF16:
      return kernels::HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case CommDtype::kBF16:
      return kernels::Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  return 0.0f;
}

void Store(void* p, size_t i, CommDtype t, float v) {
  switch (t) {
    case CommDtype::kF32:
      static_cast<float*>(p)[i] = v;
      return;
    case CommDtype::kF16:
      static_cast<uint16_t*>(p)[i] = kernels::FloatToHalf(v);
      return;
    case CommDtype::kBF16:
      static_cast<uint16_t*>(p)[i] = kernels::FloatToBf16(v);
      return;
  }
}

// State shared by the ranks of one group. Slot r is written only by rank r,
// before a barrier, and read by the others after it.
struct Group {
  explicit Group(int world) : world_size(world), barrier(world), ptrs(world), scratch(world) {}
  const int world_size;
  Barrier barrier;
  std::vector<const void*> ptrs;
  std::vector<std::vector<unsigned char>> scratch;  // rank r's reduced chunk
};

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<Group> group, int rank) : g_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return g_->world_size; }

  void AllReduceSum(void* buf, size_t count, CommDtype dtype) override {
    const int w = g_->world_size;
    if (w == 1) return;
    const size_t esize = CommDtypeBytes(dtype);
    g_->ptrs[rank_] = buf;
    g_->barrier.ArriveAndWait();
    // Scratch r is resized only here, by rank r, after the barrier: every
    // other rank has finished reading it in the previous collective.
    const size_t begin = Chunk(count, rank_), end = Chunk(count, rank_ + 1);
    std::vector<unsigned char>& mine = g_->scratch[rank_];
    if (mine.size() < (end - begin) * esize) mine.resize((end - begin) * esize);
    for (size_t i = begin; i < end; ++i) {
      float sum = Load(g_->ptrs[0], i, dtype);
      for (int r = 1; r < w; ++r) sum += Load(g_->ptrs[r], i, dtype);
      Store(mine.data(), i - begin, dtype, sum);
    }
    g_->barrier.ArriveAndWait();
    auto* out = static_cast<unsigned char*>(buf);
    for (int r = 0; r < w; ++r) {
      const size_t b = Chunk(count, r), e = Chunk(count, r + 1);
      if (e > b) std::memcpy(out + b * esize, g_->scratch[r].data(), (e - b) * esize);
    }
  }

  void AllGather(const void* send, void* recv, size_t count, CommDtype dtype) override {
    const size_t bytes = count * CommDtypeBytes(dtype);
    auto* out = static_cast<unsigned char*>(recv);
    if (g_->world_size == 1) {
      if (bytes) std::memcpy(out, send, bytes);
      return;
    }
    g_->ptrs[rank_] = send;
    g_->barrier.ArriveAndWait();
    for (int r = 0; r < g_->world_size; ++r) {
      if (bytes) std::memcpy(out + r * bytes, g_->ptrs[r], bytes);
    }
    g_->barrier.ArriveAndWait();  // the senders may not overwrite send before all have read it
  }

  void Broadcast(void* buf, size_t count, CommDtype dtype, int root) override {
    if (root < 0 || root >= g_->world_size) {
      throw std::invalid_argument("Broadcast: root " + std::to_string(root) + " is not a rank");
    }
    if (g_->world_size == 1) return;
    g_->ptrs[rank_] = buf;
    g_->barrier.ArriveAndWait();
    const size_t bytes = count * CommDtypeBytes(dtype);
    if (rank_ != root && bytes) std::memcpy(buf, g_->ptrs[root], bytes);
    g_->barrier.ArriveAndWait();
  }

  void Abort() override { g_->barrier.Abort(); }
  void ResetAfterAbort() override { g_->barrier.Reset(); }

 private:
  size_t Chunk(size_t count, int r) const { return count * r / g_->world_size; }

  std::shared_ptr<Group> g_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> CreateCpuCommunicators(int world_size) {
  if (world_size < 1) {
    throw std::invalid_argument("CreateCpuCommunicators: world size " + std::to_string(world_size) +
                                " < 1");
  }
  auto group = std::make_shared<Group>(world_size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r) comms.push_back(std::make_unique<CpuCommunicator>(group, r));
  return comms;
}

}  // namespace tq
