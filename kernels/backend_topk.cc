// Backend::LogitsTopK's default (backend.h): the rows copied to the host and
// ranked by the CPU reference (kernels/cpu/cpu_topk.h).
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_topk.h"
#include "kernels/op_checks.h"

namespace tq::kernels {

void Backend::LogitsTopK(const LogitsTopKParams& p) {
  CheckLogitsTopK(Name(), p);
  if (p.rows == 0) return;
  const size_t rows = static_cast<size_t>(p.rows), k = static_cast<size_t>(p.k);
  std::vector<float> logits(rows * static_cast<size_t>(p.vocab)), inv_t(rows), values(rows * k);
  std::vector<int32_t> ids(rows * k);
  std::vector<double> sum_exp(rows), sum_exp_scaled(rows);
  CopyToHost(logits.data(), p.logits, logits.size() * sizeof(float));
  CopyToHost(inv_t.data(), p.inv_temperature, rows * sizeof(float));
  std::vector<float> scratch;
  for (size_t r = 0; r < rows; ++r) {
    cpu::LogitsTopKRow(logits.data() + r * p.vocab, p.vocab, p.k, inv_t[r], ids.data() + r * k,
                       values.data() + r * k, &sum_exp[r], &sum_exp_scaled[r], &scratch);
  }
  CopyToDevice(p.ids, ids.data(), ids.size() * sizeof(int32_t));
  CopyToDevice(p.values, values.data(), values.size() * sizeof(float));
  CopyToDevice(p.sum_exp, sum_exp.data(), rows * sizeof(double));
  CopyToDevice(p.sum_exp_scaled, sum_exp_scaled.data(), rows * sizeof(double));
}

}  // namespace tq::kernels
