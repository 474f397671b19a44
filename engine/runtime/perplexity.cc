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

PerplexityResult EvaluatePerplexity(Generator& gen, std::span<const std::vector<int32_t>> documents,
                                    int32_t context, int32_t stride) {
  if (context < 2) {
    throw Error("perplexity: context must be >= 2 (got " + std::to_string(context) + ")");
  }
  if (stride < 1 || stride > context) {
    throw Error("perplexity: stride must be in [1, context=" + std::to_string(context) + "] (got " +
                std::to_string(stride) + ")");
  }
  const int32_t vocab = gen.files().config.vocab_size;
  PerplexityResult result;
  result.context = context;
  result.stride = stride;
  for (const std::vector<int32_t>& doc : documents) {
    const int64_t n = static_cast<int64_t>(doc.size());
    if (n < 2) continue;
    int64_t prev_end = 0;  // tokens before this are scored (or are the document's first)
    for (int64_t begin = 0;; begin += stride) {
      const int64_t end = std::min<int64_t>(begin + context, n);
      // Targets: positions in [first, end); position p is predicted by the
      // logits at window offset p - 1 - begin, so p must be > begin.
      const int64_t first = std::max(prev_end, begin + 1);
      if (first < end) {
        const std::span<const int32_t> window(doc.data() + begin, static_cast<size_t>(end - begin));
        const std::vector<float> logits = gen.PromptLogits(window);
        for (int64_t p = first; p < end; ++p) {
          const float* row = logits.data() + static_cast<size_t>(p - 1 - begin) * vocab;
          result.nll_sum += NegLogProb(row, vocab, doc[p]);
        }
        result.num_predicted += end - first;
        ++result.num_windows;
      }
      prev_end = end;
      if (end == n) break;
    }
  }
  result.perplexity = result.num_predicted > 0
                          ? std::exp(result.nll_sum / static_cast<double>(result.num_predicted))
                          : std::numeric_limits<double>::quiet_NaN();
  return result;
}

}  // namespace tq
