#include "engine/runtime/model_runner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace tq {

PositionLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int32_t k) {
  double m = -std::numeric_limits<double>::infinity();
  for (float l : logits) {
    if (!std::isnan(l)) m = std::max(m, static_cast<double>(l));
  }
  double z = 0.0;
  for (float l : logits) {
    if (!std::isnan(l)) z += std::exp(static_cast<double>(l) - m);
  }
  const double log_z = m + std::log(z);
  auto logprob = [&](int32_t t) {
    const float l = logits[t];
    return std::isnan(l) ? -std::numeric_limits<float>::infinity()
                         : static_cast<float>(static_cast<double>(l) - log_z);
  };
  PositionLogprobs out;
  out.chosen = {token, logprob(token)};
  const auto vocab = static_cast<int32_t>(logits.size());
  k = std::min(k, vocab);
  if (k > 0) {
    std::vector<int32_t> ids(vocab);
    for (int32_t i = 0; i < vocab; ++i) ids[i] = i;
    auto desc = [&](int32_t a, int32_t b) {
      const float la = logprob(a), lb = logprob(b);
      return la > lb || (la == lb && a < b);
    };
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), desc);
    out.top.reserve(k);
    for (int32_t i = 0; i < k; ++i) out.top.push_back({ids[i], logprob(ids[i])});
  }
  return out;
}

LlamaModelRunner::LlamaModelRunner(LlamaModel* model, PagedKvCache* cache)
    : model_(model), cache_(cache) {}

ModelOutput LlamaModelRunner::Execute(const ScheduleOutput& scheduled) {
  for (SeqId id : scheduled.finished_ids) requests_.erase(id);
  for (const NewRequestData& data : scheduled.new_requests) {
    requests_[data.seq_id] = std::make_unique<RequestState>(data);
  }
  ModelOutput out;
  out.results.resize(scheduled.sequences.size());
  if (scheduled.sequences.empty()) return out;

  // One varlen batch; remember which logit rows belong to which sequence.
  ForwardBatch& b = batch_;
  b.token_ids.clear();
  b.positions.clear();
  b.token_seq.clear();
  b.slot_mapping.clear();
  b.logit_indices.clear();
  b.num_seqs = static_cast<int32_t>(scheduled.sequences.size());
  b.max_blocks_per_seq = 0;
  for (const ScheduledSequence& s : scheduled.sequences) {
    b.max_blocks_per_seq =
        std::max(b.max_blocks_per_seq, static_cast<int32_t>(s.block_table.size()));
  }
  b.block_tables.assign(static_cast<size_t>(b.num_seqs) * b.max_blocks_per_seq, -1);
  const int32_t block_size = cache_->layout().block_size;
  struct Rows {
    int32_t first_prompt_row = 0, num_prompt_rows = 0, first_prompt_token = 0;
    int32_t sample_row = -1;
  };
  std::vector<Rows> rows(scheduled.sequences.size());
  for (size_t i = 0; i < scheduled.sequences.size(); ++i) {
    const ScheduledSequence& s = scheduled.sequences[i];
    RequestState& state = *requests_.at(s.seq_id);
    std::copy(s.block_table.begin(), s.block_table.end(),
              b.block_tables.begin() + static_cast<ptrdiff_t>(i) * b.max_blocks_per_seq);
    const auto n = static_cast<int32_t>(s.token_ids.size());
    const auto first_token = static_cast<int32_t>(b.token_ids.size());
    for (int32_t j = 0; j < n; ++j) {
      const int32_t pos = s.start_position + j;
      b.token_ids.push_back(s.token_ids[j]);
      b.positions.push_back(pos);
      b.token_seq.push_back(static_cast<int32_t>(i));
      b.slot_mapping.push_back(s.block_table.at(pos / block_size) * block_size + pos % block_size);
    }
    // Prompt logprobs: logits at position p score prompt token p + 1.
    if (state.prompt_logprobs) {
      const int32_t lo = std::max(s.start_position + 1, state.prompt_logprobs_done);
      const int32_t hi = std::min(s.start_position + n, s.num_prompt_tokens - 1) + 1;
      rows[i].first_prompt_row = static_cast<int32_t>(b.logit_indices.size());
      rows[i].first_prompt_token = lo;
      for (int32_t t = lo; t < hi; ++t) {
        b.logit_indices.push_back(first_token + (t - 1 - s.start_position));
      }
      rows[i].num_prompt_rows = std::max(0, hi - lo);
    }
    if (s.sample) {
      rows[i].sample_row = static_cast<int32_t>(b.logit_indices.size());
      b.logit_indices.push_back(first_token + n - 1);
    }
  }
  if (b.logit_indices.empty()) b.logit_indices.push_back(0);  // Forward wants >= 1 row
  model_->Forward(b, *cache_, &logits_);

  const int32_t vocab = model_->config().vocab_size;
  auto row = [&](int32_t r) {
    return std::span<float>(logits_.data() + static_cast<size_t>(r) * vocab, vocab);
  };
  for (size_t i = 0; i < scheduled.sequences.size(); ++i) {
    const ScheduledSequence& s = scheduled.sequences[i];
    RequestState& state = *requests_.at(s.seq_id);
    SequenceResult& r = out.results[i];
    if (rows[i].num_prompt_rows > 0) {
      r.first_prompt_logprob = rows[i].first_prompt_token;
      const int32_t k = std::max(state.num_logprobs, 0);
      for (int32_t j = 0; j < rows[i].num_prompt_rows; ++j) {
        const int32_t t = rows[i].first_prompt_token + j;
        r.prompt_logprobs.push_back(
            ComputeLogprobs(row(rows[i].first_prompt_row + j), state.prompt[t], k));
      }
      state.prompt_logprobs_done = rows[i].first_prompt_token + rows[i].num_prompt_rows;
    }
    if (rows[i].sample_row >= 0) {
      std::span<float> logits = row(rows[i].sample_row);
      std::vector<float> raw;
      if (state.num_logprobs >= 0) raw.assign(logits.begin(), logits.end());
      r.token = state.sampler.Sample(logits, state.prompt, state.output).token;
      if (state.num_logprobs >= 0) r.logprobs = ComputeLogprobs(raw, r.token, state.num_logprobs);
      state.output.push_back(r.token);
    }
  }
  return out;
}

}  // namespace tq
