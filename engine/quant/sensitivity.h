// Per-module quantization sensitivity and bit allocation (`tqserve quantize
// --calibration-text FILE --target-bits B`, docs/quantization.md).
//
// The loss of storing module W in format q is estimated with the diagonal of
// the layer-wise Hessian E[x xᵀ] that GPTQ (Frantar et al. 2022, arXiv
// 2210.17323) and AWQ (Lin et al. 2023, arXiv 2306.00978) start from:
//   L(W, q) = sum_i E[x_i²] · sum_o (w_oi − q(w)_oi)²,
// the expected squared output error E‖(W − q(W)) x‖² when the input channels
// are uncorrelated. Formats are then chosen per module so that the
// parameter-weighted average bits per weight is <= B while the summed loss is
// as small as a greedy search by loss reduction per added bit finds.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/model/llama_model.h"
#include "engine/model/safetensors.h"
#include "engine/quant/quant_config.h"

namespace tq {
class OfflineEngine;
}

namespace tq::quant {

/// Per-channel second moments E[x_i²] of every layer's linear inputs,
/// accumulated over calibration tokens (float64 sums). Not thread-safe.
class ActivationMoments {
 public:
  explicit ActivationMoments(const ModelConfig& config);

  /// Adds rows of x [rows, cols] observed at (layer, input).
  void Add(int32_t layer, LinearInput input, const float* x, int32_t rows, int32_t cols);
  /// E[x_i²] of the input that `module` reads ([in_features]); throws
  /// tq::Error when no token was observed.
  std::vector<double> SecondMoments(const LinearModule& module) const;
  int64_t tokens() const { return tokens_; }

 private:
  static constexpr int kInputs = 4;
  std::vector<std::vector<double>> sums_;  // [layer * kInputs + input][cols]
  std::vector<int64_t> rows_;              // rows added per slot
  int64_t tokens_ = 0;                     // rows seen at (layer 0, kAttnIn)
};

/// Runs the model over `tokens` (windows of max_model_len, each starting a
/// new sequence) with an activation observer and returns the moments. The
/// generator must use the CPU backend.
ActivationMoments MeasureActivationMoments(OfflineEngine& generator,
                                           const std::vector<int32_t>& tokens);

/// One candidate format of a module with its storage cost and estimated loss.
struct Candidate {
  QuantFormat format;
  double bits = 0.0;  // BitsPerWeight(format)
  double loss = 0.0;  // L(W, format) above
};

/// The formats tried for a module with in_features inputs: int4 and int8
/// (asymmetric, or symmetric when `symmetric`) for every even group size in
/// [32, 256] that divides in_features (in_features itself when none does),
/// and dense 16-bit.
std::vector<QuantFormat> CandidateFormats(int64_t in_features, bool symmetric);

struct ModuleCandidates {
  LinearModule module;
  std::vector<Candidate> candidates;
};

/// How module losses are made comparable across modules. kAbsolute is L
/// above (GPTQ/AWQ's per-layer objective). kRelative divides it by the
/// module's output energy E||W x||^2 = sum_i E[x_i^2] sum_o w_oi^2 (same
/// diagonal approximation), a noise-to-signal ratio: q/k outputs (attention
/// logits) and MLP outputs live on different scales, and on stories260K the
/// absolute sum spends bits on q/k and loses to the uniform config while the
/// relative one beats it (docs/quantization.md).
enum class LossScale : uint8_t { kAbsolute, kRelative };

/// Scores every candidate of every linear module of `config` (weights from
/// the checkpoint, one tensor at a time). Throws tq::Error on a missing tensor.
std::vector<ModuleCandidates> ScoreModules(const SafetensorsCheckpoint& checkpoint,
                                           const ModelConfig& config,
                                           const ActivationMoments& moments, bool symmetric,
                                           LossScale scale = LossScale::kRelative);

/// Picks one candidate per module: starts from each module's cheapest
/// format and repeatedly applies the upgrade with the largest loss reduction
/// per added bit that keeps the parameter-weighted average <= target_bits.
/// Throws tq::Error when even the cheapest formats exceed target_bits.
std::map<std::string, QuantFormat> AllocateBits(const std::vector<ModuleCandidates>& scored,
                                                double target_bits);

/// Summed loss of a choice (for reports and tests).
double TotalLoss(const std::vector<ModuleCandidates>& scored,
                 const std::map<std::string, QuantFormat>& formats);

}  // namespace tq::quant
