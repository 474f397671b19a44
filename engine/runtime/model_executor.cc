#include "engine/runtime/model_executor.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tq {

ModelExecutor::ModelExecutor(std::vector<Worker> workers,
                             std::vector<std::unique_ptr<Communicator>> comms)
    : comms_(std::move(comms)), workers_(std::move(workers)) {
  const int world = world_size();
  if (world < 1 || (!comms_.empty() && static_cast<int>(comms_.size()) != world)) {
    throw std::invalid_argument(
        "ModelExecutor: needs one worker per rank and one communicator each");
  }
  for (int r = 0; r < world; ++r) {
    const Worker& w = workers_[static_cast<size_t>(r)];
    if (!w.backend || !w.model || w.model->tp_plan().rank != r ||
        w.model->tp_plan().world_size != world) {
      throw std::invalid_argument("ModelExecutor: worker " + std::to_string(r) +
                                  " needs a backend and the model shard of rank " +
                                  std::to_string(r) + " of " + std::to_string(world));
    }
  }
  if (world > 1) {
    std::vector<Communicator*> comms_to_abort;
    for (const auto& c : comms_) comms_to_abort.push_back(c.get());
    rank_threads_ = std::make_unique<RankExecutor>(world, std::move(comms_to_abort));
  }
}

ModelExecutor::~ModelExecutor() = default;

PagedKvCache& ModelExecutor::cache() const {
  if (!has_cache()) throw std::logic_error("ModelExecutor: the KV cache is not allocated yet");
  return *workers_.front().cache;
}

RankCaches ModelExecutor::MakeCaches(const kernels::KvLayout& layout,
                                     const std::vector<std::shared_ptr<const TqCodecState>>& tq,
                                     int32_t sink_tokens) const {
  RankCaches caches;
  for (int r = 0; r < world_size(); ++r) {
    const Worker& w = worker(r);
    caches.push_back(std::make_unique<PagedKvCache>(
        w.backend.get(), w.model->config().num_hidden_layers, layout,
        tq.empty() ? nullptr : tq.at(static_cast<size_t>(r)), sink_tokens));
  }
  return caches;
}

void ModelExecutor::SetCaches(RankCaches caches) {
  if (static_cast<int>(caches.size()) != world_size()) {
    throw std::invalid_argument("ModelExecutor::SetCaches: needs one cache per rank");
  }
  for (const auto& c : caches) {
    const kernels::KvLayout& l = c->layout();
    const kernels::KvLayout& first = caches.front()->layout();
    if (c->num_layers() != caches.front()->num_layers() || l.dtype != first.dtype ||
        l.num_blocks != first.num_blocks || l.block_size != first.block_size ||
        l.num_kv_heads != first.num_kv_heads || l.head_dim != first.head_dim) {
      throw std::invalid_argument("ModelExecutor::SetCaches: a rank's cache layout differs");
    }
  }
  for (int r = 0; r < world_size(); ++r)
    worker(r).cache = std::move(caches[static_cast<size_t>(r)]);
}

void ModelExecutor::Forward(const ForwardBatch& batch, std::vector<float>* logits) {
  if (!has_cache()) throw std::logic_error("ModelExecutor::Forward: no KV cache");
  RunRanks(batch, logits, [&](size_t r) -> PagedKvCache& { return *workers_[r].cache; });
}

void ModelExecutor::Forward(const ForwardBatch& batch, const RankCaches& caches,
                            std::vector<float>* logits) {
  if (static_cast<int>(caches.size()) != world_size()) {
    throw std::invalid_argument("ModelExecutor::Forward: needs one cache per rank");
  }
  RunRanks(batch, logits, [&](size_t r) -> PagedKvCache& { return *caches[r]; });
}

void ModelExecutor::RunRanks(const ForwardBatch& batch, std::vector<float>* logits,
                             const std::function<PagedKvCache&(size_t rank)>& cache_of) {
  if (!rank_threads_) {
    workers_.front().model->Forward(batch, cache_of(0), logits);
    return;
  }
  rank_threads_->Run([&](int rank) {
    const auto r = static_cast<size_t>(rank);
    workers_[r].model->Forward(batch, cache_of(r), rank == 0 ? logits : nullptr);
  });
}

namespace {

// Runs tokens[begin, n) in chunks of `chunk`; after each chunk calls
// on_chunk(first position, rows, logits): every row's logits with all_rows,
// else only the chunk's last row.
void RunChunks(const ForwardStep& forward, const BlockTable& table, std::span<const int32_t> tokens,
               int32_t begin, int32_t chunk, bool all_rows,
               const std::function<void(int32_t, int32_t, std::vector<float>&)>& on_chunk) {
  const auto n = static_cast<int32_t>(tokens.size());
  std::vector<float> chunk_logits;
  for (; begin < n; begin += chunk) {
    const int32_t end = std::min(n, begin + chunk);
    ForwardBatch batch;
    batch.num_seqs = 1;
    batch.block_tables = table.blocks();
    batch.max_blocks_per_seq = static_cast<int32_t>(batch.block_tables.size());
    for (int32_t pos = begin; pos < end; ++pos) {
      batch.token_ids.push_back(tokens[pos]);
      batch.positions.push_back(pos);
      batch.token_seq.push_back(0);
      batch.slot_mapping.push_back(static_cast<int32_t>(table.Slot(pos)));
      if (all_rows) batch.logit_indices.push_back(pos - begin);
    }
    if (!all_rows) batch.logit_indices.push_back(end - begin - 1);
    forward(batch, &chunk_logits);
    on_chunk(begin, end - begin, chunk_logits);
  }
}

}  // namespace

void PrefillSequence(const ForwardStep& forward, const BlockTable& table,
                     std::span<const int32_t> tokens, int32_t begin, int32_t chunk, bool all_logits,
                     std::vector<float>* logits) {
  if (all_logits) logits->clear();
  RunChunks(forward, table, tokens, begin, chunk, all_logits,
            [&](int32_t, int32_t, std::vector<float>& chunk_logits) {
              if (all_logits) {
                logits->insert(logits->end(), chunk_logits.begin(), chunk_logits.end());
              } else {
                logits->swap(chunk_logits);
              }
            });
}

void PrefillSequence(const ForwardStep& forward, const BlockTable& table,
                     std::span<const int32_t> tokens, int32_t begin, int32_t chunk,
                     const ChunkLogitsFn& on_chunk) {
  RunChunks(forward, table, tokens, begin, chunk, /*all_rows=*/true,
            [&](int32_t first, int32_t rows, std::vector<float>& chunk_logits) {
              on_chunk(first, rows, chunk_logits.data());
            });
}

void PrefillSequence(ModelExecutor& executor, const BlockTable& table,
                     std::span<const int32_t> tokens, int32_t begin, int32_t chunk, bool all_logits,
                     std::vector<float>* logits) {
  PrefillSequence([&](const ForwardBatch& b, std::vector<float>* l) { executor.Forward(b, l); },
                  table, tokens, begin, chunk, all_logits, logits);
}

}  // namespace tq
