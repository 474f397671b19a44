// The on-disk layout of a checkpoint written by `tqserve quantize`
// (docs/quantization.md "Checkpoint layout"): HF names, a linear module
// <m> stored as <m>.qweight (U8 codes, int4 packed two per byte),
// <m>.scales (F16 [out, in / group_size]) and, asymmetric only, <m>.qzeros
// (F16, integral code values); config.json "quantization_config" records
// each module's format.
#pragma once

#include <map>
#include <string>

#include "engine/model/model_config.h"
#include "engine/quant/quant_config.h"

namespace tq::quant {

inline constexpr const char* kQuantMethod = "tqserve-rtn";

/// Tensor name suffixes of a quantized linear module.
inline const std::string kCodesSuffix = ".qweight";
inline const std::string kScalesSuffix = ".scales";
inline const std::string kZerosSuffix = ".qzeros";

/// Per-module formats from <model_dir>/config.json "quantization_config"
/// ({"quant_method": "tqserve-rtn", "modules": {name: {bits, group_size,
/// symmetric}}}). Empty when the checkpoint is not quantized. Throws
/// tq::Error naming config.json for another quant_method (GPTQ/AWQ layouts
/// differ) or a malformed entry.
std::map<std::string, QuantFormat> ReadCheckpointQuantization(const std::string& model_dir);

/// What `tqserve quantize` did, for its report.
struct QuantizeSummary {
  size_t bytes_written = 0;       // safetensors file size
  double average_bits = 0.0;      // over the linear modules
  int32_t quantized_modules = 0;  // embed_tokens / lm_head included when quantized
};

/// Writes <out_dir>/model.safetensors (quantized per `formats`, which must
/// cover LlamaLinearModules(config); embed_tokens and lm_head quantized when
/// `formats` has them (PlanFormats), else 16-bit; norms as stored), config.json with
/// "quantization_config", and copies the tokenizer and generation files. Reads one tensor at a time
/// from the mmapped source. Throws tq::Error naming the file on a missing tensor, a source that is
/// already quantized, or an I/O failure; out_dir is created and must not be model_dir.
QuantizeSummary WriteQuantizedCheckpoint(const std::string& model_dir, const ModelConfig& config,
                                         const std::map<std::string, QuantFormat>& formats,
                                         const std::string& out_dir);

}  // namespace tq::quant
