// Opens one instruction-set level's part of a CPU kernel source file (no
// include guard: once per translation unit, after the file's other includes,
// closed by isa_end.h). The build compiles each such file once per level with
// -DTQ_CPU_ISA_LEVEL=<n> (kernels/CMakeLists.txt):
//   0 the x86-64 baseline (or the compiler's default), namespace isa_baseline
//   1 AVX2 + FMA + F16C, namespace isa_avx2
//   2 AVX-512 F/BW/VL/DQ (+ the above), namespace isa_avx512
//   9 -march=native (TQ_NATIVE=ON), namespace isa_native
// Levels 1 and 2 raise the ISA with `#pragma GCC target` from here to
// isa_end.h, not with -m flags for the whole file: the standard library's
// inline functions and templates, all included before the pragma (below),
// stay baseline code, so the linker's choice among the copies that several
// levels emit of, say, std::vector<float>::resize can never hand a baseline
// CPU an AVX-512 copy. Only what is defined in between (the level's own
// namespace) gets the wider instructions. GCC does not update __AVX2__ and
// friends for a pragma in C++, so the kernels test these instead:
//   TQ_ISA_AVX, TQ_ISA_AVX2, TQ_ISA_FMA, TQ_ISA_F16C, TQ_ISA_AVX512F (0 or 1).
#ifndef TQ_CPU_ISA_LEVEL
#error "TQ_CPU_ISA_LEVEL is not defined: this file is built per ISA level (kernels/CMakeLists.txt)"
#endif
#ifdef TQ_CPU_ISA_NS
#error "isa_begin.h included twice"
#endif

// Everything a kernel may include, before the pragma (see above).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/x86_intrin.h"
#include "kernels/half.h"

#if TQ_CPU_ISA_LEVEL == 2 || TQ_CPU_ISA_LEVEL == 1
#if !defined(__x86_64__) || !defined(__GNUC__)
#error "ISA levels 1 and 2 are x86-64 only"
#endif
#pragma GCC push_options
#if TQ_CPU_ISA_LEVEL == 2
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#define TQ_CPU_ISA_NS isa_avx512
#define TQ_ISA_AVX512F 1
#else
#pragma GCC target("avx2,fma,f16c")
#define TQ_CPU_ISA_NS isa_avx2
#define TQ_ISA_AVX512F 0
#endif
#define TQ_ISA_AVX 1
#define TQ_ISA_AVX2 1
#define TQ_ISA_FMA 1
#define TQ_ISA_F16C 1
#elif TQ_CPU_ISA_LEVEL == 0 || TQ_CPU_ISA_LEVEL == 9
// The command line's ISA: baseline in a portable build, the build machine's
// with -march=native.
#if TQ_CPU_ISA_LEVEL == 0
#define TQ_CPU_ISA_NS isa_baseline
#else
#define TQ_CPU_ISA_NS isa_native
#endif
#ifdef __AVX512F__
#define TQ_ISA_AVX512F 1
#else
#define TQ_ISA_AVX512F 0
#endif
#ifdef __AVX2__
#define TQ_ISA_AVX2 1
#else
#define TQ_ISA_AVX2 0
#endif
#ifdef __AVX__
#define TQ_ISA_AVX 1
#else
#define TQ_ISA_AVX 0
#endif
#ifdef __FMA__
#define TQ_ISA_FMA 1
#else
#define TQ_ISA_FMA 0
#endif
#ifdef __F16C__
#define TQ_ISA_F16C 1
#else
#define TQ_ISA_F16C 0
#endif
#else
#error "unknown TQ_CPU_ISA_LEVEL"
#endif
