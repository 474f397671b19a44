// Activation second moments, candidate scoring and greedy bit allocation.
#include "engine/quant/sensitivity.h"

#include <algorithm>
#include <span>

#include "engine/common/error.h"
#include "engine/quant/tensor_stream.h"
#include "engine/runtime/offline_engine.h"

namespace tq::quant {
namespace {

LinearInput InputOf(const LinearModule& m) {
  if (m.short_name == "self_attn.o_proj") return LinearInput::kAttnOut;
  if (m.short_name == "mlp.down_proj") return LinearInput::kMlpDown;
  if (m.short_name.rfind("mlp.", 0) == 0) return LinearInput::kMlpIn;
  return LinearInput::kAttnIn;
}

}  // namespace

ActivationMoments::ActivationMoments(const ModelConfig& config)
    : sums_(static_cast<size_t>(config.num_hidden_layers) * kInputs), rows_(sums_.size(), 0) {}

void ActivationMoments::Add(int32_t layer, LinearInput input, const float* x, int32_t rows,
                            int32_t cols) {
  const size_t slot = static_cast<size_t>(layer) * kInputs + static_cast<size_t>(input);
  std::vector<double>& s = sums_.at(slot);
  if (s.empty()) s.assign(static_cast<size_t>(cols), 0.0);
  for (int32_t r = 0; r < rows; ++r) {
    const float* row = x + static_cast<int64_t>(r) * cols;
    for (int32_t i = 0; i < cols; ++i) s[i] += static_cast<double>(row[i]) * row[i];
  }
  rows_[slot] += rows;
  if (layer == 0 && input == LinearInput::kAttnIn) tokens_ += rows;
}

std::vector<double> ActivationMoments::SecondMoments(const LinearModule& m) const {
  const size_t slot = static_cast<size_t>(m.layer) * kInputs + static_cast<size_t>(InputOf(m));
  if (slot >= sums_.size() || rows_[slot] == 0) {
    throw Error("sensitivity: no calibration activations for " + m.name);
  }
  std::vector<double> out = sums_[slot];
  for (double& v : out) v /= static_cast<double>(rows_[slot]);
  return out;
}

ActivationMoments MeasureActivationMoments(OfflineEngine& generator,
                                           const std::vector<int32_t>& tokens) {
  ActivationMoments moments(generator.files().config);
  LlamaModel& model = generator.model();
  ForwardObserver observer{
      .on_linear_input = [&](int32_t layer, LinearInput input, const float* x, int32_t rows,
                             int32_t cols) { moments.Add(layer, input, x, rows, cols); }};
  const ScopedForwardObserver scoped(model, &observer);
  const size_t window = static_cast<size_t>(generator.max_model_len());
  for (size_t begin = 0; begin < tokens.size(); begin += window) {
    const size_t n = std::min(window, tokens.size() - begin);
    generator.PromptLogits(std::span<const int32_t>(tokens.data() + begin, n));
  }
  return moments;
}

std::vector<QuantFormat> CandidateFormats(int64_t in_features, bool symmetric) {
  std::vector<int32_t> groups;
  for (int32_t g = 32; g <= 256; g += 2) {
    if (in_features % g == 0) groups.push_back(g);
  }
  if (groups.empty()) groups.push_back(static_cast<int32_t>(in_features));
  std::vector<QuantFormat> out;
  for (int32_t bits : {4, 8}) {
    for (int32_t g : groups) {
      if (bits == 4 && g % 2 != 0) continue;
      out.push_back({bits, g, symmetric});
    }
  }
  out.push_back({16, 0, false});
  return out;
}

std::vector<ModuleCandidates> ScoreModules(const SafetensorsCheckpoint& checkpoint,
                                           const ModelConfig& config,
                                           const ActivationMoments& moments, bool symmetric,
                                           LossScale scale) {
  if (config.moe.enabled()) {
    throw Error(config.architecture +
                ": the sensitivity search does not measure mixture-of-experts layers yet "
                "(issue 42 item 5); quantize it with --config (e.g. configs/moe_mix4b8b.json)");
  }
  std::vector<ModuleCandidates> out;
  std::vector<float> rows;
  for (const LinearModule& m : LlamaLinearModules(config)) {
    const TensorInfo& t = checkpoint.Require(m.name + ".weight", {m.out_features, m.in_features});
    const std::vector<double> ex2 = moments.SecondMoments(m);
    const std::vector<QuantFormat> formats = CandidateFormats(m.in_features, symmetric);
    std::vector<std::vector<double>> err(formats.size(),
                                         std::vector<double>(static_cast<size_t>(m.in_features)));
    std::vector<double> w2(static_cast<size_t>(m.in_features), 0.0);  // sum_o w_oi^2
    const int64_t chunk = std::max<int64_t>(1, kStreamChunkElems / m.in_features);
    for (int64_t r0 = 0; r0 < m.out_features; r0 += chunk) {
      const int64_t n = std::min(chunk, m.out_features - r0);
      ReadFloatRange(t, r0 * m.in_features, n * m.in_features, &rows);
      for (size_t k = 0; k < rows.size(); ++k) {
        w2[k % w2.size()] += static_cast<double>(rows[k]) * rows[k];
      }
      for (size_t k = 0; k < formats.size(); ++k) {
        AccumulateColumnError(rows.data(), n, static_cast<int32_t>(m.in_features), formats[k],
                              err[k].data());
      }
    }
    // E||W x||^2 under the same diagonal approximation.
    double energy = 0.0;
    for (size_t i = 0; i < ex2.size(); ++i) energy += ex2[i] * w2[i];
    ModuleCandidates mc{m, {}};
    for (size_t k = 0; k < formats.size(); ++k) {
      double loss = 0.0;
      for (size_t i = 0; i < ex2.size(); ++i) loss += ex2[i] * err[k][i];
      if (scale == LossScale::kRelative && energy > 0.0) loss /= energy;
      mc.candidates.push_back({formats[k], BitsPerWeight(formats[k]), loss});
    }
    out.push_back(std::move(mc));
  }
  return out;
}

std::map<std::string, QuantFormat> AllocateBits(const std::vector<ModuleCandidates>& scored,
                                                double target_bits) {
  double params = 0.0, used = 0.0;
  std::vector<size_t> choice(scored.size());
  for (size_t m = 0; m < scored.size(); ++m) {
    const auto& c = scored[m].candidates;
    if (c.empty()) throw Error("sensitivity: no candidate format for " + scored[m].module.name);
    size_t best = 0;
    for (size_t k = 1; k < c.size(); ++k) {
      if (c[k].bits < c[best].bits || (c[k].bits == c[best].bits && c[k].loss < c[best].loss)) {
        best = k;
      }
    }
    choice[m] = best;
    const double n =
        static_cast<double>(scored[m].module.out_features * scored[m].module.in_features);
    params += n;
    used += n * c[best].bits;
  }
  const double budget = target_bits * params;
  if (used > budget * (1 + 1e-12)) {
    throw Error("--target-bits " + std::to_string(target_bits) +
                " is below the smallest possible average, " + std::to_string(used / params) +
                " bits per weight");
  }
  for (;;) {
    double best_ratio = 0.0;
    size_t best_m = 0, best_k = 0;
    for (size_t m = 0; m < scored.size(); ++m) {
      const auto& c = scored[m].candidates;
      const Candidate& cur = c[choice[m]];
      const double n =
          static_cast<double>(scored[m].module.out_features * scored[m].module.in_features);
      for (size_t k = 0; k < c.size(); ++k) {
        const double added = n * (c[k].bits - cur.bits);
        const double gain = cur.loss - c[k].loss;
        if (added <= 0.0 || gain <= 0.0 || used + added > budget * (1 + 1e-12)) continue;
        if (gain / added > best_ratio) {
          best_ratio = gain / added;
          best_m = m;
          best_k = k;
        }
      }
    }
    if (best_ratio <= 0.0) break;
    const double n =
        static_cast<double>(scored[best_m].module.out_features * scored[best_m].module.in_features);
    used += n * (scored[best_m].candidates[best_k].bits -
                 scored[best_m].candidates[choice[best_m]].bits);
    choice[best_m] = best_k;
  }
  std::map<std::string, QuantFormat> out;
  for (size_t m = 0; m < scored.size(); ++m) {
    out[scored[m].module.name] = scored[m].candidates[choice[m]].format;
  }
  return out;
}

double TotalLoss(const std::vector<ModuleCandidates>& scored,
                 const std::map<std::string, QuantFormat>& formats) {
  double total = 0.0;
  for (const ModuleCandidates& mc : scored) {
    const QuantFormat& f = formats.at(mc.module.name);
    const auto it = std::find_if(mc.candidates.begin(), mc.candidates.end(),
                                 [&](const Candidate& c) { return c.format == f; });
    if (it == mc.candidates.end()) {
      throw Error("sensitivity: " + f.ToString() + " was not scored for " + mc.module.name);
    }
    total += it->loss;
  }
  return total;
}

}  // namespace tq::quant
