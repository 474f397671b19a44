// The instruction-set level of the CPU kernels, chosen once per process at
// run time (cpuid), so one portable binary runs the AVX2 / AVX-512 code on
// the CPUs that have it and the x86-64 baseline elsewhere. The hot kernels
// (kernels/cpu/isa_kernels.h lists them) are compiled once per level
// (kernels/CMakeLists.txt); the public functions of cpu_kernels.h, kv_codec.h,
// cpu_topk.h, plain_attention.h, softmax.h and weight_decode.h forward to the
// active level's copy. A -DTQ_NATIVE=ON build compiles one copy with
// -march=native instead, the level "native".
#pragma once

#include <string>
#include <vector>

namespace tq::kernels::cpu {

/// Levels, slowest first. kAvx512Vnni runs the kAvx512 float kernels and the
/// VNNI integer matmul (vpdpbusd); no kernel uses AVX-512 BF16 or AMX.
enum class CpuIsa {
  kBaseline,    // x86-64 (SSE2), or the compiler's default on other architectures
  kAvx2,        // AVX2 + FMA + F16C (x86-64-v3's vector part)
  kAvx512,      // + AVX-512 F/BW/VL/DQ
  kAvx512Vnni,  // + AVX-512 VNNI
  kNative,      // the one level of a -DTQ_NATIVE=ON build (-march=native)
};

/// "x86-64" ("generic" off x86), "avx2", "avx512", "avx512-vnni", "native".
const char* CpuIsaName(CpuIsa isa);

/// Whether this build has the level compiled in and this CPU (and OS) runs it.
bool CpuIsaSupported(CpuIsa isa);

/// The supported levels, slowest first (a -DTQ_NATIVE=ON build: {kNative}).
std::vector<CpuIsa> SupportedCpuIsas();

/// The level a TQ_CPU_ISA value names: empty or "auto" = the fastest
/// supported, else one of CpuIsaName's names. Throws std::invalid_argument
/// naming the supported levels for an unknown name or an unsupported level.
CpuIsa ParseCpuIsa(const std::string& value);

/// The level the kernels run: set by SetCpuIsa, else ParseCpuIsa of the
/// TQ_CPU_ISA environment variable on the first call (which throws what
/// ParseCpuIsa throws; the server calls this at start-up so a bad value
/// stops it there). Thread-safe.
CpuIsa ActiveCpuIsa();

/// Makes `isa` the active level (tests: run every kernel on each level).
/// Throws std::invalid_argument when !CpuIsaSupported(isa). Call it only
/// while no kernel runs.
void SetCpuIsa(CpuIsa isa);

}  // namespace tq::kernels::cpu
