// BPE model and merge loop (see bpe_model.h).
//
// The merge loop follows HF tokenizers' Word::merge_all: symbols form a
// doubly linked list over the word's characters; a min-heap holds the
// candidate merges keyed by (merge rank, position), stale entries are skipped
// when popped. Each merge is O(log n): no rescan of the word per merge.
#include "engine/tokenizer/bpe_model.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/tokenizer/utf8.h"

namespace tq::hf {
namespace {

using json = nlohmann::json;

constexpr size_t kCacheCapacity = 10000;  // words per thread, as HF's BPE cache
constexpr size_t kCacheMaxWord = 256;     // bytes; longer words are not cached

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>> words;
};

WordCache& ThreadCache(uint64_t owner) {
  thread_local WordCache cache;
  if (cache.owner != owner) {
    cache.words.clear();
    cache.owner = owner;
  }
  return cache;
}

std::atomic<uint64_t> next_cache_id{1};

struct Symbol {
  int32_t id;
  int32_t prev, next;
  bool alive;
};

struct Candidate {
  uint32_t rank;
  int32_t pos;
  int32_t new_id;
  // Min-heap order: lower rank first, then leftmost.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

BpeModel::BpeModel(const json& spec, const std::string& where) : cache_id_(next_cache_id++) {
  if (spec.value("type", "BPE") != "BPE") {
    throw Error(where + ": unsupported model \"" + spec.value("type", "") + "\" (only BPE)");
  }
  if (spec.contains("dropout") && !spec["dropout"].is_null() && spec["dropout"].get<double>() > 0) {
    throw Error(where + ": unsupported BPE dropout (sampled tokenization)");
  }
  const auto str = [&](const char* key) {
    return spec.contains(key) && spec[key].is_string() ? spec[key].get<std::string>()
                                                       : std::string();
  };
  prefix_ = str("continuing_subword_prefix");
  suffix_ = str("end_of_word_suffix");
  fuse_unk_ = spec.value("fuse_unk", false);
  byte_fallback_ = spec.value("byte_fallback", false);
  ignore_merges_ = spec.value("ignore_merges", false);

  const json& vocab = spec.at("vocab");
  if (!vocab.is_object()) throw Error(where + ": model.vocab is not an object");
  vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (const auto& [token, id_json] : vocab.items()) {
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id > (1 << 30)) throw Error(where + ": vocab id out of range for " + token);
    vocab_[token] = static_cast<int32_t>(id);
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  id_to_token_.resize(max_id + 1);
  has_id_.assign(max_id + 1, false);
  for (const auto& [token, id] : vocab_) {
    id_to_token_[id] = token;
    has_id_[id] = true;
    size_t i = 0;
    const char32_t cp = token.empty() ? 0 : utf8::Next(token, i);
    if (!token.empty() && i == token.size()) char_ids_[cp] = id;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_ids_[b] = TokenToId(name);
  }
  const std::string unk = str("unk_token");
  if (!unk.empty()) {
    unk_id_ = TokenToId(unk);
    if (unk_id_ < 0) throw Error(where + ": unk_token \"" + unk + "\" is not in the vocabulary");
  }

  const json& merges = spec.at("merges");
  if (!merges.is_array()) throw Error(where + ": model.merges is not an array");
  merges_.reserve(merges.size());
  uint32_t rank = 0;
  for (const auto& m : merges) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        throw Error(where + ": merge \"" + s + "\" is not two tokens separated by a space");
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      throw Error(where + ": merge " + m.dump() + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const int32_t ia = TokenToId(a), ib = TokenToId(b);
    if (b.size() < prefix_.size()) throw Error(where + ": merge token \"" + b + "\" too short");
    const std::string merged = a + b.substr(prefix_.size());
    const int32_t im = TokenToId(merged);
    if (ia < 0 || ib < 0 || im < 0) {
      throw Error(where + ": merge \"" + a + " " + b + "\" uses a token not in the vocabulary");
    }
    merges_[PairKey(ia, ib)] = {rank++, im};  // a repeated pair: the later rank wins, as in HF
  }
}

int32_t BpeModel::TokenToId(std::string_view token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t a, int32_t b) const {
  const auto it = merges_.find(PairKey(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t id = TokenToId(word);
    if (id >= 0) {
      ids.push_back(id);
      return;
    }
  }
  if (word.size() >= kCacheMaxWord) return MergeWord(word, ids);
  WordCache& cache = ThreadCache(cache_id_);
  const auto it = cache.words.find(std::string(word));
  if (it != cache.words.end()) {
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t start = ids.size();
  MergeWord(word, ids);
  if (cache.words.size() < kCacheCapacity) {
    cache.words.emplace(std::string(word), std::vector<int32_t>(ids.begin() + start, ids.end()));
  }
}

void BpeModel::MergeWord(std::string_view word, std::vector<int32_t>& ids) const {
  // Initial symbols: one per character (or per byte with byte fallback).
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  int32_t pending_unk = -1;  // a fused run of unknown characters not yet added
  const auto add = [&](int32_t id) {
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, n + 1, true});
  };
  std::string buf;
  for (size_t i = 0; i < word.size();) {
    const size_t begin = i;
    const char32_t cp = utf8::Next(word, i);
    const bool first = begin == 0, last = i == word.size();
    int32_t id = -1;
    if ((first || prefix_.empty()) && (!last || suffix_.empty())) {
      const auto it = char_ids_.find(cp);
      if (it != char_ids_.end()) id = it->second;
    } else {
      buf.assign(first ? "" : prefix_);
      buf.append(word.substr(begin, i - begin));
      if (last) buf.append(suffix_);
      id = TokenToId(buf);
    }
    if (id >= 0) {
      if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
      add(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t k = begin; k < i && all; ++k)
        all = byte_ids_[static_cast<unsigned char>(word[k])] >= 0;
      if (all) {
        // HF adds byte tokens without flushing a pending unk first.
        for (size_t k = begin; k < i; ++k) add(byte_ids_[static_cast<unsigned char>(word[k])]);
        continue;
      }
    }
    if (unk_id_ < 0) continue;
    if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
    pending_unk = unk_id_;
  }
  if (pending_unk >= 0) add(pending_unk);
  if (sym.empty()) return;
  sym.back().next = -1;

  std::vector<Candidate> heap;
  heap.reserve(sym.size());
  for (size_t p = 0; p + 1 < sym.size(); ++p) {
    if (const Merge* m = FindMerge(sym[p].id, sym[p + 1].id)) {
      heap.push_back({m->rank, static_cast<int32_t>(p), m->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[left.next];
    const Merge* m = FindMerge(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const Merge* pm = FindMerge(sym[left.prev].id, left.id)) {
        heap.push_back({pm->rank, left.prev, pm->new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (left.next >= 0) {
      if (const Merge* nm = FindMerge(left.id, sym[left.next].id)) {
        heap.push_back({nm->rank, top.pos, nm->new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  for (const Symbol& s : sym) {
    if (s.alive) ids.push_back(s.id);
  }
}

}  // namespace tq::hf
