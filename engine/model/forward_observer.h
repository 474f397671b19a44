// The hook a forward pass offers to calibration: the tq key statistics
// (kv_calibration.h) and the weight quantization search (quant/sensitivity.h)
// watch intermediate tensors through it. Their state lives in the observer,
// outside the serving model, which only holds a pointer that is null while
// serving.
#pragma once

#include <cstdint>
#include <functional>

namespace tq {

/// The inputs of a layer's linear modules: q/k/v share kAttnIn (the normed
/// hidden state), o_proj reads kAttnOut, gate/up share kMlpIn and down_proj
/// reads kMlpDown (silu(gate) * up).
enum class LinearInput : uint8_t { kAttnIn, kAttnOut, kMlpIn, kMlpDown };

/// Sees tensors of LlamaModel::Forward, copied to host fp32 first (any
/// backend), through whichever callbacks are set (either may be empty; the
/// host copies are made only for those set). Called on the thread that runs
/// the model's forward pass (under tensor parallelism each rank's model has
/// its own observer, called on that rank's thread with that rank's heads).
/// While a model has an observer every step runs eagerly (a captured CUDA
/// graph cannot call the host); a model without one pays a null check per
/// layer and nothing else.
struct ForwardObserver {
  /// A layer's keys before RoPE, as the cache stores them (after Qwen3's
  /// k_norm): keys [num_tokens, num_kv_heads of the rank, head_dim].
  std::function<void(int32_t layer, const float* keys, int32_t num_tokens)> on_keys = {};
  /// A linear module's input x [rows, cols] (row-major).
  std::function<void(int32_t layer, LinearInput input, const float* x, int32_t rows, int32_t cols)>
      on_linear_input = {};
};

}  // namespace tq
