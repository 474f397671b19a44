// CPU matmul speed per weight format (issue 7): fp32 against f16, int8 and
// int4 (symmetric and asymmetric, group-wise with fp16 scales) for the GEMV of
// decode (rows = 1) and a small GEMM (rows = 16), at Llama-2-7B projection
// shapes.
//
//   tq_bench_quant_gemv [--shapes 4096x4096,4096x11008,11008x4096] [--rows 1,16]
//                       [--threads 1,2] [--repeats 31] [--group-size 128]
//                       [--formats
//                       fp32,fp32p,f16,bf16,int8,int8a,int4,int4a,int8t,int8ta,int4t,int4ta]
//                       [--warm-cache] [--flush-mib N]
//
// A shape is out_features x in_features (W is [out, in]; 4096x11008 is
// down_proj, 11008x4096 gate/up_proj). Weights are random codes with random
// fp16 scales (and zero points for the "a" formats). Each repeat runs every
// (shape, rows, threads, format) once, formats interleaved so background load
// hits all alike; unless --warm-cache, a buffer of --flush-mib (by default
// 128 MiB or twice the last-level cache, whichever is larger: some server
// parts have an L3 of several hundred MiB) is read before every timed call,
// so the weights come from DRAM as in a real decode step (a model's weights
// do not fit in the last-level cache). Reported: median wall
// µs per call, weight bytes read per call (codes + scales + zeros), bytes /
// wall time, the speed-up over fp32 of the same (shape, rows, threads) in the
// same run, and the same speed-up in process CPU time (all threads, the
// pool's spinning included): on a shared machine wall time also counts time
// slices other processes took, CPU time does not, so when the two ratios
// disagree the machine was busy.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_util.h"
#include "kernels/backend.h"
#include "kernels/half.h"
#include "kernels/op_params.h"

