#include "kernels/op_params.h"

namespace tq::kernels {

std::string WeightDtypeName(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::kF32:
      return "fp32";
    case WeightDtype::kF16:
      return "fp16";
    case WeightDtype::kBF16:
      return "bf16";
    case WeightDtype::kInt8:
      return "int8";
    case WeightDtype::kInt4:
      return "int4";
    case WeightDtype::kF32Panels:
      return "fp32 panels";
    case WeightDtype::kInt8Tiles:
      return "int8 tiles";
    case WeightDtype::kInt4Tiles:
      return "int4 tiles";
    case WeightDtype::kF16Panels:
      return "fp16 panels";
    case WeightDtype::kBF16Panels:
      return "bf16 panels";
  }
  return "unknown(" + std::to_string(static_cast<int>(dtype)) + ")";
}

WeightDtype LogicalWeightDtype(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::kF32Panels:
      return WeightDtype::kF32;
    case WeightDtype::kF16Panels:
      return WeightDtype::kF16;
    case WeightDtype::kBF16Panels:
      return WeightDtype::kBF16;
    case WeightDtype::kInt8Tiles:
      return WeightDtype::kInt8;
    case WeightDtype::kInt4Tiles:
      return WeightDtype::kInt4;
    default:
      return dtype;
  }
}

}  // namespace tq::kernels
