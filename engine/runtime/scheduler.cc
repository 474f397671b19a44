#include "engine/runtime/scheduler.h"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <span>

namespace tq {
namespace {

double Seconds(Scheduler::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

struct Scheduler::Sequence {
  SeqId id = 0;
  EngineRequest request;
  std::vector<int32_t> tokens;  // prompt + output
  int32_t num_prompt = 0;
  int32_t num_computed = 0;     // positions whose K/V are cached
  int32_t num_prompt_seen = 0;  // prompt tokens ever computed (survives preemption)
  BlockTable table;
  // Prefix cache: hashes of the full blocks of `tokens` (extended as tokens
  // come), how many table blocks are registered or attached from the cache,
  // and the prompt tokens found cached at first admission (-1: not admitted).
  std::vector<BlockHash> block_hashes;
  int32_t num_hashed_blocks = 0;
  int32_t num_cached_tokens = -1;
  bool known_to_runner = false;
  // Timings for metrics.
  Clock::time_point arrival, first_scheduled, first_token, last_token;
  bool scheduled_once = false;

  explicit Sequence(int32_t block_size) : table(block_size) {}
  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output() const { return num_tokens() - num_prompt; }
  // Ordering key: lower priority value first, then arrival.
  bool Before(const Sequence& o) const {
    return request.priority != o.request.priority ? request.priority < o.request.priority
                                                  : id < o.id;
  }
};

Scheduler::Scheduler(const SchedulerConfig& config) : config_(config), pool_(config.num_blocks) {}

Scheduler::~Scheduler() = default;

Scheduler::Sequence* Scheduler::Find(SeqId id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

void Scheduler::InsertSorted(std::vector<Sequence*>& queue, Sequence* seq) {
  auto pos = std::upper_bound(queue.begin(), queue.end(), seq,
                              [](const Sequence* a, const Sequence* b) { return a->Before(*b); });
  queue.insert(pos, seq);
}

std::vector<std::string> Scheduler::LiveRequestIds() const {
  std::vector<std::string> ids;
  ids.reserve(by_request_id_.size());
  for (const auto& [request_id, seq_id] : by_request_id_) ids.push_back(request_id);
  return ids;
}

SeqId Scheduler::AddRequest(EngineRequest request, Clock::time_point arrival) {
  auto seq = std::make_unique<Sequence>(config_.block_size);
  seq->id = next_id_++;
  seq->tokens = request.prompt_ids;
  seq->num_prompt = static_cast<int32_t>(request.prompt_ids.size());
  seq->request = std::move(request);
  seq->arrival = arrival;
  Sequence* raw = seq.get();
  by_request_id_[raw->request.request_id] = raw->id;
  seqs_.emplace(raw->id, std::move(seq));
  InsertSorted(waiting_, raw);
  return raw->id;
}

FinishedRequestStats Scheduler::Finish(Sequence* seq, FinishReason reason, Clock::time_point now) {
  seq->table.Release(pool_);
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  if (seq->known_to_runner) pending_finished_.push_back(seq->id);
  FinishedRequestStats stats;
  stats.finish = reason;
  stats.num_prompt_tokens = seq->num_prompt;
  stats.num_output_tokens = seq->num_output();
  stats.e2e_seconds = Seconds(now - seq->arrival);
  if (seq->scheduled_once) {
    stats.queue_seconds = Seconds(seq->first_scheduled - seq->arrival);
    if (seq->num_output() > 0) {
      stats.prefill_seconds = Seconds(seq->first_token - seq->first_scheduled);
      stats.decode_seconds = Seconds(now - seq->first_token);
    }
  } else {
    stats.queue_seconds = stats.e2e_seconds;
  }
  by_request_id_.erase(seq->request.request_id);
  seqs_.erase(seq->id);  // seq is dangling from here
  return stats;
}

std::optional<RequestUpdate> Scheduler::Abort(const std::string& request_id, Clock::time_point now,
                                              FinishReason reason) {
  auto it = by_request_id_.find(request_id);
  if (it == by_request_id_.end()) return std::nullopt;
  Sequence* seq = Find(it->second);
  RequestUpdate update;
  update.request_id = request_id;
  update.output.finish = reason;
  update.output.num_prompt_tokens = seq->num_prompt;
  update.output.num_output_tokens = seq->num_output();
  update.output.num_cached_tokens = std::max(0, seq->num_cached_tokens);
  update.finished = Finish(seq, reason, now);
  return update;
}

void Scheduler::Preempt(Sequence* seq, ScheduleOutput& out) {
  // Recompute later: the K/V of prompt + output so far are dropped.
  seq->table.Release(pool_);
  seq->num_computed = 0;
  seq->num_hashed_blocks = 0;
  std::erase(running_, seq);
  InsertSorted(waiting_, seq);
  out.preempted_ids.push_back(seq->id);
}

void Scheduler::ScheduleChunk(Sequence* seq, int32_t num_tokens, ScheduleOutput& out,
                              Clock::time_point now) {
  if (!seq->known_to_runner) {
    NewRequestData data;
    data.seq_id = seq->id;
    data.sampling = seq->request.sampling;
    data.num_logprobs = seq->request.num_logprobs;
    data.prompt_logprobs = seq->request.prompt_logprobs;
    out.new_requests.push_back(std::move(data));
    seq->known_to_runner = true;
  }
  if (!seq->scheduled_once) {
    seq->scheduled_once = true;
    seq->first_scheduled = now;
  }
  CheckWritable(seq, seq->num_computed, seq->num_computed + num_tokens);
  RegisterFullBlocks(seq, seq->num_computed + num_tokens);
  ScheduledSequence s;
  s.seq_id = seq->id;
  s.start_position = seq->num_computed;
  s.token_ids.assign(seq->tokens.begin() + seq->num_computed,
                     seq->tokens.begin() + seq->num_computed + num_tokens);
  s.block_table = seq->table.blocks();
  s.num_prompt_tokens = seq->num_prompt;
  s.tokens = seq->tokens;
  const int32_t prompt_end = std::min(seq->num_computed + num_tokens, seq->num_prompt);
  s.num_new_prompt_tokens = std::max(0, prompt_end - seq->num_prompt_seen);
  seq->num_prompt_seen = std::max(seq->num_prompt_seen, prompt_end);
  // max_model_len bounds prompt + output, so a full sequence samples nothing.
  s.sample = seq->num_computed + num_tokens == seq->num_tokens() &&
             seq->num_output() < seq->request.sampling.max_tokens &&
             seq->num_tokens() < config_.max_model_len;
  out.sequences.push_back(std::move(s));
  out.num_batched_tokens += num_tokens;
}

ScheduleOutput Scheduler::Schedule(Clock::time_point now) {
  ScheduleOutput out;
  out.finished_ids.swap(pending_finished_);
  int32_t budget = config_.max_num_batched_tokens;

  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int32_t n = std::min(seq->num_tokens() - seq->num_computed, budget);
    bool self_preempted = false;
    while (!seq->table.EnsureCapacity(pool_, seq->num_computed + n)) {
      // Sequences before i are already planned; the victim is always behind.
      Sequence* victim = running_.back();
      Preempt(victim, out);
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    ScheduleChunk(seq, n, out, now);
    budget -= n;
    ++i;
  }

  if (out.preempted_ids.empty()) {
    while (!waiting_.empty() && budget > 0 &&
           static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
      int32_t n = 0;
      if (!Admit(waiting_.front(), budget, out, now, &n)) break;
      budget -= n;
    }
    // Keep the priority order for the next step (admitted ones may outrank).
    std::stable_sort(running_.begin(), running_.end(),
                     [](const Sequence* a, const Sequence* b) { return a->Before(*b); });
  }
  return out;
}

std::vector<int32_t> Scheduler::FindCachedPrefix(Sequence* seq) {
  std::vector<int32_t> hits;
  if (!config_.enable_prefix_caching || seq->request.prompt_logprobs || seq->num_computed != 0) {
    return hits;
  }
  const int32_t bs = config_.block_size;
  const std::span<const int32_t> tokens(seq->tokens);
  ExtendBlockHashes(config_.prefix_cache_seed, tokens, bs, &seq->block_hashes);
  const int32_t max_blocks = (seq->num_tokens() - 1) / bs;  // the last token is computed
  for (int32_t i = 0; i < max_blocks; ++i) {
    const int32_t b = pool_.Lookup(seq->block_hashes[i], tokens.subspan(i * bs, bs));
    if (b < 0) break;
    hits.push_back(b);
  }
  return hits;
}

bool Scheduler::Admit(Sequence* seq, int32_t budget, ScheduleOutput& out, Clock::time_point now,
                      int32_t* scheduled) {
  const std::vector<int32_t> hits = FindCachedPrefix(seq);
  const int32_t bs = config_.block_size;
  const int32_t start = static_cast<int32_t>(hits.size()) * bs;
  const int32_t n = std::min(seq->num_tokens() - std::max(start, seq->num_computed), budget);
  // Reviving a cached hit takes it out of the free capacity.
  const auto revived = static_cast<int32_t>(
      std::count_if(hits.begin(), hits.end(), [&](int32_t b) { return pool_.ref_count(b) == 0; }));
  const int32_t end = std::max(start, seq->num_computed) + n;
  const int32_t needed =
      (end + bs - 1) / bs - static_cast<int32_t>(seq->table.blocks().size() + hits.size());
  if (needed > pool_.num_free() - revived) return false;
  for (int32_t b : hits) {
    pool_.Retain(b);
    seq->table.AppendShared(b);
  }
  if (!hits.empty()) {
    seq->num_computed = start;
    seq->num_hashed_blocks = static_cast<int32_t>(hits.size());
  }
  if (seq->num_cached_tokens < 0) {
    seq->num_cached_tokens = std::min(start, seq->num_prompt);
    if (config_.enable_prefix_caching && !seq->request.prompt_logprobs) {
      out.prefix_cache_queries += seq->num_prompt;
      out.prefix_cache_hits += seq->num_cached_tokens;
    }
  }
  if (!seq->table.EnsureCapacity(pool_, end)) {
    std::fprintf(stderr, "Scheduler::Admit: blocks counted free could not be allocated\n");
    std::abort();
  }
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
  running_.push_back(seq);
  ScheduleChunk(seq, n, out, now);
  *scheduled = n;
  return true;
}

void Scheduler::CheckWritable(const Sequence* seq, int32_t from, int32_t to) const {
  const int32_t bs = config_.block_size;
  for (int32_t i = from / bs; i < (to + bs - 1) / bs; ++i) {
    const int32_t b = seq->table.blocks().at(i);
    if (pool_.ref_count(b) != 1 || pool_.is_registered(b)) {
      std::fprintf(stderr,
                   "Scheduler: sequence %lld would write shared or cached block %d (refcount %d)\n",
                   static_cast<long long>(seq->id), b, pool_.ref_count(b));
      std::abort();
    }
  }
}

void Scheduler::RegisterFullBlocks(Sequence* seq, int32_t end) {
  if (!config_.enable_prefix_caching) return;
  const int32_t bs = config_.block_size;
  const std::span<const int32_t> tokens = std::span<const int32_t>(seq->tokens).first(end);
  ExtendBlockHashes(config_.prefix_cache_seed, tokens, bs, &seq->block_hashes);
  for (int32_t i = seq->num_hashed_blocks; i < end / bs; ++i) {
    // A block whose hash another block holds already stays unregistered
    // (freed, not cached, at refcount 0): the table keeps the first copy.
    pool_.Register(seq->table.blocks()[i], seq->block_hashes[i], tokens.subspan(i * bs, bs));
  }
  seq->num_hashed_blocks = std::max(seq->num_hashed_blocks, end / bs);
}

std::string Scheduler::CheckBlockAccounting() const {
  std::string err = pool_.CheckInvariants();
  if (!err.empty()) return err;
  std::vector<int32_t> refs(pool_.num_blocks(), 0);
  for (const auto& [id, seq] : seqs_) {
    for (int32_t b : seq->table.blocks()) {
      if (b < 0 || b >= pool_.num_blocks()) return "a block table holds an out-of-range block";
      ++refs[b];
    }
    if (std::find(waiting_.begin(), waiting_.end(), seq.get()) != waiting_.end() &&
        !seq->table.blocks().empty()) {
      return "waiting request " + seq->request.request_id + " holds blocks";
    }
  }
  for (int32_t b = 0; b < pool_.num_blocks(); ++b) {
    if (refs[b] != pool_.ref_count(b)) {
      return "block " + std::to_string(b) + " has refcount " + std::to_string(pool_.ref_count(b)) +
             " but is in " + std::to_string(refs[b]) + " block tables";
    }
  }
  return "";
}

std::vector<RequestUpdate> Scheduler::Update(const ScheduleOutput& scheduled,
                                             const ModelOutput& output, Clock::time_point now) {
  assert(output.results.size() == scheduled.sequences.size());
  std::vector<RequestUpdate> updates;
  for (size_t k = 0; k < scheduled.sequences.size(); ++k) {
    const ScheduledSequence& s = scheduled.sequences[k];
    const SequenceResult& r = output.results[k];
    Sequence* seq = Find(s.seq_id);
    if (seq == nullptr) continue;
    seq->num_computed += static_cast<int32_t>(s.token_ids.size());

    RequestUpdate u;
    u.request_id = seq->request.request_id;
    u.output.prompt_logprobs = r.prompt_logprobs;
    FinishReason finish = FinishReason::kNone;
    const SamplingParams& p = seq->request.sampling;
    if (s.sample && r.token >= 0) {
      const int32_t token = r.token;
      seq->tokens.push_back(token);
      u.output.token_ids.push_back(token);
      if (seq->request.num_logprobs >= 0) u.output.logprobs.push_back(r.logprobs);
      if (seq->num_output() == 1) {
        seq->first_token = now;
        u.ttft_seconds = Seconds(now - seq->arrival);
      } else {
        u.itl_seconds = Seconds(now - seq->last_token);
      }
      seq->last_token = now;
      const auto& eos = config_.eos_token_ids;
      const bool is_eos = !p.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end();
      const bool is_stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
                              p.stop_token_ids.end();
      if (is_eos || is_stop_id) {
        finish = FinishReason::kStop;
      } else if (seq->num_output() >= p.max_tokens || seq->num_tokens() >= config_.max_model_len) {
        finish = FinishReason::kLength;
      }
    } else if (seq->num_computed == seq->num_tokens() &&
               (seq->num_output() >= p.max_tokens || seq->num_tokens() >= config_.max_model_len)) {
      finish = FinishReason::kLength;  // max_tokens 0: the prompt alone (prompt logprobs)
    }
    u.output.num_prompt_tokens = seq->num_prompt;
    u.output.num_output_tokens = seq->num_output();
    u.output.num_cached_tokens = std::max(0, seq->num_cached_tokens);
    if (finish != FinishReason::kNone) {
      u.output.finish = finish;
      u.finished = Finish(seq, finish, now);
    }
    if (!u.output.token_ids.empty() || !u.output.prompt_logprobs.empty() || u.output.finished()) {
      updates.push_back(std::move(u));
    }
  }
  return updates;
}

}  // namespace tq