namespace {

using tq::kernels::WeightDtype;
using Clock = std::chrono::steady_clock;

struct Format {
  std::string name;
  WeightDtype dtype;
  bool asymmetric;
};

// fp32p/f16p/bf16p: repacked by the CPU backend's PrepareWeight into column
// panels (kF32Panels/kF16Panels/kBF16Panels), what the engine runs for dense
// weights; int8t/int4t(a): int8/int4 repacked into
// int tiles for the integer-unit kernels (TQ_CPU_INT_MATMUL picks the ISA),
// while int8/int4 run the float kernels on row-major codes; "x fp32" is always relative to plain
// fp32.
const Format kAllFormats[] = {
    {"fp32", WeightDtype::kF32, false},        {"fp32p", WeightDtype::kF32Panels, false},
    {"f16", WeightDtype::kF16, false},         {"bf16", WeightDtype::kBF16, false},
    {"f16p", WeightDtype::kF16Panels, false},  {"bf16p", WeightDtype::kBF16Panels, false},
    {"int8", WeightDtype::kInt8, false},       {"int8a", WeightDtype::kInt8, true},
    {"int4", WeightDtype::kInt4, false},       {"int4a", WeightDtype::kInt4, true},
    {"int8t", WeightDtype::kInt8Tiles, false}, {"int8ta", WeightDtype::kInt8Tiles, true},
    {"int4t", WeightDtype::kInt4Tiles, false}, {"int4ta", WeightDtype::kInt4Tiles, true}};

struct Args {
  std::vector<std::pair<int, int>> shapes = {{4096, 4096}, {4096, 11008}, {11008, 4096}};
  std::vector<int> rows = {1, 16};
  std::vector<int> threads = {1, 2};
  std::vector<std::string> formats = {"fp32", "fp32p", "f16", "int8", "int8a", "int4", "int4a"};
  int repeats = 31;
  int group_size = 128;
  bool warm_cache = false;
  int flush_mib = 0;  // 0: max(128, 2 x L3)
};

// MiB read between timed calls: `requested`, or 128 MiB or twice the L3
// (sysconf; 0 where unknown), whichever is larger.
size_t FlushMib(int requested) {
  if (requested > 0) return static_cast<size_t>(requested);
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max<size_t>(128, l3 > 0 ? 2 * (static_cast<size_t>(l3) >> 20) : 0);
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  std::vector<std::string> shapes;
  CLI::App app("CPU matmul speed per weight format.", "tq_bench_quant_gemv");
  tq::bench::AddList(app, "--shapes", shapes, "OUTxIN weight shapes")
      ->default_str("4096x4096,4096x11008,11008x4096");
  tq::bench::AddList(app, "--rows", a.rows, "Activation rows");
  tq::bench::AddList(app, "--threads", a.threads, "Thread counts");
  tq::bench::AddList(app, "--formats", a.formats, "Weight formats");
  app.add_option("--repeats", a.repeats)->capture_default_str();
  app.add_option("--group-size", a.group_size)->capture_default_str();
  app.add_flag("--warm-cache", a.warm_cache, "No cache flush before each timed call");
  app.add_option("--flush-mib", a.flush_mib,
                 "MiB read before each timed call (default: max(128, 2 x L3))")
      ->check(CLI::NonNegativeNumber);
  tq::bench::ParseOrExit(app, argc, argv);
  if (!shapes.empty()) a.shapes.clear();
  for (const auto& s : shapes) {
    const size_t x = s.find('x');
    if (x == std::string::npos) throw std::invalid_argument("--shapes: expected OUTxIN: " + s);
    a.shapes.emplace_back(std::stoi(s.substr(0, x)), std::stoi(s.substr(x + 1)));
  }
  return a;
}

// One weight matrix in one format, in backend (host) memory.
struct Weight {
  std::vector<uint8_t> data;
  std::vector<uint16_t> scales, zeros;
  tq::kernels::WeightView view;
  tq::kernels::BackendBuffer storage;  // panels / int tiles copy
  size_t bytes = 0;                    // what one matmul reads
};

Weight MakeWeight(const Format& f, int out, int in, int group_size, std::mt19937& rng) {
  Weight w;
  const size_t n = static_cast<size_t>(out) * in;
  std::uniform_int_distribution<int> byte(0, 255);
  const WeightDtype plain = tq::kernels::LogicalWeightDtype(f.dtype);  // repacked by the caller
  switch (plain) {
    case WeightDtype::kF32: {
      std::normal_distribution<float> d(0.0f, 0.02f);
      w.data.resize(n * 4);
      for (size_t i = 0; i < n; ++i) {
        const float v = d(rng);
        std::memcpy(&w.data[4 * i], &v, 4);
      }
      break;
    }
    case WeightDtype::kF16:
    case WeightDtype::kBF16: {
      std::normal_distribution<float> d(0.0f, 0.02f);
      w.data.resize(n * 2);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = plain == WeightDtype::kF16 ? tq::kernels::FloatToHalf(d(rng))
                                                      : tq::kernels::FloatToBf16(d(rng));
        std::memcpy(&w.data[2 * i], &h, 2);
      }
      break;
    }
    case WeightDtype::kInt8:
    case WeightDtype::kInt4: {
      w.data.resize(plain == WeightDtype::kInt8 ? n : n / 2);
      for (auto& b : w.data) b = static_cast<uint8_t>(byte(rng));
      const size_t groups = n / group_size;
      std::uniform_real_distribution<float> scale(0.001f, 0.01f);
      w.scales.resize(groups);
      for (auto& s : w.scales) s = tq::kernels::FloatToHalf(scale(rng));
      if (f.asymmetric) {
        std::uniform_int_distribution<int> zero(0, plain == WeightDtype::kInt8 ? 255 : 15);
        w.zeros.resize(groups);
        for (auto& z : w.zeros) z = tq::kernels::FloatToHalf(static_cast<float>(zero(rng)));
      }
      break;
    }
    default:
      break;
  }
  w.view.data = w.data.data();
  w.view.dtype = plain;
  w.view.out_features = out;
  w.view.in_features = in;
  w.view.scales = w.scales.empty() ? nullptr : w.scales.data();
  w.view.zeros = w.zeros.empty() ? nullptr : w.zeros.data();
  w.view.group_size = group_size;
  w.bytes = w.data.size() + 2 * (w.scales.size() + w.zeros.size());
  return w;
}

