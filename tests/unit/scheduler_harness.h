// A scheduler driven step by step by a fake model runner with a fake paged KV
// cache, for tables of expected state per step (test_scheduler.cc,
// test_prefix_cache.cc). The runner writes each scheduled token into its slot
// (every sequence of the step first, as the real forward pass writes a
// layer's K/V before attention reads them), then reads each sampling
// sequence's whole context back through its block table and samples a pure
// function of it: a block attached with the wrong contents, or a position
// never computed, changes the output against the uninterrupted oracle.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "engine/runtime/scheduler.h"

namespace tq {
namespace testing_harness {

constexpr int32_t kVocab = 1000;
constexpr int32_t kEos = 2;

// Next token = (sum of all tokens so far * 7 + length) mod kVocab, avoiding
// EOS unless a test asks for it: a pure function of the context.
inline int32_t NextToken(const std::vector<int32_t>& context) {
  const int64_t sum = std::accumulate(context.begin(), context.end(), int64_t{0});
  int32_t t = static_cast<int32_t>((sum * 7 + static_cast<int64_t>(context.size())) % kVocab);
  return t == kEos ? t + 1 : t;
}

// Plays the runner over a fake KV cache of (token, position) per slot.
class FakeRunner {
 public:
  explicit FakeRunner(int32_t block_size) : block_size_(block_size) {}

  ModelOutput Execute(const ScheduleOutput& s) {
    for (SeqId id : s.finished_ids) tokens_.erase(id);
    for (const ScheduledSequence& seq : s.sequences) {
      // Tokens are recorded the first time their position is scheduled (a
      // prefix-cache hit skips positions: -1), so a recompute after
      // preemption must schedule the same ones.
      std::vector<int32_t>& known = tokens_[seq.seq_id];
      // The history view holds this chunk (and any later prompt chunks).
      EXPECT_GE(seq.tokens.size(), seq.start_position + seq.token_ids.size());
      EXPECT_TRUE(std::equal(seq.token_ids.begin(), seq.token_ids.end(),
                             seq.tokens.begin() + seq.start_position));
      for (size_t j = 0; j < seq.token_ids.size(); ++j) {
        const int32_t pos = seq.start_position + static_cast<int32_t>(j);
        if (pos < static_cast<int32_t>(known.size()) && known[pos] >= 0) {
          EXPECT_EQ(seq.token_ids[j], known[pos]) << "wrong token scheduled at " << pos;
        } else {
          if (pos >= static_cast<int32_t>(known.size())) known.resize(pos + 1, -1);
          known[pos] = seq.token_ids[j];
        }
        kv_[Slot(seq, pos)] = {seq.token_ids[j], pos};
      }
    }
    ModelOutput out;
    for (const ScheduledSequence& seq : s.sequences) {
      SequenceResult r;
      if (seq.sample) {
        // The context as the cache holds it; an unwritten slot reads -1.
        std::vector<int32_t> ctx;
        const int32_t end = seq.start_position + static_cast<int32_t>(seq.token_ids.size());
        for (int32_t pos = 0; pos < end; ++pos) {
          auto it = kv_.find(Slot(seq, pos));
          const bool ok = it != kv_.end() && it->second.second == pos;
          ctx.push_back(ok ? it->second.first : -1);
        }
        r.token = forced_.count(seq.seq_id) ? forced_[seq.seq_id] : NextToken(ctx);
        forced_.erase(seq.seq_id);
        // The sampled token must be the one scheduled at the next position.
        std::vector<int32_t>& known = tokens_[seq.seq_id];
        if (static_cast<int32_t>(known.size()) <= end) known.resize(end + 1, -1);
        known[end] = r.token;
      }
      out.results.push_back(r);
    }
    return out;
  }
  void ForceNext(SeqId id, int32_t token) { forced_[id] = token; }

