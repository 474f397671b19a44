// Readers of the float64 reference's outputs (tests/reference/llama_ref.py,
// format in tests/reference/README.md), shared by the architecture tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tq::testing {

/// "1,403,407" -> {1, 403, 407} (a --greedy-out line).
inline std::vector<int32_t> ParseIds(const std::string& line) {
  std::vector<int32_t> ids;
  std::stringstream ss(line);
  std::string item;
  while (std::getline(ss, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

/// A --greedy-out file: the prompt ids and the greedy ids (empty when the
/// file lacks either line: the caller's size check then fails).
struct GreedyRef {
  std::vector<int32_t> prompt, tokens;
};
inline GreedyRef ReadGreedy(const std::string& path) {
  std::ifstream in(path);
  std::string prompt_line, greedy_line;
  GreedyRef ref;
  if (!std::getline(in, prompt_line) || !std::getline(in, greedy_line)) {
    ADD_FAILURE() << path << ": no prompt and greedy lines";
    return ref;
  }
  ref.prompt = ParseIds(prompt_line);
  ref.tokens = ParseIds(greedy_line);
  return ref;
}

/// TQREF1: the prompt and its float64 logits [tokens][vocab].
struct F64Logits {
  std::vector<int32_t> tokens;
  std::vector<double> logits;
  int32_t vocab = 0;
};

/// Reads a TQREF1 file; a wrong magic or a truncated file fails the test.
inline F64Logits ReadLogits(const std::string& path) {
  F64Logits ref;
  std::ifstream in(path, std::ios::binary);
  char magic[7] = {};
  in.read(magic, 7);
  EXPECT_EQ(std::string(magic, 7), "TQREF1\n") << path;
  int32_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 4);
  in.read(reinterpret_cast<char*>(&ref.vocab), 4);
  ref.tokens.resize(static_cast<size_t>(n));
  in.read(reinterpret_cast<char*>(ref.tokens.data()), 4 * n);
  ref.logits.resize(static_cast<size_t>(n) * ref.vocab);
  in.read(reinterpret_cast<char*>(ref.logits.data()),
          static_cast<std::streamsize>(8 * ref.logits.size()));
  EXPECT_TRUE(in.good()) << path << " truncated";
  return ref;
}

/// Max |logits[i] - ref.logits[i]| over both vectors' common length (sizes
/// must match: checked), and the largest |reference logit| in *largest.
inline double MaxErrorAgainst(const F64Logits& ref, const std::vector<float>& logits,
                              double* largest) {
  EXPECT_EQ(logits.size(), ref.logits.size());
  double err = 0;
  *largest = 0;
  for (size_t i = 0; i < logits.size() && i < ref.logits.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(logits[i]) - ref.logits[i]));
    *largest = std::max(*largest, std::abs(ref.logits[i]));
  }
  return err;
}

}  // namespace tq::testing
