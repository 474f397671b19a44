#include "engine/runtime/perplexity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "engine/common/error.h"

namespace tq {

double NegLogProb(const float* row, int32_t vocab, int32_t target) {
  double max = -std::numeric_limits<double>::infinity();
  for (int32_t v = 0; v < vocab; ++v) max = std::max(max, static_cast<double>(row[v]));
  double sum = 0.0;
  for (int32_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
  return max + std::log(sum) - static_cast<double>(row[target]);
}

std::vector<std::string> SplitDocuments(std::string_view text) {
  std::vector<std::string> docs;
  std::string doc;
  bool in_doc = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t\r\f\v") == std::string_view::npos) {
      if (in_doc) docs.push_back(std::move(doc));
      doc.clear();
      in_doc = false;
      continue;
    }
    if (in_doc) doc += '\n';
    doc += line;
    in_doc = true;
  }
  if (in_doc) docs.push_back(std::move(doc));
  return docs;
}

PerplexityResult EvaluatePerplexity(OfflineEngine& engine,
                                    std::span<const std::vector<int32_t>> documents,
                                    int32_t context, int32_t stride) {
  if (context < 2) {
    throw Error("perplexity: context must be >= 2 (got " + std::to_string(context) + ")");
  }
  if (stride < 1 || stride > context) {
    throw Error("perplexity: stride must be in [1, context=" + std::to_string(context) + "] (got " +
                std::to_string(stride) + ")");
  }
  // Every window of every document, scored in one batch of prompt-logprob
  // requests; the sums then run in window order.
  struct Window {
    int64_t begin, end, first;  // score positions [first, end) of doc[begin, end)
  };
  std::vector<Window> windows;
  std::vector<std::vector<int32_t>> prompts;
  for (const std::vector<int32_t>& doc : documents) {
    const int64_t n = static_cast<int64_t>(doc.size());
    if (n < 2) continue;
    int64_t prev_end = 0;  // tokens before this are scored (or are the document's first)
    for (int64_t begin = 0;; begin += stride) {
      const int64_t end = std::min<int64_t>(begin + context, n);
      // Position p is predicted from the window's tokens before it, so p > begin.
      const int64_t first = std::max(prev_end, begin + 1);
      if (first < end) {
        windows.push_back({begin, end, first});
        prompts.emplace_back(doc.begin() + begin, doc.begin() + end);
      }
      prev_end = end;
      if (end == n) break;
    }
  }
  const std::vector<std::vector<double>> logprobs = engine.ScorePrompts(prompts);
  PerplexityResult result;
  result.context = context;
  result.stride = stride;
  for (size_t w = 0; w < windows.size(); ++w) {
    const Window& win = windows[w];
    // logprobs[w][j] scores window token j + 1, i.e. position begin + j + 1.
    for (int64_t p = win.first; p < win.end; ++p) {
      result.nll_sum -= logprobs[w][static_cast<size_t>(p - win.begin - 1)];
    }
    result.num_predicted += win.end - win.first;
    ++result.num_windows;
  }
  result.perplexity = result.num_predicted > 0
                          ? std::exp(result.nll_sum / static_cast<double>(result.num_predicted))
                          : std::numeric_limits<double>::quiet_NaN();
  return result;
}

}  // namespace tq
