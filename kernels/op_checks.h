// Host-side validation of every op's params struct, shared by the backends
// that cannot check on the fly (the CUDA backend: a bad size there is an
// out-of-bounds access on the device, not an exception). Checks shapes and
// null pointers, never the contents of device memory. Each throws
// std::invalid_argument with a one-line message "<backend> <Op>: <field> ...".
#pragma once

#include <string_view>

#include "kernels/op_params.h"

namespace tq::kernels {

void CheckEmbedding(std::string_view backend, const EmbeddingParams& p);
void CheckRmsNorm(std::string_view backend, const RmsNormParams& p);
/// A linear weight of any WeightDtype: positive shape, data, and for int8/int4
/// scales and a group_size dividing in_features (even for int4); kF32Panels
/// needs whole panels, kInt8Tiles/kInt4Tiles whole tiles and chunks. Used by every backend's MatMul
/// (the CPU one included: its kernels index by these fields without further checks).
void CheckWeightView(std::string_view backend, std::string_view op, const WeightView& w);
void CheckMatMul(std::string_view backend, const MatMulParams& p);
void CheckRope(std::string_view backend, const RopeParams& p);
void CheckSiluMul(std::string_view backend, const SiluMulParams& p);
/// The layer view of a KV op: positive shape, both pools, a codec for the tq
/// formats, sink only with a tq format and <= block_size tokens.
void CheckKvLayerView(std::string_view backend, std::string_view op, const KvLayerView& cache);
void CheckKvWrite(std::string_view backend, const KvWriteParams& p);
void CheckPagedAttention(std::string_view backend, const PagedAttentionParams& p);
void CheckLogitsTopK(std::string_view backend, const LogitsTopKParams& p);

}  // namespace tq::kernels
