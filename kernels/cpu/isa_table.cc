// One level's table of entry points (isa_kernels.h), compiled per level.
#include "kernels/cpu/isa_begin.h"

namespace tq::kernels::cpu::TQ_CPU_ISA_NS {

#define TQ_CPU_KERNEL_ADDRESS(ret, name, params, args) &name,

const CpuKernelTable& KernelTable() {
  static constexpr CpuKernelTable table{TQ_CPU_KERNELS(TQ_CPU_KERNEL_ADDRESS)};
  return table;
}

}  // namespace tq::kernels::cpu::TQ_CPU_ISA_NS

#include "kernels/cpu/isa_end.h"
