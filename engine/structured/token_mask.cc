// Vocabulary trie, suffix and state mask caches and the per-step mask (see
// token_mask.h).
#include "engine/structured/token_mask.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "engine/common/error.h"

namespace tq::structured {
namespace {

void SetBit(std::span<uint64_t> mask, int32_t i) {
  mask[static_cast<size_t>(i) >> 6] |= uint64_t{1} << (i & 63);
}
bool GetBit(std::span<const uint64_t> mask, int32_t i) {
  return (mask[static_cast<size_t>(i) >> 6] >> (i & 63)) & 1;
}

}  // namespace

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids)
    : bytes_(std::move(token_bytes)), eos_ids_(std::move(eos_ids)) {
  byte_tokens_.assign(mask_words(), 0);
  for (int32_t i = 0; i < size(); ++i) {
    if (!bytes_[static_cast<size_t>(i)].empty()) {
      sorted_.push_back(i);
      SetBit(byte_tokens_, i);
    }
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  // Preorder trie from the sorted tokens: path[d] is the node at depth d.
  nodes_.push_back(Node{});
  std::vector<int32_t> path{0};
  std::string prev;
  for (size_t k = 0; k < sorted_.size(); ++k) {
    const std::string& b = bytes_[static_cast<size_t>(sorted_[k])];
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < b.size() && prev[lcp] == b[lcp]) ++lcp;
    while (path.size() > lcp + 1) {  // close nodes below the common prefix
      nodes_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < b.size(); ++d) {
      Node n;
      n.depth = static_cast<int32_t>(d + 1);
      n.byte = static_cast<uint8_t>(b[d]);
      n.tok_begin = n.tok_end = static_cast<int32_t>(k);
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(n);
    }
    Node& leaf = nodes_[static_cast<size_t>(path.back())];
    if (leaf.tok_end == leaf.tok_begin) leaf.tok_begin = static_cast<int32_t>(k);
    leaf.tok_end = static_cast<int32_t>(k) + 1;
    prev = b;
  }
  while (!path.empty()) {
    nodes_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(nodes_.size());
    path.pop_back();
  }
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  if (!StartStacks(grammar_, &start_)) {
    throw Error("grammar: over the compile budget: the start state expands more than " +
                std::to_string(kMaxExpandSteps) + " rule references (kMaxExpandSteps)");
  }
}

std::string StateKey(const std::vector<Stack>& stacks) {
  std::string key;
  for (const Stack& s : stacks) {
    const auto n = static_cast<int32_t>(s.size());
    key.append(reinterpret_cast<const char*>(&n), sizeof(n));
    key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int32_t));
  }
  return key;
}

int32_t CompiledGrammar::WalkStates::Intern(std::vector<Stack> set) {
  std::string key = StateKey(set);
  const auto it = index.find(key);
  if (it != index.end()) return it->second;
  const auto id = static_cast<int32_t>(sets.size());
  can_end.push_back(!set.empty() && set.front().empty() ? 1 : 0);
  bytes += 2 * key.size() + set.size() * sizeof(Stack) + 64;
  sets.push_back(std::move(set));
  index.emplace(std::move(key), id);
  if (static_cast<size_t>(id) < kDense) dense.resize(dense.size() + 256, kUnknown);
  return id;
}

int32_t CompiledGrammar::WalkStates::Next(const Grammar& g, int32_t id, uint8_t byte) {
  if (static_cast<size_t>(id) < kDense) {
    const int32_t known = dense[static_cast<size_t>(id) * 256 + byte];
    if (known != kUnknown) return known;
  } else {
    const auto it = sparse.find(static_cast<uint64_t>(id) << 8 | byte);
    if (it != sparse.end()) return it->second;
  }
  AdvanceStacks(g, sets[static_cast<size_t>(id)], byte, &scratch);
  const int32_t next = scratch.empty() ? kDead : Intern(scratch);
  if (static_cast<size_t>(id) < kDense) {
    dense[static_cast<size_t>(id) * 256 + byte] = next;  // Intern may have moved `dense`
  } else {
    sparse.emplace(static_cast<uint64_t>(id) << 8 | byte, next);
  }
  return next;
}