int Run(const Args& a) {
  std::vector<Format> formats;
  for (const auto& name : a.formats) {
    const auto it = std::find_if(std::begin(kAllFormats), std::end(kAllFormats),
                                 [&](const Format& f) { return f.name == name; });
    if (it == std::end(kAllFormats)) throw std::invalid_argument("unknown format " + name);
    formats.push_back(*it);
  }
  std::printf("cpu: %s\nloadavg at start: %s\n", tq::bench::CpuModel().c_str(),
              tq::bench::LoadAvg().c_str());
  const size_t flush_mib = a.warm_cache ? 0 : FlushMib(a.flush_mib);
  const std::string cache = a.warm_cache ? "warm cache"
                                         : "weights from DRAM (" + std::to_string(flush_mib) +
                                               " MiB read before each call)";
  std::printf("group_size %d, %s, %d repeats, median per call\n", a.group_size, cache.c_str(),
              a.repeats);
  std::vector<std::unique_ptr<tq::kernels::Backend>> backends;
  for (int t : a.threads) backends.push_back(tq::kernels::CreateCpuBackend(t));
  std::vector<char> flush(flush_mib << 20, 1);
  volatile char sink = 0;
  std::mt19937 rng(1234);
  std::printf("\n%-12s %5s %7s %-6s %10s %10s %8s %10s %8s %8s\n", "shape", "rows", "threads",
              "format", "us/call", "MB read", "GB/s", "cpu us", "x fp32", "cpu x");
  for (const auto& [out, in] : a.shapes) {
    std::vector<Weight> weights;
    for (const auto& f : formats) {
      weights.push_back(MakeWeight(f, out, in, a.group_size, rng));
      if (f.dtype != tq::kernels::LogicalWeightDtype(f.dtype)) {
        Weight& w = weights.back();
        w.view = backends[0]->PrepareWeight(w.view, &w.storage);
        if (w.view.dtype != f.dtype) throw std::invalid_argument(f.name + ": shape not repackable");
        w.data.clear();
        w.scales.clear();
        w.zeros.clear();
        w.data.shrink_to_fit();
      }
    }
    const int max_rows = *std::max_element(a.rows.begin(), a.rows.end());
    std::vector<float> x(static_cast<size_t>(max_rows) * in, 0.5f);
    std::vector<float> y(static_cast<size_t>(max_rows) * out);
    // times[rows][threads][format]
    std::map<std::tuple<int, int, size_t>, std::vector<double>> times, cpu_times;
    for (int rep = -2; rep < a.repeats; ++rep) {  // two warm-up repeats
      for (int rows : a.rows) {
        for (size_t t = 0; t < a.threads.size(); ++t) {
          for (size_t f = 0; f < formats.size(); ++f) {
            for (size_t i = 0; i < flush.size(); i += 64) sink = sink + flush[i];
            const double cpu_start = 1e6 * tq::bench::ProcessCpuSeconds();
            const auto start = Clock::now();
            backends[t]->MatMul({x.data(), weights[f].view, y.data(), rows, false});
            const double us =
                std::chrono::duration<double, std::micro>(Clock::now() - start).count();
            if (rep >= 0) {
              times[{rows, a.threads[t], f}].push_back(us);
              cpu_times[{rows, a.threads[t], f}].push_back(1e6 * tq::bench::ProcessCpuSeconds() -
                                                           cpu_start);
            }
          }
        }
      }
    }
    for (int rows : a.rows) {
      for (int threads : a.threads) {
        double fp32_us = 0, fp32_cpu = 0;
        for (size_t f = 0; f < formats.size(); ++f) {
          if (formats[f].dtype == WeightDtype::kF32) {
            fp32_us = tq::bench::UpperMedian(times[{rows, threads, f}]);
            fp32_cpu = tq::bench::UpperMedian(cpu_times[{rows, threads, f}]);
          }
        }
        for (size_t f = 0; f < formats.size(); ++f) {
          const double us = tq::bench::UpperMedian(times[{rows, threads, f}]);
          char shape[32];
          std::snprintf(shape, sizeof(shape), "%dx%d", out, in);
          std::printf("%-12s %5d %7d %-6s %10.1f %10.2f %8.1f", shape, rows, threads,
                      formats[f].name.c_str(), us, weights[f].bytes / 1e6,
                      weights[f].bytes / us / 1e3);
          const double cpu = tq::bench::UpperMedian(cpu_times[{rows, threads, f}]);
          std::printf(" %10.1f", cpu);
          if (fp32_us > 0) std::printf(" %8.2f %8.2f", fp32_us / us, fp32_cpu / cpu);
          std::printf("\n");
        }
      }
    }
  }
  std::printf("\nloadavg at end: %s\n", tq::bench::LoadAvg().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(ParseArgs(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tq_bench_quant_gemv: %s\n", e.what());
    return 2;
  }
}
