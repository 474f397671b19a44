// This machine's ceilings for the CPU kernels, to say what bounds a measured
// cell (docs/PERFORMANCE.md "What bounds each cell"): DRAM read bandwidth,
// fp32 FMA rate and int8 dot-product (`vpdpbusd`, AVX-512 VNNI) rate, at 1..N
// threads, best of several repeats (a shared VM's noise only ever lowers a
// ceiling).
//
//   tq_bench_machine_limits [--threads 1,2] [--mib 512] [--repeats 7]
//
// Bandwidth: each thread streams its share of one buffer (transparent huge
// pages advised, as the CPU backend's weight buffers are) with 64-byte loads
// summed into 4 accumulators, the access pattern of the weight GEMVs.
// FMA: 12 independent chains of 16-wide fp32 multiply-adds per thread
// (2 FLOP per lane). VNNI: 12 independent `vpdpbusd` chains (64 u8 x s8
// products per instruction, 2 OP each), reported as int8 GOP/s; absent
// without AVX-512 VNNI (run-time check).
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_util.h"
#include "kernels/cpu/cpu_kernels.h"

namespace {

using Clock = std::chrono::steady_clock;
typedef float v16f __attribute__((vector_size(64)));

// Seconds for `threads` threads each running body(thread index) once,
// started together.
double Parallel(int threads, const std::function<void(int)>& body) {
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  body(0);
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

float ReadSum(const float* p, size_t floats) {
  v16f a0{}, a1{}, a2{}, a3{};
  for (size_t i = 0; i + 64 <= floats; i += 64) {
    v16f x0, x1, x2, x3;
    std::memcpy(&x0, p + i, 64);
    std::memcpy(&x1, p + i + 16, 64);
    std::memcpy(&x2, p + i + 32, 64);
    std::memcpy(&x3, p + i + 48, 64);
    a0 += x0;
    a1 += x1;
    a2 += x2;
    a3 += x3;
  }
  const v16f s = (a0 + a1) + (a2 + a3);
  float r = 0;
  for (int i = 0; i < 16; ++i) r += s[i];
  return r;
}

// 12 chains in named registers (an array would live on the stack), each
// step one multiply-add per chain; the empty asm keeps the chains from being
// folded.
#define TQ_CHAINS_AFTER_0(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define TQ_CHAINS(X) X(0) TQ_CHAINS_AFTER_0(X)
#define TQ_REG(i) , "+v"(a##i)
constexpr int kChains = 12;

float FmaChains(int64_t steps) {
#define TQ_INIT(i) v16f a##i = v16f{} + 1.0f + 0.001f * i;
  TQ_CHAINS(TQ_INIT)
  const v16f m = v16f{} + 0.9999999f, b = v16f{} + 1e-7f;
  for (int64_t s = 0; s < steps; ++s) {
#define TQ_FMA(i) a##i = a##i * m + b;  // contracted to an FMA
    TQ_CHAINS(TQ_FMA)
#ifdef __AVX512F__
    __asm__ volatile("" : "+v"(a0)TQ_CHAINS_AFTER_0(TQ_REG));
#else
    __asm__ volatile("" : : : "memory");
#endif
  }
#define TQ_SUM(i) +a##i[0]
  return 0.0f TQ_CHAINS(TQ_SUM);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx512f,avx512vnni"))) int VnniChains(int64_t steps) {
#define TQ_IINIT(i) __m512i a##i = _mm512_set1_epi32(i);
  TQ_CHAINS(TQ_IINIT)
  const __m512i u = _mm512_set1_epi8(3), w = _mm512_set1_epi8(-2);
  for (int64_t s = 0; s < steps; ++s) {
#define TQ_DP(i) a##i = _mm512_dpbusd_epi32(a##i, u, w);
    TQ_CHAINS(TQ_DP)
    __asm__ volatile("" : "+v"(a0)TQ_CHAINS_AFTER_0(TQ_REG));
  }
  int lanes[16];
#define TQ_ISUM(i)                  \
  _mm512_storeu_si512(lanes, a##i); \
  r += lanes[0];
  int r = 0;
  TQ_CHAINS(TQ_ISUM)
  return r;
}
constexpr bool kX86 = true;
#else
int VnniChains(int64_t) {
  return 0;
}
constexpr bool kX86 = false;
#endif

struct Flags {
  std::vector<int> threads = {1, 2};
  int mib = 512, repeats = 7;
};

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app("This machine's DRAM bandwidth, fp32 FMA and int8 VNNI ceilings.",
               "tq_bench_machine_limits");
  tq::bench::AddList(app, "--threads", f.threads, "Thread counts");
  app.add_option("--mib", f.mib, "Buffer streamed per repeat (MiB)")->capture_default_str();
  app.add_option("--repeats", f.repeats)->capture_default_str();
  tq::bench::ParseOrExit(app, argc, argv);

  const size_t bytes = static_cast<size_t>(f.mib) << 20;
  auto* buf = static_cast<float*>(std::aligned_alloc(size_t{2} << 20, bytes));
  if (!buf) return 2;
  madvise(buf, bytes, MADV_HUGEPAGE);
  for (size_t i = 0; i < bytes / sizeof(float); ++i) buf[i] = 1e-9f * static_cast<float>(i % 97);
  const bool vnni =
      kX86 && tq::kernels::cpu::IntIsaSupported(tq::kernels::cpu::IntIsa::kAvx512Vnni);
  std::printf("cpu: %s\nloadavg at start: %s\n", tq::bench::CpuModel().c_str(),
              tq::bench::LoadAvg().c_str());
  std::printf("best of %d repeats; %d MiB streamed per read repeat\n\n", f.repeats, f.mib);
  std::printf("| threads | DRAM read GB/s | fp32 FMA GFLOP/s | int8 VNNI GOP/s |\n");
  std::printf("|---:|---:|---:|---:|\n");
  volatile float sink = 0;
  volatile int isink = 0;
  constexpr int64_t kSteps = 20'000'000;
  for (int threads : f.threads) {
    double read = 1e30, fma = 1e30, dp = 1e30;
    const size_t share = bytes / sizeof(float) / static_cast<size_t>(threads);
    for (int r = 0; r < f.repeats; ++r) {
      read = std::min(read, Parallel(threads, [&](int t) {
                        sink = sink + ReadSum(buf + static_cast<size_t>(t) * share, share);
                      }));
      fma = std::min(fma, Parallel(threads, [&](int) { sink = sink + FmaChains(kSteps); }));
      if (vnni)
        dp = std::min(dp, Parallel(threads, [&](int) { isink = isink + VnniChains(kSteps); }));
    }
    const double ops = static_cast<double>(kSteps) * kChains * threads;  // instructions
    std::printf("| %d | %.1f | %.0f |", threads, static_cast<double>(bytes) / read / 1e9,
                ops * 16 * 2 / fma / 1e9);
    if (vnni) {
      std::printf(" %.0f |\n", ops * 64 * 2 / dp / 1e9);
    } else {
      std::printf(" - |\n");
    }
  }
  std::printf("\nloadavg at end: %s\n", tq::bench::LoadAvg().c_str());
  std::free(buf);
  return 0;
}
