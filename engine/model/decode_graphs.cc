#include "engine/model/decode_graphs.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "engine/model/llama_model.h"

namespace tq {

std::vector<int32_t> DecodeGraphBuckets(int32_t max_batch) {
  std::vector<int32_t> buckets;
  for (int32_t b : {1, 2, 4}) {
    if (b <= max_batch) buckets.push_back(b);
  }
  for (int32_t b = 8; b <= max_batch; b += 8) buckets.push_back(b);
  if (max_batch > 0 && buckets.back() != max_batch) buckets.push_back(max_batch);
  return buckets;
}

int32_t PickDecodeBucket(const std::vector<int32_t>& buckets, int32_t num_seqs) {
  if (num_seqs < 1) return -1;
  const auto it = std::lower_bound(buckets.begin(), buckets.end(), num_seqs);
  return it == buckets.end() ? -1 : *it;
}

bool IsGraphDecodeBatch(const ForwardBatch& b, int32_t max_blocks_per_seq) {
  const int32_t n = b.num_tokens();
  if (n < 1 || b.num_seqs != n || b.max_blocks_per_seq > max_blocks_per_seq ||
      b.logit_indices.size() != static_cast<size_t>(n)) {
    return false;
  }
  for (int32_t t = 0; t < n; ++t) {
    if (b.token_seq[t] != t || b.logit_indices[t] != t) return false;
  }
  return true;
}

void PadDecodeBatch(const ForwardBatch& b, const DecodeGraphLayout& layout,
                    std::vector<int32_t>* packed) {
  const int32_t n = b.num_tokens();
  if (n > layout.bucket || b.num_seqs > layout.bucket ||
      b.max_blocks_per_seq > layout.max_blocks_per_seq) {
    throw std::invalid_argument("PadDecodeBatch: " + std::to_string(n) + " tokens and tables " +
                                std::to_string(b.max_blocks_per_seq) + " wide do not fit bucket " +
                                std::to_string(layout.bucket) + " of width " +
                                std::to_string(layout.max_blocks_per_seq));
  }
  packed->assign(layout.size(), -1);
  int32_t* p = packed->data();
  for (int32_t r = 0; r < layout.bucket; ++r) {
    const bool real = r < n;
    p[layout.ids() + r] = real ? b.token_ids[r] : 0;
    p[layout.positions() + r] = real ? b.positions[r] : -1;
    p[layout.token_seq() + r] = r;
    p[layout.slots() + r] = real ? b.slot_mapping[r] : -1;
  }
  for (int32_t s = 0; s < b.num_seqs; ++s) {
    const auto src = b.block_tables.begin() + static_cast<ptrdiff_t>(s) * b.max_blocks_per_seq;
    std::copy(src, src + b.max_blocks_per_seq,
              packed->begin() + static_cast<ptrdiff_t>(layout.block_tables()) +
                  static_cast<ptrdiff_t>(s) * layout.max_blocks_per_seq);
  }
}

DecodeGraphRunner::DecodeGraphRunner(kernels::Backend* backend, int32_t max_batch,
                                     int32_t max_blocks_per_seq, bool eager_fallback)
    : backend_(backend),
      buckets_(DecodeGraphBuckets(max_batch)),
      max_blocks_per_seq_(max_blocks_per_seq),
      eager_fallback_(eager_fallback) {
  if (max_batch < 1 || max_blocks_per_seq < 1) {
    throw std::invalid_argument("DecodeGraphRunner: max_batch and max_blocks_per_seq must be >= 1");
  }
  const DecodeGraphLayout largest{buckets_.back(), max_blocks_per_seq_};
  inputs_ = kernels::BackendBuffer(backend_, largest.size() * sizeof(int32_t));
  identity_.resize(static_cast<size_t>(buckets_.back()));
  for (size_t i = 0; i < identity_.size(); ++i) identity_[i] = static_cast<int32_t>(i);
}

// The ops of one bucket step: the model's layers, final norm and lm_head over
// the packed inputs (device memory only, no host synchronization).
void DecodeGraphRunner::RunBucket(LlamaModel& model, PagedKvCache& cache, int32_t bucket) {
  const DecodeGraphLayout layout{bucket, max_blocks_per_seq_};
  const int32_t* base = inputs_.as<int32_t>();
  LlamaModel::StepInputs in;
  in.ids = base + layout.ids();
  in.positions = base + layout.positions();
  in.token_seq = base + layout.token_seq();
  in.slots = base + layout.slots();
  in.block_tables = base + layout.block_tables();
  in.num_tokens = bucket;
  in.max_blocks_per_seq = max_blocks_per_seq_;
  const std::vector<int32_t> rows(identity_.begin(), identity_.begin() + bucket);
  model.ForwardOps(in, rows, cache);
}

void DecodeGraphRunner::Prepare(LlamaModel& model, PagedKvCache& cache) {
  graphs_.clear();
  const int32_t largest = buckets_.back();
  model.EnsureWorkspace(largest, largest);
  const ForwardBatch empty;
  std::vector<int32_t> padding;
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
    const int32_t bucket = *it;
    PadDecodeBatch(empty, {bucket, max_blocks_per_seq_}, &padding);  // writes no KV
    backend_->CopyToDevice(inputs_.data(), padding.data(), padding.size() * sizeof(int32_t));
    RunBucket(model, cache, bucket);  // warm-up: sizes scratch, uploads mirrors
  }
  for (const int32_t bucket : buckets_) {
    std::unique_ptr<kernels::BackendGraph> graph;
    try {
      graph = backend_->CaptureGraph([&] { RunBucket(model, cache, bucket); });
    } catch (const std::exception& e) {
      // Not yet run on every GPU and driver: a failed capture costs speed,
      // not the step.
      disabled_reason_ = "capture of batch size " + std::to_string(bucket) + " failed: " + e.what();
      std::fprintf(stderr, "[tqserve] --cuda-graphs: %s; decode steps run eagerly\n",
                   disabled_reason_.c_str());
      graphs_.clear();
      unsupported_ = true;
      break;
    }
    if (!graph) {
      unsupported_ = !eager_fallback_;
      break;
    }
    graphs_[bucket] = std::move(graph);
  }
  model_epoch_ = model.workspace_epoch_;
  cache_pool_ = cache.Layer(0).k;
  prepared_ = true;
  ++num_prepares_;
}

