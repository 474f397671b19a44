#include "kernels/kv_layout.h"

namespace tq::kernels {

size_t KvDtypeElementBytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return 4;
    case KvDtype::kF16:
    case KvDtype::kBF16:
      return 2;
  }
  return 0;
}

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return "fp32";
    case KvDtype::kF16:
      return "fp16";
    case KvDtype::kBF16:
      return "bf16";
  }
  return "?";
}

bool ParseKvDtype(std::string_view name, KvDtype* out) {
  if (name == "fp32" || name == "float32") {
    *out = KvDtype::kF32;
  } else if (name == "fp16" || name == "float16" || name == "half") {
    *out = KvDtype::kF16;
  } else if (name == "bf16" || name == "bfloat16") {
    *out = KvDtype::kBF16;
  } else {
    return false;
  }
  return true;
}

}  // namespace tq::kernels
