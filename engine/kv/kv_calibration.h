// Calibration of the per-channel key normalization of the tq3/tq4 KV cache formats.
//
// tq3 quantizes keys before RoPE after normalizing each channel: x = (k_pre − μ) / σ, with a
// mean μ and scale σ per layer, per KV head and per channel (../shared/DESIGN.md, "KV cache").
// Pre-RoPE keys carry a few channels with large, consistent offsets and magnitudes; removing
// them per channel is what lets a 3-bit rotated codebook work. μ and σ are measured, not
// guessed: a short text (by default the built-in one below, else a user's file) is run
// through the model with an uncompressed cache while a ForwardObserver (on_keys) feeds each
// layer's pre-RoPE keys to a KeyStatsAccumulator. The result can be saved and loaded so that
// start-up does not repeat the run.
//
// Source: C. Hooper et al., "KVQuant: Towards 10 Million Context Length LLM Inference with KV
// Cache Quantization", arXiv 2401.18079 (per-channel, pre-RoPE key quantization with
// calibrated statistics).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tq {

/// Per-channel statistics of pre-RoPE keys: mean and scale, each laid out
/// [num_layers][num_kv_heads][head_dim] (row-major, key units).
struct KeyChannelStats {
  int32_t num_layers = 0, num_kv_heads = 0, head_dim = 0;
  /// mean: per-channel mean of the keys. scale: per-channel population standard deviation,
  /// floored at 1e-6 × the largest standard deviation of the same layer and KV head, so it is
  /// always positive and finite (1.0 for every channel of a head whose keys were all constant).
  std::vector<float> mean, scale;
  /// Tokens the statistics were computed from (per layer; the fewest any layer saw).
  int64_t num_tokens = 0;
  /// Identifies the model the stats belong to (LoadModel: a hash of the
  /// layer-0 key projection); "" = unknown. LoadKeyStats refuses a mismatch,
  /// since another model's statistics silently wreck quality.
  std::string model_fingerprint;
  /// Where they came from: "built-in text", a text file's path, or, after LoadKeyStats,
  /// "loaded from <path>" followed by the saved source in parentheses when there is one.
  std::string source;

  /// The layer's means, [num_kv_heads * head_dim]. Throws std::out_of_range for a bad layer.
  const float* Mean(int32_t layer) const;
  /// The layer's scales, [num_kv_heads * head_dim]. Throws std::out_of_range for a bad layer.
  const float* Scale(int32_t layer) const;
};

/// Running per-channel sums of pre-RoPE keys, in double precision (each Add is reduced in two
/// passes and merged with Chan et al.'s parallel update, so large channel offsets do not
/// cancel the variance). Not thread-safe: fed from the engine thread only, typically by a
/// ForwardObserver::on_keys.
class KeyStatsAccumulator {
 public:
  /// Throws std::invalid_argument unless all three sizes are positive.
  KeyStatsAccumulator(int32_t num_layers, int32_t num_kv_heads, int32_t head_dim);

  /// Adds `num_tokens` keys of `layer`: keys is [num_tokens, num_kv_heads, head_dim] fp32 in
  /// host memory (the ForwardObserver::on_keys layout). num_tokens == 0 is a no-op. Throws
  /// std::invalid_argument for a layer out of range, a negative count, or null keys.
  void Add(int32_t layer, const float* keys, int32_t num_tokens);

  /// Tokens added so far to `layer`. Throws std::out_of_range for a bad layer.
  int64_t tokens(int32_t layer) const;

  /// The statistics so far, labelled with `source`. Throws tq::Error if a layer saw no tokens
  /// or the keys were not finite (NaN/Inf in the model's activations).
  KeyChannelStats Finish(std::string source) const;

 private:
  int32_t num_layers_, num_kv_heads_, head_dim_;
  std::vector<int64_t> count_;  // [num_layers]
  std::vector<double> mean_;    // [num_layers][num_kv_heads][head_dim]
  std::vector<double> m2_;      // sum of squared deviations from mean_, same layout
};

/// The built-in calibration text (original short children's stories, a few hundred tokens
/// for a Llama tokenizer), compiled into the binary. Source: calibration_text.inc.
std::string_view BuiltinCalibrationText();

/// The built-in held-out text of `--kv-cache-dtype auto` (original prose, a few hundred
/// tokens: a short story, then expository and formal English), scored with each candidate
/// format and never used for the statistics. Source: calibration_heldout.inc.
std::string_view BuiltinHeldOutText();

/// Writes `stats` to `path` as JSON (nlohmann): {"format": "tqserve-key-channel-stats",
/// "version": 1, "num_layers", "num_kv_heads", "head_dim", "num_tokens", "source",
/// "mean": [layer][head][channel], "scale": [layer][head][channel]}. Floats are written with
/// enough digits to read back bit-exactly. Written to "<path>.tmp" and renamed, so readers
/// never see a partial file. Throws tq::Error "<path>: ..." when the file cannot be written
/// and std::invalid_argument when the stats' vectors disagree with their shape.
void SaveKeyStats(const std::string& path, const KeyChannelStats& stats);

/// Reads statistics written by SaveKeyStats and checks them against the model's shape.
/// Throws tq::Error "<path>: ..." for a missing or unreadable file, invalid JSON, a missing or
/// wrongly typed field, a shape other than num_layers × num_kv_heads × head_dim, a mean that
/// is not finite, or a scale that is not finite and positive.
KeyChannelStats LoadKeyStats(const std::string& path, int32_t num_layers, int32_t num_kv_heads,
                             int32_t head_dim, const std::string& model_fingerprint = "");

}  // namespace tq
