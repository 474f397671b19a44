// Streams a checkpoint tensor (read from its mmap) through a bounded host
// buffer, converted to a dense format or quantized, for the loader and for
// `tqserve quantize`: neither ever holds a whole fp32 copy of a model.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/model/safetensors.h"
#include "engine/quant/group_quant.h"
#include "kernels/op_params.h"

namespace tq::quant {

/// Elements per chunk (64 MB of fp32).
inline constexpr int64_t kStreamChunkElems = int64_t{16} << 20;

/// Elements [begin, begin + count) of a float tensor as fp32 into *out.
void ReadFloatRange(const TensorInfo& t, int64_t begin, int64_t count, std::vector<float>* out);

/// Receives elements [begin, begin + count) of the converted tensor:
/// `bytes` holds count elements of the target format.
using DenseChunkSink = std::function<void(int64_t begin, int64_t count, const void* bytes)>;

/// Converts a float tensor (F32/F16/BF16) to target (kF32, kF16 or kBF16,
/// round to nearest even), chunk by chunk. Throws tq::Error naming the file
/// and tensor for an integer tensor or a non-dense target.
void ConvertTensor(const TensorInfo& t, kernels::WeightDtype target, const DenseChunkSink& sink);

/// Receives rows [first_row, first_row + rows): codes (rows *
/// CodeBytesPerRow bytes), scales and zeros (rows * groups fp16 bits; zeros
/// null when symmetric).
using QuantChunkSink = std::function<void(int64_t first_row, int64_t rows, const uint8_t* codes,
                                          const uint16_t* scales, const uint16_t* zeros)>;

/// Quantizes a float tensor of shape [out, in] (QuantizeRows) a chunk of rows
/// at a time. Throws tq::Error "<file>: tensor <name>: ..." on a bad format
/// or weight.
void QuantizeTensor(const TensorInfo& t, const QuantFormat& f, const QuantChunkSink& sink);

}  // namespace tq::quant
