// fp32 matmul on the CPU backend: the dot-product kernel over Hugging Face
// [out, in] rows (WeightDtype::kF32) against the outer-product kernel over
// packed panels (kF32Panels, what the model loader uses), on the shapes of a
// tiny-100m decode step (hidden 768, intermediate 2048, vocab 32000).
//
//   tq_bench_matmul [--rows 1,16,128] [--threads 1,2] [--repeats 15]
//
// Each repeat runs every (shape, rows, threads, layout) once, layouts
// interleaved so background load hits both alike; reported: median GFLOP/s
// per layout and panels / row-major in the same run.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_util.h"
#include "kernels/backend.h"

namespace {

using tq::kernels::Backend;
using tq::kernels::BackendBuffer;
using tq::kernels::MatMulParams;
using tq::kernels::WeightDtype;
using tq::kernels::WeightView;

struct Shape {
  const char* name;
  int32_t out, in;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> rows_list = {1, 16, 128}, threads_list = {1, 2};
  int repeats = 15;
  CLI::App app("fp32 matmul GFLOP/s: row-major dot-product against packed panels.",
               "tq_bench_matmul");
  tq::bench::AddList(app, "--rows", rows_list, "Activation rows");
  tq::bench::AddList(app, "--threads", threads_list, "Thread counts");
  app.add_option("--repeats", repeats)->capture_default_str()->check(CLI::PositiveNumber);
  tq::bench::ParseOrExit(app, argc, argv);
  const Shape shapes[] = {{"qkvo 768x768", 768, 768},
                          {"gate/up 2048x768", 2048, 768},
                          {"down 768x2048", 768, 2048},
                          {"lm_head 32000x768", 32000, 768}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::printf(
      "| shape | rows | threads | row-major GFLOP/s | panels GFLOP/s | panels / row-major |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (int threads : threads_list) {
    std::unique_ptr<Backend> be = tq::kernels::CreateCpuBackend(threads);
    for (const Shape& s : shapes) {
      std::vector<float> w(static_cast<size_t>(s.out) * s.in);
      for (float& v : w) v = dist(rng);
      BackendBuffer d_w(be.get(), w.size() * sizeof(float));
      be->CopyToDevice(d_w.data(), w.data(), w.size() * sizeof(float));
      const WeightView row_major{d_w.data(), WeightDtype::kF32, s.out, s.in};
      BackendBuffer packed_storage;
      const WeightView packed = be->PrepareWeight(row_major, &packed_storage);
      for (int rows : rows_list) {
        std::vector<float> x(static_cast<size_t>(rows) * s.in);
        for (float& v : x) v = dist(rng);
        BackendBuffer d_x(be.get(), x.size() * sizeof(float));
        be->CopyToDevice(d_x.data(), x.data(), x.size() * sizeof(float));
        BackendBuffer d_out(be.get(), static_cast<size_t>(rows) * s.out * sizeof(float));
        std::vector<double> t_rm, t_pk;
        for (int r = 0; r < repeats + 1; ++r) {
          for (int layout = 0; layout < 2; ++layout) {
            MatMulParams p{d_x.as<float>(), layout ? packed : row_major, d_out.as<float>(), rows,
                           false};
            const auto t0 = std::chrono::steady_clock::now();
            be->MatMul(p);
            const double sec =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (r > 0) (layout ? t_pk : t_rm).push_back(sec);  // repeat 0 warms up
          }
        }
        const double flop = 2.0 * rows * s.out * s.in;
        const double g_rm = flop / tq::bench::UpperMedian(t_rm) / 1e9,
                     g_pk = flop / tq::bench::UpperMedian(t_pk) / 1e9;
        std::printf("| %s | %d | %d | %.1f | %.1f | %.2fx |\n", s.name, rows, threads, g_rm, g_pk,
                    g_pk / g_rm);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