// The pruned trie walk from the single stack `suffix`: an empty stack is the
// suffix finished; a byte needed after that makes the token uncertain (or
// rejected when `whole`: the suffix is the entire stack, and a finished
// grammar takes no more bytes).
CompiledGrammar::SuffixEntry CompiledGrammar::Build(const Stack& suffix, bool whole) const {
  const TokenVocabulary& v = *vocab_;
  const std::vector<TokenVocabulary::Node>& nodes = v.nodes();
  const std::vector<int32_t>& sorted = v.sorted();
  std::lock_guard<std::mutex> lock(build_mu_);
  const auto over = [this] {
    return walk_.sets.size() > kMaxWalkStates || walk_.bytes > kMaxWalkBytes;
  };
  if (over()) walk_ = WalkStates{};
  std::vector<int32_t> ids(1, walk_.Intern(std::vector<Stack>{suffix}));
  std::vector<uint8_t> exited(1, 0);
  std::vector<int32_t> accepted, uncertain;
  for (size_t i = 1; i < nodes.size();) {
    const TokenVocabulary::Node& n = nodes[i];
    const auto d = static_cast<size_t>(n.depth);
    if (ids.size() <= d) {
      ids.resize(d + 1);
      exited.resize(d + 1);
    }
    if (over()) {  // the memo outgrew its bound mid-walk: keep only the current path's states
      std::vector<std::vector<Stack>> path;
      for (size_t k = 0; k < d; ++k) path.push_back(walk_.sets[static_cast<size_t>(ids[k])]);
      walk_ = WalkStates{};
      for (size_t k = 0; k < d; ++k) ids[k] = walk_.Intern(std::move(path[k]));
    }
    const int32_t parent = ids[d - 1];
    exited[d] = exited[d - 1] | walk_.can_end[static_cast<size_t>(parent)];
    ids[d] = walk_.Next(grammar_, parent, n.byte);
    if (ids[d] != WalkStates::kDead) {
      for (int32_t k = n.tok_begin; k < n.tok_end; ++k) accepted.push_back(sorted[k]);
      ++i;
      continue;
    }
    if (exited[d] && !whole) {  // the whole subtree runs past the suffix
      for (size_t j = i; j < static_cast<size_t>(n.end); ++j) {
        for (int32_t k = nodes[j].tok_begin; k < nodes[j].tok_end; ++k) uncertain.push_back(k);
      }
    }
    i = static_cast<size_t>(n.end);
  }
  SuffixEntry c;
  // Preorder visits tokens in sorted (byte) order: k ascends.
  c.uncertain = std::move(uncertain);
  const size_t byte_tokens = sorted.size();
  const size_t list_limit = v.mask_words() * 2;  // a list beats a bitset below this
  if (accepted.size() <= list_limit) {
    std::sort(accepted.begin(), accepted.end());
    c.form = SuffixEntry::Form::kList;
    c.list = std::move(accepted);
  } else if (byte_tokens - accepted.size() <= list_limit) {
    std::vector<uint64_t> bits(v.mask_words(), 0);
    for (int32_t t : accepted) SetBit(bits, t);
    c.form = SuffixEntry::Form::kComplement;
    for (int32_t t : sorted) {
      if (!GetBit(bits, t)) c.list.push_back(t);
    }
    std::sort(c.list.begin(), c.list.end());
  } else {
    c.form = SuffixEntry::Form::kBitset;
    c.bits.assign(v.mask_words(), 0);
    for (int32_t t : accepted) SetBit(c.bits, t);
  }
  return c;
}

