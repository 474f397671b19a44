// A persistent pool of compute threads driven by one caller thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tq::kernels {

/// Fixed set of worker threads that spin briefly between jobs and then sleep
/// on a condition variable. The caller takes part as thread 0, so a
/// pool of N threads starts N-1 workers. Keeping workers hot between the ops
/// of a decode step matters on small machines: handing each op to a sleeping
/// thread costs a scheduler time slice (see DESIGN.md "CPU threads").
///
/// Thread ownership: Run() must be called from one thread at a time (the
/// engine thread); it returns when every thread has finished the job.
class ThreadPool {
 public:
  /// num_threads total including the caller; <= 0 means hardware concurrency.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  /// Runs fn(thread_index, num_threads) once on every thread.
  void Run(const std::function<void(int, int)>& fn);

  /// Splits [0, n) into contiguous chunks of at least `grain` items and
  /// calls fn(begin, end) for each, on whichever thread claims it first.
  /// At most 4 chunks per thread, claimed from a shared counter, so a worker
  /// that the OS has descheduled costs at most one chunk of waiting, not its
  /// whole share. Chunk boundaries depend only on n, grain and size(). Runs
  /// inline when n is small.
  template <typename Fn>
  void ParallelFor(int64_t n, int64_t grain, Fn&& fn) {
    if (n <= 0) return;
    const int64_t max_chunks = grain > 0 ? std::max<int64_t>(1, n / grain) : n;
    const int64_t chunks = std::min<int64_t>(int64_t{kChunksPerThread} * num_threads_, max_chunks);
    if (chunks <= 1 || num_threads_ == 1) {
      fn(int64_t{0}, n);
      return;
    }
    std::atomic<int64_t> next{0};
    Run([&](int, int) {
      for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
           c = next.fetch_add(1, std::memory_order_relaxed)) {
        fn(n * c / chunks, n * (c + 1) / chunks);
      }
    });
  }

 private:
  static constexpr int kChunksPerThread = 4;
  void WorkerLoop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
};

}  // namespace tq::kernels
