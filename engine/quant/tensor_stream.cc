// Chunked conversion and quantization of checkpoint tensors.
#include "engine/quant/tensor_stream.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "engine/common/error.h"
#include "kernels/half.h"

namespace tq::quant {
namespace {

void CheckFloatTensor(const TensorInfo& t) {
  if (t.dtype != TensorDtype::kF32 && t.dtype != TensorDtype::kF16 &&
      t.dtype != TensorDtype::kBF16) {
    throw Error(t.file + ": tensor " + t.name + " has dtype " + TensorDtypeName(t.dtype) +
                ", expected F32, F16 or BF16");
  }
}

}  // namespace

void ReadFloatRange(const TensorInfo& t, int64_t begin, int64_t count, std::vector<float>* out) {
  CheckFloatTensor(t);
  out->resize(static_cast<size_t>(count));
  t.Elements(begin, count).ToFloat(out->data());
}

void ConvertTensor(const TensorInfo& t, kernels::WeightDtype target, const DenseChunkSink& sink) {
  using kernels::WeightDtype;
  CheckFloatTensor(t);
  if (target != WeightDtype::kF32 && target != WeightDtype::kF16 && target != WeightDtype::kBF16) {
    throw Error(t.file + ": tensor " + t.name + ": conversion target is not a dense format");
  }
  const bool same = (target == WeightDtype::kF32 && t.dtype == TensorDtype::kF32) ||
                    (target == WeightDtype::kF16 && t.dtype == TensorDtype::kF16) ||
                    (target == WeightDtype::kBF16 && t.dtype == TensorDtype::kBF16);
  const int64_t n = t.NumElements();
  std::vector<float> f32;
  std::vector<uint16_t> u16;
  for (int64_t begin = 0; begin < n; begin += kStreamChunkElems) {
    const int64_t count = std::min(kStreamChunkElems, n - begin);
    if (same) {
      sink(begin, count, t.data + static_cast<size_t>(begin) * TensorDtypeBytes(t.dtype));
      continue;
    }
    ReadFloatRange(t, begin, count, &f32);
    if (target == WeightDtype::kF32) {
      sink(begin, count, f32.data());
      continue;
    }
    u16.resize(f32.size());
    for (size_t i = 0; i < f32.size(); ++i) {
      u16[i] = target == WeightDtype::kBF16 ? kernels::FloatToBf16(f32[i])
                                            : kernels::FloatToHalf(f32[i]);
    }
    sink(begin, count, u16.data());
  }
}

void QuantizeTensor(const TensorInfo& t, const QuantFormat& f, const QuantChunkSink& sink) {
  CheckFloatTensor(t);
  if (t.shape.size() != 2) throw Error(t.file + ": tensor " + t.name + " is not a matrix");
  const int64_t out = t.shape[0];
  const auto in = static_cast<int32_t>(t.shape[1]);
  CheckFormat(f, in, t.file + ": tensor " + t.name);
  if (!f.quantized()) throw Error(t.file + ": tensor " + t.name + ": not an integer format");
  const int64_t rows_per_chunk = std::max<int64_t>(1, kStreamChunkElems / std::max(in, 1));
  const int64_t code_bytes = CodeBytesPerRow(f, in);
  const int64_t groups = in / f.group_size;
  std::vector<float> f32;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales, zeros;
  for (int64_t r0 = 0; r0 < out; r0 += rows_per_chunk) {
    const int64_t rows = std::min(rows_per_chunk, out - r0);
    ReadFloatRange(t, r0 * in, rows * in, &f32);
    codes.resize(static_cast<size_t>(rows * code_bytes));
    scales.resize(static_cast<size_t>(rows * groups));
    zeros.resize(f.symmetric ? 0 : static_cast<size_t>(rows * groups));
    // Rows are independent: split them over the cores (the clip search makes
    // quantizing ~16x a plain pass; a 7B model is 6.5 G weights).
    const int64_t workers = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1,
                                                std::max<int64_t>(1, rows / 64));
    std::vector<std::string> errors(static_cast<size_t>(workers));
    auto work = [&](int64_t w) {
      const int64_t r0 = rows * w / workers, r1 = rows * (w + 1) / workers;
      try {
        QuantizeRows(f32.data() + r0 * in, r1 - r0, in, f, codes.data() + r0 * code_bytes,
                     scales.data() + r0 * groups,
                     f.symmetric ? nullptr : zeros.data() + r0 * groups);
      } catch (const Error& e) {
        errors[static_cast<size_t>(w)] = e.what();
      }
    };
    std::vector<std::thread> threads;
    for (int64_t w = 1; w < workers; ++w) threads.emplace_back(work, w);
    work(0);
    for (std::thread& th : threads) th.join();
    for (const std::string& e : errors) {
      if (!e.empty()) throw Error(t.file + ": tensor " + t.name + ": " + e);
    }
    sink(r0, rows, codes.data(), scales.data(), f.symmetric ? nullptr : zeros.data());
  }
}

}  // namespace tq::quant
