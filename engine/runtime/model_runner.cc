#include "engine/runtime/model_runner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
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
  auto logprob_double = [&](int32_t t) {
    const float l = logits[t];
    return std::isnan(l) ? -std::numeric_limits<double>::infinity()
                         : static_cast<double>(l) - log_z;
  };
  auto logprob = [&](int32_t t) { return static_cast<float>(logprob_double(t)); };
  PositionLogprobs out;
  out.chosen_logprob = logprob_double(token);
  out.chosen = {token, static_cast<float>(out.chosen_logprob)};
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

std::optional<PositionLogprobs> LogprobsFromCandidates(const LogitCandidates& c, int32_t token,
                                                       int32_t k) {
  const double m = c.values[0];
  if (!std::isfinite(m)) return std::nullopt;
  const double log_z = m + std::log(c.sum_exp);  // as ComputeLogprobs: max + log Σ exp(l - max)
  const size_t n = c.ids.size();
  std::vector<float> lp(n);
  for (size_t i = 0; i < n; ++i)
    lp[i] = static_cast<float>(static_cast<double>(c.values[i]) - log_z);
  PositionLogprobs out;
  const auto it = std::find(c.ids.begin(), c.ids.end(), token);
  if (it == c.ids.end()) return std::nullopt;
  const auto chosen = static_cast<size_t>(it - c.ids.begin());
  out.chosen = {token, lp[chosen]};
  out.chosen_logprob = static_cast<double>(c.values[chosen]) - log_z;
  k = std::min(k, c.vocab);
  if (k > 0) {
    std::vector<int32_t> perm;
    const size_t exact = OrderCandidates(lp, c.ids, static_cast<size_t>(c.vocab), &perm);
    if (static_cast<size_t>(k) > exact) return std::nullopt;
    out.top.reserve(static_cast<size_t>(k));
    for (int32_t j = 0; j < k; ++j) out.top.push_back({c.ids[perm[j]], lp[perm[j]]});
  }
  return out;
}

LogitCandidates LlamaModelRunner::CandidateRows::Row(int32_t r, int32_t vocab) const {
  const size_t at = static_cast<size_t>(r) * k;
  return {std::span<const int32_t>(ids).subspan(at, k),
          std::span<const float>(values).subspan(at, k), vocab, sum_exp[r], sum_exp_scaled[r]};
}

LlamaModelRunner::LlamaModelRunner(ModelExecutor* executor, SamplingPath path)
    : executor_(executor), vocab_(executor->model().config().vocab_size) {
  const bool tp = executor->world_size() > 1;
  switch (path) {
    case SamplingPath::kHost:
      use_candidates_ = false;
      break;
    case SamplingPath::kCandidates:
      use_candidates_ = !tp;
      break;
    case SamplingPath::kAuto:
      use_candidates_ = !tp && executor->backend().Capabilities().device_logits_topk &&
                        vocab_ >= kCandidateSamplingMinVocab;
      break;
  }
}

// LogitsTopK over the first states.size() logit rows (in backend memory),
// with one k for all: enough for every row's top_k and logprobs when the
// backend allows it.
void LlamaModelRunner::ComputeCandidates(const std::vector<RequestState*>& states) {
  const int32_t vocab = vocab_;
  const auto rows = static_cast<int32_t>(states.size());
  int32_t k = kDefaultSamplingCandidates;
  std::vector<float> inv_t(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    k = std::max({k, states[i]->sampler.top_k(), states[i]->num_logprobs});
    inv_t[i] = states[i]->sampler.inverse_temperature();
  }
  k = std::min({k, vocab, kernels::kMaxLogitsTopK});
  kernels::Backend* backend = &executor_->backend();
  auto grow = [&](kernels::BackendBuffer& b, size_t bytes) {
    if (b.bytes() < bytes) b = kernels::BackendBuffer(backend, bytes);
  };
  const size_t n = static_cast<size_t>(rows) * k;
  grow(dev_inv_t_, inv_t.size() * sizeof(float));
  grow(dev_ids_, n * sizeof(int32_t));
  grow(dev_values_, n * sizeof(float));
  grow(dev_sums_, 2 * static_cast<size_t>(rows) * sizeof(double));
  backend->CopyToDevice(dev_inv_t_.data(), inv_t.data(), inv_t.size() * sizeof(float));
  kernels::LogitsTopKParams p;
  p.logits = executor_->device_logits();
  p.inv_temperature = dev_inv_t_.as<float>();
  p.ids = dev_ids_.as<int32_t>();
  p.values = dev_values_.as<float>();
  p.sum_exp = dev_sums_.as<double>();
  p.sum_exp_scaled = dev_sums_.as<double>() + rows;
  p.rows = rows;
  p.vocab = vocab;
  p.k = k;
  backend->LogitsTopK(p);
  cand_.rows = rows;
  cand_.k = k;
  cand_.ids.resize(n);
  cand_.values.resize(n);
  cand_.sum_exp.resize(static_cast<size_t>(rows));
  cand_.sum_exp_scaled.resize(static_cast<size_t>(rows));
  backend->CopyToHost(cand_.ids.data(), p.ids, n * sizeof(int32_t));
  backend->CopyToHost(cand_.values.data(), p.values, n * sizeof(float));
  backend->CopyToHost(cand_.sum_exp.data(), p.sum_exp, rows * sizeof(double));
  backend->CopyToHost(cand_.sum_exp_scaled.data(), p.sum_exp_scaled, rows * sizeof(double));
}

