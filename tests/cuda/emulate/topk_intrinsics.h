// The warp intrinsics and atomics kernels/cuda/topk.cu uses beyond
// emu_prelude.h's (included first): matches
// exchange through the warp's memory between two warp barriers (every lane
// must reach them, as on the GPU with a full mask), shared-memory atomics are
// real atomics (the emulated threads are std::threads).
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>

#include "tests/cuda/emulate/emu_prelude.h"

inline unsigned __match_any_sync(unsigned, uint32_t v) {
  uint32_t all[32];
  int lane;
  EmuWarpGather(v, all, &lane);
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l) bits |= (all[l] == v ? 1u : 0u) << l;
  return bits;
}

inline int __ffs(unsigned x) {
  return x == 0 ? 0 : std::countr_zero(x) + 1;
}
inline int __popc(unsigned x) {
  return std::popcount(x);
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;  // no contraction
  return r;
}
inline unsigned atomicAdd(uint32_t* p, int v) {
  return std::atomic_ref<uint32_t>(*p).fetch_add(static_cast<uint32_t>(v));
}
