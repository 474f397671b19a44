// Vectorized softmax for the CPU attention kernels (8 lanes, v8f).
#pragma once

#include <cstdint>

namespace tq::kernels::cpu {

/// In-place softmax of s[0..n), n >= 1, 8 lanes at a time (max-subtracted;
/// exp by a Cephes polynomial within ~2 ulp of expf). Defined in
/// cpu_attention.cc; every CPU attention path calls this one, so their
/// probabilities agree bit for bit.
void Softmax(float* s, int32_t n);

}  // namespace tq::kernels::cpu