 private:
  int64_t Slot(const ScheduledSequence& seq, int32_t pos) const {
    return static_cast<int64_t>(seq.block_table.at(pos / block_size_)) * block_size_ +
           pos % block_size_;
  }
  int32_t block_size_;
  std::map<SeqId, std::vector<int32_t>> tokens_;       // prompt + sampled
  std::map<int64_t, std::pair<int32_t, int32_t>> kv_;  // slot -> (token, position)
  std::map<SeqId, int32_t> forced_;
};

inline EngineRequest Request(const std::string& id, int32_t prompt_len, int32_t max_tokens,
                             int32_t priority = 0) {
  EngineRequest r;
  r.request_id = id;
  for (int32_t i = 0; i < prompt_len; ++i) r.prompt_ids.push_back(10 + i);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.priority = priority;
  return r;
}

// One row of an expected-state table: what runs ("A8" = A with 8 tokens, a
// trailing "s" when it samples), queue sizes and KV blocks in use after it,
// who was preempted, and (when >= 0) how many blocks are cached-free.
struct Expected {
  std::vector<std::string> planned;
  int32_t running, waiting, blocks_used;
  std::vector<std::string> preempted = {};
  int32_t blocks_cached = -1;
};

class SchedulerHarness {
 public:
  explicit SchedulerHarness(const SchedulerConfig& config)
      : sched_(config), runner_(config.block_size) {}

  SeqId Add(EngineRequest r) {
    const std::string id = r.request_id;
    const SeqId seq = sched_.AddRequest(std::move(r), Scheduler::Clock::now());
    names_[seq] = id;
    return seq;
  }

  // Runs one step and checks it against `e`; the block accounting is checked
  // after the plan and after the update.
  void Step(const Expected& e, int step) {
    ScheduleOutput s = sched_.Schedule(Scheduler::Clock::now());
    EXPECT_EQ(sched_.CheckBlockAccounting(), "") << "step " << step << " after Schedule";
    std::vector<std::string> planned;
    for (const ScheduledSequence& q : s.sequences) {
      planned.push_back(names_[q.seq_id] + std::to_string(q.token_ids.size()) +
                        (q.sample ? "s" : ""));
    }
    std::vector<std::string> preempted;
    for (SeqId id : s.preempted_ids) preempted.push_back(names_[id]);
    EXPECT_EQ(planned, e.planned) << "step " << step;
    EXPECT_EQ(preempted, e.preempted) << "step " << step;
    EXPECT_LE(s.num_batched_tokens, sched_.config().max_num_batched_tokens);
    queries_ += s.prefix_cache_queries;
    hits_ += s.prefix_cache_hits;
    const ModelOutput out = runner_.Execute(s);
    for (RequestUpdate& u : sched_.Update(s, out, Scheduler::Clock::now())) {
      auto& o = outputs_[u.request_id];
      o.insert(o.end(), u.output.token_ids.begin(), u.output.token_ids.end());
      cached_tokens_[u.request_id] = u.output.num_cached_tokens;
      if (u.output.finished()) finish_[u.request_id] = u.output.finish;
    }
    EXPECT_EQ(sched_.CheckBlockAccounting(), "") << "step " << step << " after Update";
    EXPECT_EQ(sched_.num_running(), e.running) << "step " << step;
    EXPECT_EQ(sched_.num_waiting(), e.waiting) << "step " << step;
    EXPECT_EQ(sched_.block_pool().num_used(), e.blocks_used) << "step " << step;
    if (e.blocks_cached >= 0) {
      EXPECT_EQ(sched_.block_pool().num_cached(), e.blocks_cached) << "step " << step;
    }
  }
  void Run(const std::vector<Expected>& table) {
    for (size_t i = 0; i < table.size(); ++i) Step(table[i], ++steps_);
  }

  Scheduler sched_;
  FakeRunner runner_;
  int steps_ = 0;
  int64_t queries_ = 0, hits_ = 0;
  std::map<SeqId, std::string> names_;
  std::map<std::string, std::vector<int32_t>> outputs_;
  std::map<std::string, int32_t> cached_tokens_;
  std::map<std::string, FinishReason> finish_;
};

inline SchedulerConfig Config(int32_t budget, int32_t max_seqs, int32_t num_blocks,
                              int32_t block_size = 4, int32_t max_model_len = 64) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.max_model_len = max_model_len;
  c.eos_token_ids = {kEos};
  return c;
}

// The tokens an uninterrupted sequence would produce from `prompt` (the
// oracle for outputs).
inline std::vector<int32_t> ExpectFrom(std::vector<int32_t> ctx, int32_t n) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < n; ++i) {
    out.push_back(NextToken(ctx));
    ctx.push_back(out.back());
  }
  return out;
}

// ExpectFrom the prompt 10, 11, ..., 10 + prompt_len - 1 (Request's).
inline std::vector<int32_t> Expect(int32_t prompt_len, int32_t n) {
  std::vector<int32_t> ctx;
  for (int32_t i = 0; i < prompt_len; ++i) ctx.push_back(10 + i);
  return ExpectFrom(std::move(ctx), n);
}

}  // namespace testing_harness
}  // namespace tq
