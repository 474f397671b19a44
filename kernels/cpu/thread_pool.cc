#include "kernels/cpu/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TQ_CPU_RELAX() _mm_pause()
#else
#define TQ_CPU_RELAX() std::this_thread::yield()
#endif

namespace tq::kernels {
namespace {
// ~0.2-0.5 ms of spinning before a worker sleeps: long enough to cover the gap
// between two ops of a step, short enough not to burn a core when idle.
constexpr int kSpinIterations = 1 << 14;
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  num_threads_ = std::max(1, num_threads);
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    wake_.notify_all();
  }
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(num_threads_ - 1);
  generation_.fetch_add(1);  // seq_cst: pairs with the sleepers_ increment in WorkerLoop
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    wake_.notify_all();
  }
  fn(0, num_threads_);
  // Wait for the workers; when one is slow (descheduled on a busy host), give
  // the core away instead of spinning through the rest of a time slice.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) {
      TQ_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  // Generation 0 is "no job yet"; reading generation_ here instead would miss
  // a Run() that starts before this thread does.
  uint64_t seen = 0;
  while (true) {
    uint64_t now = generation_.load(std::memory_order_acquire);
    for (int spin = 0; now == seen && spin < kSpinIterations; ++spin) {
      TQ_CPU_RELAX();
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      // Either Run() sees sleepers_ > 0 and notifies under the mutex, or this
      // thread sees the new generation after announcing itself: no lost wake-up.
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      continue;
    }
    seen = now;
    if (stop_.load()) return;
    (*job_)(index, num_threads_);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace tq::kernels
