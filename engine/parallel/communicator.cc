#include "engine/parallel/communicator.h"

namespace tq {

size_t CommDtypeBytes(CommDtype dtype) {
  return dtype == CommDtype::kF32 ? 4 : 2;
}

std::string_view CommDtypeName(CommDtype dtype) {
  switch (dtype) {
    case CommDtype::kF32:
      return "fp32";
    case CommDtype::kF16:
      return "fp16";
    case CommDtype::kBF16:
      return "bf16";
  }
  return "?";
}

}  // namespace tq