void CompiledGrammar::SuffixEntry::OrAccepted(const TokenVocabulary& vocab,
                                              std::span<uint64_t> mask) const {
  switch (form) {
    case Form::kList:
      for (int32_t t : list) SetBit(mask, t);
      break;
    case Form::kBitset:
      for (size_t w = 0; w < mask.size(); ++w) mask[w] |= bits[w];
      break;
    case Form::kComplement: {
      // All byte tokens but the listed ones: OR word by word.
      const std::vector<uint64_t>& base = vocab.byte_tokens();
      size_t next = 0;
      for (size_t w = 0; w < mask.size(); ++w) {
        uint64_t word = base[w];
        while (next < list.size() && (static_cast<size_t>(list[next]) >> 6) == w) {
          word &= ~(uint64_t{1} << (list[next] & 63));
          ++next;
        }
        mask[w] |= word;
      }
      break;
    }
  }
}

std::shared_ptr<const CompiledGrammar::SuffixEntry> CompiledGrammar::Suffix(
    const Stack& stack) const {
  const bool whole = stack.size() <= kSuffixDepth;
  const Stack suffix(
      stack.end() - static_cast<std::ptrdiff_t>(std::min(stack.size(), kSuffixDepth)), stack.end());
  std::string key = StateKey({suffix});
  key.push_back(whole ? 'w' : 's');
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = suffixes_.find(key);
    if (it != suffixes_.end()) return it->second;
  }
  // Built outside the lock: two sequences may build the same entry once each.
  auto entry = std::make_shared<const SuffixEntry>(Build(suffix, whole));
  std::lock_guard<std::mutex> lock(mu_);
  const size_t bytes = key.size() + entry->list.size() * sizeof(int32_t) +
                       entry->bits.size() * sizeof(uint64_t) +
                       entry->uncertain.size() * sizeof(int32_t);
  if (suffix_bytes_ + bytes <= kSuffixCacheBytes &&
      suffixes_.emplace(std::move(key), entry).second) {
    suffix_bytes_ += bytes;
  }
  return entry;
}

std::shared_ptr<const std::vector<uint64_t>> CompiledGrammar::CachedMask(
    const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = states_.find(key);
  return it == states_.end() ? nullptr : it->second;
}

void CompiledGrammar::StoreMask(const std::string& key,
                                std::shared_ptr<const std::vector<uint64_t>> mask) const {
  const size_t bytes = key.size() + mask->size() * sizeof(uint64_t);
  std::lock_guard<std::mutex> lock(mu_);
  if (state_bytes_ + bytes > kStateCacheBytes) return;
  if (states_.emplace(key, std::move(mask)).second) state_bytes_ += bytes;
}

size_t CompiledGrammar::num_suffix_entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return suffixes_.size();
}

size_t CompiledGrammar::num_state_masks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return states_.size();
}

size_t CompiledGrammar::cache_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return suffix_bytes_ + state_bytes_;
}

size_t CompiledGrammar::num_uncertain() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [key, e] : suffixes_) n += e->uncertain.size();
  return n;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), matcher_(&grammar_->grammar(), grammar_->start_stacks()) {}

void GrammarMatcher::CheckUncertain(const std::vector<int32_t>& uncertain,
                                    std::span<uint64_t> mask) {
  const TokenVocabulary& v = grammar_->vocab();
  const Grammar& g = grammar_->grammar();
  const std::vector<int32_t>& sorted = v.sorted();
  if (walk_.empty()) walk_.resize(1);
  walk_[0] = matcher_.stacks();
  constexpr size_t kNone = ~size_t{0};
  const std::string* prev = nullptr;  // the last token walked
  size_t valid = 0;                   // walk_[0..valid] hold the states of its prefixes
  size_t dead = kNone;                // its shortest rejected prefix length
  for (const int32_t k : uncertain) {
    const int32_t t = sorted[static_cast<size_t>(k)];
    if (GetBit(mask, t)) continue;  // accepted by another stack's entry
    const std::string& b = v.bytes(t);
    size_t lcp = 0;
    if (prev != nullptr) {
      while (lcp < prev->size() && lcp < b.size() && (*prev)[lcp] == b[lcp]) ++lcp;
    }
    if (dead != kNone && lcp >= dead) continue;  // extends a rejected prefix
    if (walk_.size() < b.size() + 1) walk_.resize(b.size() + 1);
    size_t d = std::min(valid, lcp);
    dead = kNone;
    for (; d < b.size(); ++d) {
      AdvanceStacks(g, walk_[d], static_cast<uint8_t>(b[d]), &walk_[d + 1]);
      if (walk_[d + 1].empty()) {
        dead = d + 1;
        break;
      }
    }
    valid = dead == kNone ? b.size() : dead;
    prev = &b;
    if (dead == kNone) SetBit(mask, t);
  }
}

