// tq_cpu_isa_run LEVEL PROGRAM [ARGS...]: runs PROGRAM with TQ_CPU_ISA=LEVEL
// (kernels/cpu/cpu_isa.h), or exits 77 (CTest's SKIP_RETURN_CODE) when this
// CPU or build lacks the level, so the cpu_isa.<level>.* tests run every
// level the test machine has and skip the others.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "kernels/cpu/cpu_isa.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LEVEL PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  try {
    tq::kernels::cpu::ParseCpuIsa(argv[1]);
  } catch (const std::invalid_argument& e) {
    std::printf("skipped: %s\n", e.what());
    return 77;
  }
  setenv("TQ_CPU_ISA", argv[1], 1);
  execv(argv[2], argv + 2);
  std::perror(argv[2]);
  return 2;
}
