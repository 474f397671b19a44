// The registry's table (architectures.h): one entry per family file in
// engine/model/arch/.
#include "engine/model/architectures.h"

#include <array>

#include "engine/model/arch/families.h"

namespace tq {
namespace {

const std::array<const ArchitectureSpec*, 7>& Registry() {
  static const std::array<const ArchitectureSpec*, 7> table = {
      &arch::Llama(),   &arch::Mistral(),  &arch::Qwen2(),   &arch::Qwen3(),
      &arch::Mixtral(), &arch::Qwen2Moe(), &arch::Qwen3Moe()};
  return table;
}

}  // namespace

const ArchitectureSpec* FindArchitecture(std::string_view architecture) {
  for (const ArchitectureSpec* s : Registry()) {
    if (s->architecture == architecture) return s;
  }
  return nullptr;
}

const ArchitectureSpec* FindArchitectureByModelType(std::string_view model_type) {
  for (const ArchitectureSpec* s : Registry()) {
    if (s->model_type == model_type) return s;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::string out;
  for (const ArchitectureSpec* s : Registry()) {
    out += (out.empty() ? "" : ", ") + std::string(s->architecture);
  }
  return out;
}

}  // namespace tq
