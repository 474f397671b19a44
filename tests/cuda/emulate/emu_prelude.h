// A thread-per-CUDA-thread emulation of the CUDA kernels on the CPU, for
// checking their indexing and synchronization before a GPU run
// (tests/cuda/emulate/run.sh; not part of CI). Each block runs alone with one
// std::thread per CUDA thread: __syncthreads is a std::barrier of the block,
// __shfl_xor_sync, __shfl_down_sync and __ballot_sync an exchange through
// memory between two barriers of the warp (so a shuffle, ballot or barrier
// that not every thread reaches deadlocks, as it is undefined on the GPU),
// __shared__ arrays are process-wide statics (blocks never overlap), dynamic
// shared memory is NaN-filled per block.
// Not emulated: memory ordering and races between threads of a block beyond
// what the barriers order, timing, launch limits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__ static

struct EmuThread {
  uint3 tid, bid;
  dim3 bdim, gdim;
};
inline thread_local EmuThread emu_thread;
#define threadIdx emu_thread.tid
#define blockIdx emu_thread.bid
#define blockDim emu_thread.bdim
#define gridDim emu_thread.gdim

inline std::barrier<>* emu_block_barrier = nullptr;
inline std::barrier<>* emu_warp_barrier[32];
inline double emu_exchange[32][32];
inline float* emu_dynamic_smem = nullptr;

inline void __syncthreads() {
  emu_block_barrier->arrive_and_wait();
}

template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  const int t = static_cast<int>(emu_thread.tid.x), w = t / 32, l = t % 32;
  std::memcpy(&emu_exchange[w][l], &v, sizeof(T));
  emu_warp_barrier[w]->arrive_and_wait();
  T r;
  std::memcpy(&r, &emu_exchange[w][l ^ lane_mask], sizeof(T));
  emu_warp_barrier[w]->arrive_and_wait();
  return r;
}

// __shfl_down_sync: lane l reads lane l + delta; lanes past the warp's end
// keep their own value, as on the GPU.
template <typename T>
T __shfl_down_sync(unsigned, T v, unsigned delta) {
  const int t = static_cast<int>(emu_thread.tid.x), w = t / 32, l = t % 32;
  std::memcpy(&emu_exchange[w][l], &v, sizeof(T));
  emu_warp_barrier[w]->arrive_and_wait();
  T r = v;
  if (l + static_cast<int>(delta) < 32) std::memcpy(&r, &emu_exchange[w][l + delta], sizeof(T));
  emu_warp_barrier[w]->arrive_and_wait();
  return r;
}

// Every lane's v into all[32] (the lanes of a partial last warp that do not
// exist read 0); *lane is the caller's lane.
inline void EmuWarpGather(uint32_t v, uint32_t* all, int* lane) {
  const int t = static_cast<int>(emu_thread.tid.x), w = t / 32;
  *lane = t % 32;
  std::memcpy(&emu_exchange[w][*lane], &v, sizeof(v));
  emu_warp_barrier[w]->arrive_and_wait();
  const int lanes = static_cast<int>(std::min(32u, emu_thread.bdim.x - 32u * w));
  for (int l = 0; l < 32; ++l) {
    all[l] = 0;
    if (l < lanes) std::memcpy(&all[l], &emu_exchange[w][l], sizeof(uint32_t));
  }
  emu_warp_barrier[w]->arrive_and_wait();
}

inline unsigned __ballot_sync(unsigned, bool pred) {
  uint32_t all[32];
  int lane;
  EmuWarpGather(pred ? 1u : 0u, all, &lane);
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l) bits |= (all[l] ? 1u : 0u) << l;
  return bits;
}

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
using std::max;
using std::min;

template <typename K>
cudaError_t EmuFuncSetAttribute(K, cudaFuncAttribute, int) {
  return cudaSuccess;
}

// kernel<<<grid, threads, smem, stream>>>(args...) is rewritten by run.sh to
// EmuKernel(kernel, grid, threads, smem, stream)(args...): the kernel runs
// block after block, each block as `threads` std::threads (1-D blocks only).
template <typename... P>
auto EmuKernel(void (*kernel)(P...), dim3 grid, unsigned threads, size_t smem, cudaStream_t = {}) {
  return [=](auto&&... args) {
    // The arguments converted to the kernel's parameter types once, as a
    // launch copies them.
    const std::tuple<std::decay_t<P>...> params(args...);
    std::vector<float> dynamic(smem / sizeof(float) + 1);
    emu_dynamic_smem = dynamic.data();
    std::barrier<> block_barrier(threads);
    emu_block_barrier = &block_barrier;
    std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
    for (unsigned w = 0; w < (threads + 31) / 32; ++w) {
      warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - 32 * w)));
      emu_warp_barrier[w] = warp_barriers.back().get();
    }
    for (unsigned z = 0; z < grid.z; ++z) {
      for (unsigned y = 0; y < grid.y; ++y) {
        for (unsigned x = 0; x < grid.x; ++x) {
          std::fill(dynamic.begin(), dynamic.end(), std::nanf(""));
          std::vector<std::thread> block;
          for (unsigned t = 0; t < threads; ++t) {
            block.emplace_back([&, t] {
              emu_thread.tid = {t, 0, 0};
              emu_thread.bid = {x, y, z};
              emu_thread.bdim = dim3(threads);
              emu_thread.gdim = grid;
              std::apply(kernel, params);
            });
          }
          for (std::thread& th : block) th.join();
        }
      }
    }
  };
}
