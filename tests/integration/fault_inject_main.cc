// tqserve_fault_inject: the tqserve binary plus a test-only engine fault
// (issue 20 item 9), for tests/integration/fault.test.mjs. Built with the
// tests, never installed or shipped: the tqserve binary has no such code.
//
//   TQSERVE_FAULT_INJECT=engine_step:N   the engine's N-th step (N >= 1)
//                                        throws after scheduling (mid-step)
//
// Anything else in TQSERVE_FAULT_INJECT is a usage error (exit 2); unset, the
// binary behaves as tqserve.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "engine/runtime/engine_core.h"
#include "server/cli_commands.h"

namespace {

int64_t g_fault_step = 0;  // written before any engine thread starts

void ThrowAtStep(int64_t step) {
  if (step == g_fault_step) {
    throw std::runtime_error("injected fault at engine step " + std::to_string(step));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* spec = std::getenv("TQSERVE_FAULT_INJECT"); spec != nullptr && *spec != '\0') {
    const std::string s(spec);
    const std::string prefix = "engine_step:";
    char* end = nullptr;
    const long long n =
        s.rfind(prefix, 0) == 0 ? std::strtoll(s.c_str() + prefix.size(), &end, 10) : 0;
    if (n < 1 || end == nullptr || *end != '\0') {
      std::fprintf(
          stderr, "tqserve: TQSERVE_FAULT_INJECT must be engine_step:N (N >= 1), got '%s'\n", spec);
      return 2;
    }
    g_fault_step = n;
    tq::SetStepFaultHookForTesting(&ThrowAtStep);
    std::fprintf(stderr, "tqserve: fault injection: engine step %lld will throw\n", n);
  }
  return tq::RunTqserve(argc, argv);
}
