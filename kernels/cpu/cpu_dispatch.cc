// Runtime choice of the CPU kernels' instruction-set level (cpu_isa.h) and
// the public kernel functions, which forward to that level's table.
// Built once (baseline ISA). TQ_CPU_ISA_X86_LEVELS: the build has the
// isa_baseline, isa_avx2 and isa_avx512 copies; TQ_CPU_ISA_NATIVE: only
// isa_native; neither: only isa_baseline (not x86-64).
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/isa_kernels.h"

namespace tq::kernels::cpu {
namespace {

constexpr CpuIsa kAllIsas[] = {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512,
                               CpuIsa::kAvx512Vnni, CpuIsa::kNative};

#if TQ_CPU_ISA_X86_LEVELS
bool CpuHas(CpuIsa isa) {
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the wider registers (XGETBV).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  switch (isa) {
    case CpuIsa::kBaseline:
      return true;
    case CpuIsa::kAvx2:
      return avx2;
    case CpuIsa::kAvx512:
      return avx512;
    case CpuIsa::kAvx512Vnni:
      return avx512 && __builtin_cpu_supports("avx512vnni");
    default:
      return false;
  }
}
#endif

const CpuKernelTable& TableOf(CpuIsa isa) {
#if TQ_CPU_ISA_NATIVE
  (void)isa;
  return isa_native::KernelTable();
#elif TQ_CPU_ISA_X86_LEVELS
  switch (isa) {
    case CpuIsa::kAvx2:
      return isa_avx2::KernelTable();
    case CpuIsa::kAvx512:
    case CpuIsa::kAvx512Vnni:
      return isa_avx512::KernelTable();
    default:
      return isa_baseline::KernelTable();
  }
#else
  (void)isa;
  return isa_baseline::KernelTable();
#endif
}

std::atomic<int> g_active{-1};  // a CpuIsa, -1 until chosen
std::atomic<const CpuKernelTable*> g_table{nullptr};

const CpuKernelTable& Table() {
  const CpuKernelTable* t = g_table.load(std::memory_order_acquire);
  if (t) return *t;
  return TableOf(ActiveCpuIsa());
}

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline:
#if defined(__x86_64__)
      return "x86-64";
#else
      return "generic";
#endif
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx512Vnni:
      return "avx512-vnni";
    case CpuIsa::kNative:
      return "native";
  }
  return "unknown";
}

bool CpuIsaSupported(CpuIsa isa) {
#if TQ_CPU_ISA_NATIVE
  return isa == CpuIsa::kNative;
#elif TQ_CPU_ISA_X86_LEVELS
  return CpuHas(isa);
#else
  return isa == CpuIsa::kBaseline;
#endif
}

std::vector<CpuIsa> SupportedCpuIsas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : kAllIsas) {
    if (CpuIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

CpuIsa ParseCpuIsa(const std::string& value) {
  const std::vector<CpuIsa> supported = SupportedCpuIsas();
  if (value.empty() || value == "auto") return supported.back();
  std::string names;
  for (CpuIsa isa : supported) names += std::string(names.empty() ? "" : ", ") + CpuIsaName(isa);
  for (CpuIsa isa : kAllIsas) {
    if (value != CpuIsaName(isa)) continue;
    if (!CpuIsaSupported(isa)) {
      throw std::invalid_argument("TQ_CPU_ISA=" + value +
                                  ": not supported by this CPU or build (supported: auto, " +
                                  names + ")");
    }
    return isa;
  }
  throw std::invalid_argument("TQ_CPU_ISA=" + value + ": unknown level (supported: auto, " + names +
                              ")");
}

CpuIsa ActiveCpuIsa() {
  const int active = g_active.load(std::memory_order_acquire);
  if (active >= 0) return static_cast<CpuIsa>(active);
  const char* env = std::getenv("TQ_CPU_ISA");
  const CpuIsa isa = ParseCpuIsa(env ? env : "");
  // Concurrent first calls compute the same value; the first store wins.
  int expected = -1;
  if (g_active.compare_exchange_strong(expected, static_cast<int>(isa))) {
    g_table.store(&TableOf(isa), std::memory_order_release);
    return isa;
  }
  return static_cast<CpuIsa>(expected);
}

void SetCpuIsa(CpuIsa isa) {
  if (!CpuIsaSupported(isa)) {
    throw std::invalid_argument(std::string("SetCpuIsa: ") + CpuIsaName(isa) +
                                " is not supported by this CPU or build");
  }
  g_active.store(static_cast<int>(isa), std::memory_order_release);
  g_table.store(&TableOf(isa), std::memory_order_release);
}

#define TQ_CPU_KERNEL_FORWARD(ret, name, params, args) \
  ret name params {                                    \
    return Table().name args;                          \
  }
TQ_CPU_KERNELS(TQ_CPU_KERNEL_FORWARD)

}  // namespace tq::kernels::cpu
