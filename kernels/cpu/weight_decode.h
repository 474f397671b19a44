// Decoding of the non-fp32 weight formats (kernels/op_params.h WeightDtype) to
// fp32, one output feature (one row of the [out, in] weight) at a time. The
// packed matmul decodes a few rows into a small per-thread buffer and runs the
// fp32 micro-kernel over it, so no dequantized copy of a whole matrix exists.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/op_params.h"

namespace tq::kernels::cpu {

/// Writes dst[i] = w[o, i] for i in [0, in_features) as fp32. Integer formats
/// follow op_params.h exactly: dst[i] = scale * (code - zero), computed as
/// (float(code) - zero) * scale (the subtraction is exact, the product rounds
/// once), so any reference that dequantizes the same way gets the same bits.
/// w must have passed CheckWeightView (kernels/op_checks.h); dst holds in_features floats.
void DecodeWeightRow(const WeightView& w, int64_t o, float* dst);

}  // namespace tq::kernels::cpu
