// Vocabulary trie, per-position token caches and the per-step mask (see
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
  cache_index_.assign(grammar_.elements.size(), -1);
  for (size_t p = 0; p < grammar_.elements.size(); ++p) {
    if (grammar_.elements[p].kind != Grammar::Kind::kBytes) continue;
    cache_index_[p] = static_cast<int32_t>(cache_.size());
    cache_.push_back(Build(static_cast<int32_t>(p)));
  }
}

// The pruned trie walk from the single frame [p]: an empty stack is the
// frame finished; a byte needed after that makes the token uncertain.
CompiledGrammar::PositionCache CompiledGrammar::Build(int32_t p) const {
  const TokenVocabulary& v = *vocab_;
  const std::vector<TokenVocabulary::Node>& nodes = v.nodes();
  const std::vector<int32_t>& sorted = v.sorted();
  std::vector<std::vector<Stack>> states(1, std::vector<Stack>{Stack{p}});
  std::vector<bool> exited(1, false);
  std::vector<int32_t> accepted, uncertain;
  std::vector<Stack> live;
  for (size_t i = 1; i < nodes.size();) {
    const TokenVocabulary::Node& n = nodes[i];
    const auto d = static_cast<size_t>(n.depth);
    if (states.size() <= d) {
      states.resize(d + 1);
      exited.resize(d + 1);
    }
    const std::vector<Stack>& parent = states[d - 1];
    exited[d] = exited[d - 1] || (!parent.empty() && parent.front().empty());
    AdvanceStacks(grammar_, parent, n.byte, &states[d]);
    if (!states[d].empty()) {
      for (int32_t k = n.tok_begin; k < n.tok_end; ++k) accepted.push_back(sorted[k]);
      ++i;
      continue;
    }
    if (exited[d]) {  // the whole subtree runs past the frame
      for (size_t j = i; j < static_cast<size_t>(n.end); ++j) {
        for (int32_t k = nodes[j].tok_begin; k < nodes[j].tok_end; ++k) {
          uncertain.push_back(sorted[k]);
        }
      }
    }
    i = static_cast<size_t>(n.end);
  }
  PositionCache c;
  std::sort(uncertain.begin(), uncertain.end());
  c.uncertain = std::move(uncertain);
  const size_t byte_tokens = sorted.size();
  const size_t list_limit = v.mask_words() * 2;  // a list beats a bitset below this
  if (accepted.size() <= list_limit) {
    std::sort(accepted.begin(), accepted.end());
    c.form = PositionCache::Form::kList;
    c.list = std::move(accepted);
  } else if (byte_tokens - accepted.size() <= list_limit) {
    std::vector<uint64_t> bits(v.mask_words(), 0);
    for (int32_t t : accepted) SetBit(bits, t);
    c.form = PositionCache::Form::kComplement;
    for (int32_t t : sorted) {
      if (!GetBit(bits, t)) c.list.push_back(t);
    }
    std::sort(c.list.begin(), c.list.end());
  } else {
    c.form = PositionCache::Form::kBitset;
    c.bits.assign(v.mask_words(), 0);
    for (int32_t t : accepted) SetBit(c.bits, t);
  }
  return c;
}

void CompiledGrammar::OrAccepted(int32_t p, std::span<uint64_t> mask) const {
  const PositionCache& c = cache_[static_cast<size_t>(cache_index_[static_cast<size_t>(p)])];
  switch (c.form) {
    case PositionCache::Form::kList:
      for (int32_t t : c.list) SetBit(mask, t);
      break;
    case PositionCache::Form::kBitset:
      for (size_t w = 0; w < mask.size(); ++w) mask[w] |= c.bits[w];
      break;
    case PositionCache::Form::kComplement: {
      // All byte tokens but the listed ones: OR word by word.
      const std::vector<uint64_t>& base = vocab_->byte_tokens();
      size_t next = 0;
      for (size_t w = 0; w < mask.size(); ++w) {
        uint64_t word = base[w];
        while (next < c.list.size() && (static_cast<size_t>(c.list[next]) >> 6) == w) {
          word &= ~(uint64_t{1} << (c.list[next] & 63));
          ++next;
        }
        mask[w] |= word;
      }
      break;
    }
  }
}

const std::vector<int32_t>& CompiledGrammar::Uncertain(int32_t p) const {
  return cache_[static_cast<size_t>(cache_index_[static_cast<size_t>(p)])].uncertain;
}

size_t CompiledGrammar::num_uncertain() const {
  size_t n = 0;
  for (const PositionCache& c : cache_) n += c.uncertain.size();
  return n;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), matcher_(&grammar_->grammar()) {}

void GrammarMatcher::FillMask(std::vector<uint64_t>* mask) {
  const TokenVocabulary& v = grammar_->vocab();
  mask->assign(v.mask_words(), 0);
  std::span<uint64_t> m(*mask);
  tops_.clear();
  if (!ended_) {
    for (const Stack& s : matcher_.stacks()) {
      if (!s.empty()) tops_.push_back(s.back());
    }
  }
  std::sort(tops_.begin(), tops_.end());
  tops_.erase(std::unique(tops_.begin(), tops_.end()), tops_.end());
  for (int32_t p : tops_) grammar_->OrAccepted(p, m);
  for (int32_t p : tops_) {
    for (int32_t t : grammar_->Uncertain(p)) {
      if (!GetBit(m, t) && matcher_.Accepts(v.bytes(t))) SetBit(m, t);
    }
  }
  const bool any = std::any_of(mask->begin(), mask->end(), [](uint64_t w) { return w != 0; });
  if (ended_ || matcher_.CanEnd() || !any) {
    for (int32_t e : v.eos_ids()) {
      if (e >= 0 && e < v.size()) SetBit(m, e);
    }
  }
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
    for (size_t i = w * 64; i < end; ++i) {
      if (!((word >> (i & 63)) & 1)) logits[i] = kNegInf;
    }
  }
}

}  // namespace tq::structured
