// Helpers of the tensor-parallel tests (CPU in tests/unit, CUDA in
// tests/cuda): greedy decoding that keeps every step's logits, and the small
// random checkpoints whose heads split across ranks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/llama_model.h"
#include "engine/model/random_model.h"
#include "engine/runtime/model_executor.h"
#include "engine/runtime/model_loader.h"

namespace tq::testing {

struct GreedyRun {
  std::vector<int32_t> tokens;             // generated
  std::vector<std::vector<float>> logits;  // [step][vocab]
};

/// Max |a - b| over every step's logits of two runs of the same length.
inline double MaxLogitDiff(const GreedyRun& a, const GreedyRun& b) {
  double worst = 0;
  EXPECT_EQ(a.logits.size(), b.logits.size());
  for (size_t s = 0; s < a.logits.size() && s < b.logits.size(); ++s) {
    EXPECT_EQ(a.logits[s].size(), b.logits[s].size());
    for (size_t i = 0; i < a.logits[s].size() && i < b.logits[s].size(); ++i) {
      worst = std::max(worst, std::abs(double{a.logits[s][i]} - b.logits[s][i]));
    }
  }
  return worst;
}

/// Prefills `prompt` in one step, then decodes `steps` tokens greedily (argmax,
/// first index on ties) one step at a time, through `forward` with a fresh
/// block table in a cache of `layout`.
inline GreedyRun GreedyDecode(const ForwardStep& forward, const kernels::KvLayout& layout,
                              const std::vector<int32_t>& prompt, int steps) {
  BlockPool pool(layout.num_blocks);
  BlockTable table(layout.block_size);
  std::vector<int32_t> seq = prompt;
  EXPECT_TRUE(table.EnsureCapacity(pool, static_cast<int32_t>(prompt.size()) + steps));
  GreedyRun run;
  int32_t done = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> logits;
    PrefillSequence(forward, table, seq, done, 512, false, &logits);
    done = static_cast<int32_t>(seq.size());
    const auto best =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    run.tokens.push_back(best);
    run.logits.push_back(std::move(logits));
    seq.push_back(best);
  }
  table.Release(pool);
  return run;
}

/// GreedyDecode on every rank of `executor`, in its workers' caches.
inline GreedyRun GreedyDecode(ModelExecutor& executor, const std::vector<int32_t>& prompt,
                              int steps) {
  return GreedyDecode([&](const ForwardBatch& b, std::vector<float>* l) { executor.Forward(b, l); },
                      executor.cache().layout(), prompt, steps);
}

/// GreedyDecode on one model and cache built by the test.
inline GreedyRun GreedyDecode(LlamaModel& model, PagedKvCache& cache,
                              const std::vector<int32_t>& prompt, int steps) {
  return GreedyDecode(
      [&](const ForwardBatch& b, std::vector<float>* l) { model.Forward(b, cache, l); },
      cache.layout(), prompt, steps);
}

/// Writes a random fp32 Llama (3 layers, seed 8, vocab 512) to `dir` with
/// `tokenizer_model` copied in ("" = none); hidden 0 = heads × head_dim.
inline void WriteRandomTpModel(const std::string& dir, const std::string& tokenizer_model,
                               int32_t heads, int32_t kv_heads, int32_t head_dim = 16,
                               int32_t hidden = 0, int32_t intermediate = 352) {
  RandomModelSpec spec;
  ModelConfig& c = spec.config;
  c.hidden_size = hidden > 0 ? hidden : heads * head_dim;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = 3;
  c.vocab_size = 512;
  c.max_position_embeddings = 512;
  c.rms_norm_eps = 1e-5;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  spec.dtype = TensorDtype::kF32;
  spec.seed = 8;
  WriteRandomModel(dir, spec, tokenizer_model);
}

}  // namespace tq::testing