void LlamaModelRunner::UpdateRequestStates(const ScheduleOutput& scheduled) {
  for (SeqId id : scheduled.finished_ids) requests_.erase(id);
  for (const NewRequestData& data : scheduled.new_requests) {
    requests_[data.seq_id] = std::make_unique<RequestState>(data);
  }
}

// One varlen batch of every scheduled token: positions, slot mapping, one
// block-table row per sequence.
void LlamaModelRunner::FlattenBatch(const ScheduleOutput& scheduled) {
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
  const int32_t block_size = executor_->cache().layout().block_size;
  rows_.assign(scheduled.sequences.size(), SequenceRows{});
  for (size_t i = 0; i < scheduled.sequences.size(); ++i) {
    const ScheduledSequence& s = scheduled.sequences[i];
    SequenceRows& r = rows_[i];
    r.state = requests_.at(s.seq_id).get();
    std::copy(s.block_table.begin(), s.block_table.end(),
              b.block_tables.begin() + static_cast<ptrdiff_t>(i) * b.max_blocks_per_seq);
    const auto n = static_cast<int32_t>(s.token_ids.size());
    r.first_token = static_cast<int32_t>(b.token_ids.size());
    r.num_tokens = n;
    for (int32_t j = 0; j < n; ++j) {
      const int32_t pos = s.start_position + j;
      b.token_ids.push_back(s.token_ids[j]);
      b.positions.push_back(pos);
      b.token_seq.push_back(static_cast<int32_t>(i));
      b.slot_mapping.push_back(s.block_table.at(pos / block_size) * block_size + pos % block_size);
    }
    r.candidates =
        use_candidates_ && s.sample && !r.state->sampler.has_penalties() && !r.state->matcher;
  }
}

// Logit rows: every sampling row first, in sequence order (one block for
// LogitsTopK; a pure decode batch keeps logit_indices[t] == t, which CUDA
// graphs need), then prompt-logprob rows (logits at position p score prompt
// token p + 1). Rows with penalties get candidates too but use the full row.
void LlamaModelRunner::AssignLogitRows(const ScheduleOutput& scheduled) {
  ForwardBatch& b = batch_;
  candidate_states_.clear();
  for (size_t i = 0; i < scheduled.sequences.size(); ++i) {
    if (!scheduled.sequences[i].sample) continue;
    rows_[i].sample_row = static_cast<int32_t>(b.logit_indices.size());
    b.logit_indices.push_back(rows_[i].first_token + rows_[i].num_tokens - 1);
    candidate_states_.push_back(rows_[i].state);
  }
  for (size_t i = 0; i < scheduled.sequences.size(); ++i) {
    const ScheduledSequence& s = scheduled.sequences[i];
    SequenceRows& r = rows_[i];
    if (!r.state->prompt_logprobs) continue;
    const int32_t lo = std::max(s.start_position + 1, r.state->prompt_logprobs_done);
    const int32_t hi = std::min(s.start_position + r.num_tokens, s.num_prompt_tokens - 1) + 1;
    r.first_prompt_row = static_cast<int32_t>(b.logit_indices.size());
    r.first_prompt_token = lo;
    for (int32_t t = lo; t < hi; ++t) {
      b.logit_indices.push_back(r.first_token + (t - 1 - s.start_position));
    }
    r.num_prompt_rows = std::max(0, hi - lo);
  }
  if (b.logit_indices.empty()) b.logit_indices.push_back(0);  // Forward wants >= 1 row
}

