// Test driver for decode graphs (engine/model/decode_graphs.h), shared by the
// CPU unit test and the CUDA test: several sequences generated greedily
// together, one decode batch per step, so that the batch shrinks through
// several bucket sizes (with padding rows) as sequences finish.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/llama_model.h"

namespace tq::testing {

/// Prompts of the bundled model (stories260K token ids, BOS first).
inline std::vector<std::vector<int32_t>> DecodeGraphPrompts() {
  return {{1, 403, 407, 261, 378}, {1, 378, 280}, {1, 261}, {1, 403, 407}, {1, 280, 261, 403}};
}

/// Greedy generation (argmax, first index on ties) of prompts[s] for
/// new_tokens[s] tokens each: every prompt is prefilled alone, then all
/// unfinished sequences decode together, one token each per Forward, in
/// prompt order. Returns each sequence's prompt + generated tokens. Blocks come
/// from a fresh BlockPool over the whole cache, so runs on equal caches use
/// equal slots.
inline std::vector<std::vector<int32_t>> GreedyTogether(
    LlamaModel& model, PagedKvCache& cache, const std::vector<std::vector<int32_t>>& prompts,
    const std::vector<int32_t>& new_tokens, std::vector<int32_t>* used_blocks = nullptr) {
  const int32_t bs = cache.layout().block_size;
  const int32_t vocab = model.config().vocab_size;
  BlockPool pool(cache.layout().num_blocks);
  std::vector<BlockTable> tables(prompts.size(), BlockTable(bs));
  std::vector<std::vector<int32_t>> seqs = prompts;
  std::vector<float> logits;
  auto argmax = [&](size_t row) {
    const auto begin = logits.begin() + static_cast<ptrdiff_t>(row) * vocab;
    return static_cast<int32_t>(std::max_element(begin, begin + vocab) - begin);
  };
  // Adds sequence s's tokens [from, size) as batch row `row`.
  auto add = [&](ForwardBatch& b, size_t s, int32_t from, int32_t row) {
    const std::vector<int32_t>& t = seqs[s];
    for (auto pos = from; pos < static_cast<int32_t>(t.size()); ++pos) {
      b.token_ids.push_back(t[pos]);
      b.positions.push_back(pos);
      b.token_seq.push_back(row);
      b.slot_mapping.push_back(static_cast<int32_t>(tables[s].Slot(pos)));
    }
    b.logit_indices.push_back(b.num_tokens() - 1);
  };
  auto tables_of = [&](ForwardBatch& b, const std::vector<size_t>& rows) {
    b.num_seqs = static_cast<int32_t>(rows.size());
    for (size_t s : rows) {
      b.max_blocks_per_seq =
          std::max(b.max_blocks_per_seq, static_cast<int32_t>(tables[s].blocks().size()));
    }
    b.block_tables.assign(rows.size() * b.max_blocks_per_seq, -1);
    for (size_t r = 0; r < rows.size(); ++r) {
      std::copy(tables[rows[r]].blocks().begin(), tables[rows[r]].blocks().end(),
                b.block_tables.begin() + static_cast<ptrdiff_t>(r) * b.max_blocks_per_seq);
    }
  };
  for (size_t s = 0; s < seqs.size(); ++s) {
    tables[s].EnsureCapacity(pool, static_cast<int32_t>(seqs[s].size()));
    ForwardBatch b;
    add(b, s, 0, 0);
    tables_of(b, {s});
    model.Forward(b, cache, &logits);
    seqs[s].push_back(argmax(0));
  }
  for (;;) {
    std::vector<size_t> active;
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (seqs[s].size() < prompts[s].size() + new_tokens[s]) active.push_back(s);
    }
    if (active.empty()) break;
    ForwardBatch b;
    for (size_t r = 0; r < active.size(); ++r) {
      const size_t s = active[r];
      tables[s].EnsureCapacity(pool, static_cast<int32_t>(seqs[s].size()));
      add(b, s, static_cast<int32_t>(seqs[s].size()) - 1, static_cast<int32_t>(r));
    }
    tables_of(b, active);
    model.Forward(b, cache, &logits);
    for (size_t r = 0; r < active.size(); ++r) seqs[active[r]].push_back(argmax(r));
  }
  for (BlockTable& t : tables) {
    if (used_blocks) used_blocks->insert(used_blocks->end(), t.blocks().begin(), t.blocks().end());
    t.Release(pool);
  }
  return seqs;
}

/// Every layer's K and V pool bytes, downloaded (layer 0 K, layer 0 V, ...).
inline std::vector<std::vector<uint8_t>> PoolBytes(kernels::Backend& backend, PagedKvCache& cache) {
  const kernels::KvLayout& l = cache.layout();
  std::vector<std::vector<uint8_t>> out;
  for (int32_t layer = 0; layer < cache.num_layers(); ++layer) {
    const kernels::KvLayerView view = cache.Layer(layer);
    out.emplace_back(l.BlockBytes() * l.num_blocks);
    backend.CopyToHost(out.back().data(), view.k, out.back().size());
    out.emplace_back(l.VBlockBytes() * l.num_blocks);
    backend.CopyToHost(out.back().data(), view.v, out.back().size());
  }
  return out;
}

}  // namespace tq::testing
