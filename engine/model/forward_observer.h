// The hook a forward pass offers to calibration: the tq key statistics
// (kv_calibration.h) and the weight quantization search (quant/sensitivity.h)
// watch intermediate tensors through it. Their state lives in the observer,
// outside the serving model, which only holds a pointer that is null while
// serving.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

namespace tq {

/// The inputs of a layer's linear modules: q/k/v share kAttnIn (the normed
/// hidden state), o_proj reads kAttnOut, gate/up share kMlpIn and down_proj
/// reads kMlpDown (silu(gate) * up).
enum class LinearInput : uint8_t { kAttnIn, kAttnOut, kMlpIn, kMlpDown };

/// Sees tensors of LlamaModel::Forward, copied to host fp32 first (any
/// backend). Called on the thread that runs the model's forward pass (under
/// tensor parallelism each rank's model has its own observer, called on that
/// rank's thread with that rank's heads). While a model has an observer every
/// step runs eagerly (a captured CUDA graph cannot call the host); a model
/// without one pays a null check per layer and nothing else.
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  /// Wants OnKeys / OnLinearInput calls (the host copies are made only then).
  virtual bool wants_keys() const { return false; }
  virtual bool wants_linear_inputs() const { return false; }
  /// A layer's keys before RoPE, as the cache stores them (after Qwen3's
  /// k_norm): keys [num_tokens, num_kv_heads of the rank, head_dim].
  virtual void OnKeys(int32_t /*layer*/, const float* /*keys*/, int32_t /*num_tokens*/) {}
  /// A linear module's input x [rows, cols] (row-major).
  virtual void OnLinearInput(int32_t /*layer*/, LinearInput /*input*/, const float* /*x*/,
                             int32_t /*rows*/, int32_t /*cols*/) {}
};

/// A ForwardObserver made of callbacks (either may be empty: not wanted).
class CallbackObserver final : public ForwardObserver {
 public:
  using KeysFn = std::function<void(int32_t layer, const float* keys, int32_t num_tokens)>;
  using LinearInputFn = std::function<void(int32_t layer, LinearInput input, const float* x,
                                           int32_t rows, int32_t cols)>;
  explicit CallbackObserver(KeysFn on_keys, LinearInputFn on_linear_input = {})
      : on_keys_(std::move(on_keys)), on_linear_input_(std::move(on_linear_input)) {}

  bool wants_keys() const override { return static_cast<bool>(on_keys_); }
  bool wants_linear_inputs() const override { return static_cast<bool>(on_linear_input_); }
  void OnKeys(int32_t layer, const float* keys, int32_t num_tokens) override {
    on_keys_(layer, keys, num_tokens);
  }
  void OnLinearInput(int32_t layer, LinearInput input, const float* x, int32_t rows,
                     int32_t cols) override {
    on_linear_input_(layer, input, x, rows, cols);
  }

 private:
  KeysFn on_keys_;
  LinearInputFn on_linear_input_;
};

}  // namespace tq