void LlamaModelRunner::FetchRows(int32_t first, int32_t count) {
  const auto row_floats = static_cast<size_t>(vocab_);
  executor_->backend().CopyToHost(logits_.data() + first * row_floats,
                                  executor_->device_logits() + first * row_floats,
                                  static_cast<size_t>(count) * row_floats * sizeof(float));
}

// Host copies: all rows on the host path; on the candidate path only rows
// past the candidate block now, and a candidate row when it must fall back.
void LlamaModelRunner::RunForward() {
  if (!use_candidates_) {
    executor_->Forward(batch_, &logits_);
    return;
  }
  executor_->Forward(batch_, nullptr);
  const auto num_rows = static_cast<int32_t>(batch_.logit_indices.size());
  const auto num_candidate_rows = static_cast<int32_t>(candidate_states_.size());
  logits_.resize(static_cast<size_t>(num_rows) * vocab_);
  if (num_candidate_rows > 0) ComputeCandidates(candidate_states_);
  FetchRows(num_candidate_rows, num_rows - num_candidate_rows);
  for (const SequenceRows& r : rows_) {
    if (r.sample_row >= 0 && !r.candidates) FetchRows(r.sample_row, 1);
  }
}

std::span<float> LlamaModelRunner::LogitRow(int32_t r) {
  const int32_t vocab = vocab_;
  return {logits_.data() + static_cast<size_t>(r) * vocab, static_cast<size_t>(vocab)};
}

void LlamaModelRunner::ScorePrompt(const ScheduledSequence& s, const SequenceRows& rows,
                                   SequenceResult& result) {
  if (rows.num_prompt_rows == 0) return;
  RequestState& state = *rows.state;
  const int32_t k = std::max(state.num_logprobs, 0);
  for (int32_t j = 0; j < rows.num_prompt_rows; ++j) {
    const int32_t t = rows.first_prompt_token + j;
    result.prompt_logprobs.push_back(
        ComputeLogprobs(LogitRow(rows.first_prompt_row + j), s.tokens[t], k));
  }
  state.prompt_logprobs_done = rows.first_prompt_token + rows.num_prompt_rows;
}

void LlamaModelRunner::SampleNext(const ScheduledSequence& s, const SequenceRows& rows,
                                  SequenceResult& result) {
  RequestState& state = *rows.state;
  const int32_t sr = rows.sample_row;
  std::optional<SampledToken> token;
  std::optional<PositionLogprobs> logprobs;
  if (rows.candidates) {
    ++candidate_rows_;
    const LogitCandidates c = cand_.Row(sr, vocab_);
    token = state.sampler.SampleCandidates(c);
    if (token && state.num_logprobs >= 0) {
      logprobs = LogprobsFromCandidates(c, token->token, state.num_logprobs);
    }
    if (!token || (state.num_logprobs >= 0 && !logprobs)) {
      ++full_row_fallbacks_;
      FetchRows(sr, 1);
    }
  }
  std::span<float> logits = LogitRow(sr);
  if (!token) {
    std::vector<float> raw;
    if (state.num_logprobs >= 0) raw.assign(logits.begin(), logits.end());
    if (state.matcher) {
      state.matcher->FillMask(&mask_);
      structured::ApplyTokenMask(logits, mask_);
    }
    const auto num_prompt = static_cast<size_t>(s.num_prompt_tokens);
    token = state.sampler.Sample(logits, s.tokens.first(num_prompt), s.tokens.subspan(num_prompt));
    if (state.matcher) state.matcher->AcceptToken(token->token);
    if (state.num_logprobs >= 0) logprobs = ComputeLogprobs(raw, token->token, state.num_logprobs);
  } else if (state.num_logprobs >= 0 && !logprobs) {
    logprobs = ComputeLogprobs(logits, token->token, state.num_logprobs);
  }
  result.token = token->token;
  if (logprobs) result.logprobs = std::move(*logprobs);
}

ModelOutput LlamaModelRunner::Execute(const ScheduleOutput& scheduled) {
  UpdateRequestStates(scheduled);
  ModelOutput out;
  out.results.resize(scheduled.sequences.size());
  if (scheduled.sequences.empty()) return out;
  FlattenBatch(scheduled);
  AssignLogitRows(scheduled);
  RunForward();
  for (size_t i = 0; i < scheduled.sequences.size(); ++i) {
    ScorePrompt(scheduled.sequences[i], rows_[i], out.results[i]);
    if (rows_[i].sample_row >= 0) SampleNext(scheduled.sequences[i], rows_[i], out.results[i]);
  }
  return out;
}

}  // namespace tq