bool DecodeGraphRunner::TryForward(LlamaModel& model, const ForwardBatch& batch,
                                   PagedKvCache& cache, std::vector<float>* logits) {
  if (unsupported_ || !IsGraphDecodeBatch(batch, max_blocks_per_seq_)) return false;
  const int32_t bucket = PickDecodeBucket(buckets_, batch.num_seqs);
  if (bucket < 0) return false;
  if (!prepared_ || model.workspace_epoch_ != model_epoch_ || cache.Layer(0).k != cache_pool_) {
    Prepare(model, cache);
  }
  if (unsupported_) return false;

  PadDecodeBatch(batch, {bucket, max_blocks_per_seq_}, &packed_);
  backend_->CopyToDevice(inputs_.data(), packed_.data(), packed_.size() * sizeof(int32_t));
  const auto graph = graphs_.find(bucket);
  if (graph == graphs_.end()) {
    RunBucket(model, cache, bucket);  // eager fallback (no graphs on this backend)
  } else if (!graph->second->Launch()) {
    // The backend freed memory a graph uses since the capture: prepare again.
    // Prepare's warm-ups wrote no KV and overwrote the inputs, so upload again.
    Prepare(model, cache);
    backend_->CopyToDevice(inputs_.data(), packed_.data(), packed_.size() * sizeof(int32_t));
    const auto again = graphs_.find(bucket);
    if (again == graphs_.end()) {
      RunBucket(model, cache, bucket);  // the new capture failed: graphs are off, run eagerly
    } else if (!again->second->Launch()) {
      throw std::logic_error("DecodeGraphRunner: graphs went stale right after their capture");
    }
  }
  ++steps_[bucket];
  const size_t bytes =
      static_cast<size_t>(batch.num_tokens()) * model.config().vocab_size * sizeof(float);
  if (logits) backend_->CopyToHost(logits->data(), model.logits_.data(), bytes);
  return true;
}

}  // namespace tq