void GrammarMatcher::FillMask(std::vector<uint64_t>* mask) {
  const TokenVocabulary& v = grammar_->vocab();
  std::string key;
  if (!ended_) {
    key = StateKey(matcher_.stacks());
    if (auto cached = grammar_->CachedMask(key)) {
      mask->assign(cached->begin(), cached->end());
      return;
    }
  }
  mask->assign(v.mask_words(), 0);
  std::span<uint64_t> m(*mask);
  if (!ended_) {
    std::vector<std::shared_ptr<const CompiledGrammar::SuffixEntry>> entries;
    for (const Stack& s : matcher_.stacks()) {
      if (s.empty()) continue;
      auto e = grammar_->Suffix(s);
      if (std::find(entries.begin(), entries.end(), e) != entries.end()) continue;
      e->OrAccepted(v, m);
      entries.push_back(std::move(e));
    }
    // One walk over the uncertain tokens of all entries (in byte order, each
    // once): the whole state decides them, whichever stack's entry named them.
    std::vector<int32_t> uncertain;
    for (const auto& e : entries)
      uncertain.insert(uncertain.end(), e->uncertain.begin(), e->uncertain.end());
    if (entries.size() > 1) {
      std::sort(uncertain.begin(), uncertain.end());
      uncertain.erase(std::unique(uncertain.begin(), uncertain.end()), uncertain.end());
    }
    CheckUncertain(uncertain, m);
  }
  const bool any = std::any_of(mask->begin(), mask->end(), [](uint64_t w) { return w != 0; });
  if (ended_ || matcher_.CanEnd() || !any) {
    for (int32_t e : v.eos_ids()) {
      if (e >= 0 && e < v.size()) SetBit(m, e);
    }
  }
  if (!ended_) grammar_->StoreMask(key, std::make_shared<const std::vector<uint64_t>>(*mask));
}

bool GrammarMatcher::AcceptToken(int32_t token) {
  const TokenVocabulary& v = grammar_->vocab();
  if (ended_) return true;
  if (std::find(v.eos_ids().begin(), v.eos_ids().end(), token) != v.eos_ids().end()) {
    if (!matcher_.CanEnd()) return false;
    ended_ = true;
    return true;
  }
  if (token < 0 || token >= v.size() || v.bytes(token).empty()) return false;
  ByteMatcher next = matcher_;
  if (!next.AdvanceAll(v.bytes(token))) return false;
  matcher_ = std::move(next);
  return true;
}

void ApplyTokenMask(std::span<float> logits, std::span<const uint64_t> mask) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t word = w < mask.size() ? mask[w] : 0;
    if (word == ~uint64_t{0}) continue;
    const size_t end = std::min(n, (w + 1) * 64);
    if (word == 0) {
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(w * 64),
                logits.begin() + static_cast<std::ptrdiff_t>(end), kNegInf);
      continue;
    }
    for (size_t i = w * 64; i < end; ++i) {
      if (!((word >> (i & 63)) & 1)) logits[i] = kNegInf;
    }
  }
}

}  // namespace tq::structured
