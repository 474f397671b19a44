// The BPE model of a tokenizer.json (HF tokenizers' models::bpe).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tq::hf {

/// Byte-pair encoding (Sennrich et al. 2016) over a vocabulary and a ranked
/// merge list, as HF tokenizers' BPE: merges in either form ("a b" strings or
/// ["a", "b"] pairs), ignore_merges (a word in the vocabulary is one token),
/// byte_fallback ("<0xNN>" tokens for characters outside the vocabulary),
/// unk_token with fuse_unk, continuing_subword_prefix / end_of_word_suffix.
/// Dropout is refused. Immutable after load; Tokenize is thread-safe (each
/// thread has its own word cache).
class BpeModel {
 public:
  /// Builds the model from tokenizer.json's "model" object. Throws tq::Error
  /// "<where>: ..." naming what is wrong or unsupported.
  BpeModel(const nlohmann::json& spec, const std::string& where);

  /// Appends the ids of one pre-tokenized word (valid UTF-8). Characters
  /// that are neither in the vocabulary nor covered by byte fallback become
  /// unk_token, or are dropped when there is none (as in HF).
  void Tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  /// Id of a vocabulary token; -1 when absent.
  int32_t TokenToId(std::string_view token) const;
  /// The token of `id`; nullptr when no token has that id.
  const std::string* IdToToken(int32_t id) const;
  /// One past the largest id.
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::unordered_map<char32_t, int32_t> char_ids_;  // single-character tokens
  int32_t byte_ids_[256];                           // "<0xNN>" tokens, -1 when absent
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix
  uint64_t cache_id_;   // this model's key in the per-thread word cache

  void MergeWord(std::string_view word, std::vector<int32_t>& ids) const;
  const Merge* FindMerge(int32_t a, int32_t b) const;
};

}  // namespace tq::hf
