// tqserve_fault_inject: the tqserve binary plus test-only engine faults
// (issue 20 item 9, issue 41), for tests/integration/fault.test.mjs and
// liveness.test.mjs. Built with the tests, never installed or shipped: the
// tqserve binary has no such code.
//
//   TQSERVE_FAULT_INJECT=engine_step:N   the engine's N-th step (N >= 1)
//                                        throws after scheduling (mid-step)
//   TQSERVE_FAULT_INJECT=engine_stall:N  the engine's N-th step blocks its
//                                        thread for good (a wedged step)
//
// Anything else in TQSERVE_FAULT_INJECT is a usage error (exit 2); unset, the
// binary behaves as tqserve.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/runtime/engine_core.h"
#include "server/cli_commands.h"

namespace {

int64_t g_fault_step = 0;  // written before any engine thread starts

void ThrowAtStep(int64_t step) {
  if (step == g_fault_step) {
    throw std::runtime_error("injected fault at engine step " + std::to_string(step));
  }
}

void StallAtStep(int64_t step) {
  if (step != g_fault_step) return;
  std::fprintf(stderr, "tqserve: fault injection: engine step %lld stalls\n",
               static_cast<long long>(step));
  std::fflush(stderr);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // the process is killed
}

// N of "<prefix>N" (N >= 1), or 0 when `spec` is not that.
long long StepOf(const std::string& spec, const std::string& prefix) {
  if (spec.rfind(prefix, 0) != 0) return 0;
  char* end = nullptr;
  const long long n = std::strtoll(spec.c_str() + prefix.size(), &end, 10);
  return end != nullptr && *end == '\0' && end != spec.c_str() + prefix.size() ? n : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* spec = std::getenv("TQSERVE_FAULT_INJECT"); spec != nullptr && *spec != '\0') {
    const std::string s(spec);
    const long long throw_at = StepOf(s, "engine_step:");
    const long long stall_at = StepOf(s, "engine_stall:");
    if (throw_at < 1 && stall_at < 1) {
      std::fprintf(stderr,
                   "tqserve: TQSERVE_FAULT_INJECT must be engine_step:N or engine_stall:N (N >= "
                   "1), got '%s'\n",
                   spec);
      return 2;
    }
    g_fault_step = throw_at >= 1 ? throw_at : stall_at;
    tq::SetStepFaultHookForTesting(throw_at >= 1 ? &ThrowAtStep : &StallAtStep);
    std::fprintf(stderr, "tqserve: fault injection: engine step %lld will %s\n",
                 static_cast<long long>(g_fault_step), throw_at >= 1 ? "throw" : "stall");
  }
  return tq::RunTqserve(argc, argv);
}
