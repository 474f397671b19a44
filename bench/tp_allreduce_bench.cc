// Speed of the in-process CPU communicator's all-reduce (engine/parallel):
// microseconds per call and algorithm bandwidth (bytes of the buffer / time)
// for world sizes and buffer sizes that a tensor-parallel step uses
// (hidden_size x tokens fp32: 768 x 1 .. 4096 x 512).
//
//   tq_bench_tp_allreduce [--worlds 2,4] [--elems 768,12288,4096,2097152] [--seconds 0.5]
//
// One thread per rank, as in the engine. Each size runs for --seconds after a
// warm-up; the time per call is the wall time of rank 0 divided by the calls.
// See docs/PERFORMANCE.md.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_flags.h"
#include "engine/parallel/cpu_communicator.h"

namespace {

using Clock = std::chrono::steady_clock;

// Seconds per all-reduce of `elems` fp32 on `world` rank threads.
double TimeAllReduce(int world, size_t elems, double seconds) {
  auto comms = tq::CreateCpuCommunicators(world);
  // Rank 0 decides how many calls to make (every rank must make the same).
  long calls = 8;
  for (;;) {
    double elapsed = 0;
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        std::vector<float> buf(elems, 1.0f / (r + 1));
        comms[r]->AllReduceSum(buf.data(), elems, tq::CommDtype::kF32);  // warm-up
        const auto t0 = Clock::now();
        for (long i = 0; i < calls; ++i) {
          comms[r]->AllReduceSum(buf.data(), elems, tq::CommDtype::kF32);
        }
        if (r == 0) elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
      });
    }
    for (auto& t : threads) t.join();
    if (elapsed >= seconds || calls > (1L << 24)) return elapsed / calls;
    calls = static_cast<long>(calls * std::max(2.0, 1.2 * seconds / std::max(elapsed, 1e-6)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> worlds = {2, 4}, elems = {768, 12288, 4096, 2097152};
  double seconds = 0.5;
  CLI::App app("CPU all-reduce speed per world size and message size.", "tq_bench_tp_allreduce");
  tq::bench::AddList(app, "--worlds", worlds, "Ranks");
  tq::bench::AddList(app, "--elems", elems, "fp32 elements per all-reduce");
  app.add_option("--seconds", seconds, "Time per size")->capture_default_str();
  tq::bench::ParseOrExit(app, argc, argv);
  std::printf("%-6s %-10s %-12s %-12s %-10s\n", "world", "fp32 elems", "bytes", "us/call", "GB/s");
  for (long w : worlds) {
    for (long n : elems) {
      const double s = TimeAllReduce(static_cast<int>(w), static_cast<size_t>(n), seconds);
      std::printf("%-6ld %-10ld %-12ld %-12.2f %-10.2f\n", w, n, n * 4, s * 1e6, n * 4 / s / 1e9);
    }
  }
  return 0;
}
