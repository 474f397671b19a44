#include "engine/kv/kv_calibration.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "engine/common/error.h"

namespace tq {
namespace {

using json = nlohmann::json;

constexpr const char* kFormat = "tqserve-key-channel-stats";
constexpr int kVersion = 1;

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw Error(path + ": " + what);
}

void CheckLayer(int32_t layer, int32_t num_layers, const char* what) {
  if (layer < 0 || layer >= num_layers) {
    throw std::out_of_range(std::string(what) + ": layer " + std::to_string(layer) +
                            " out of range [0, " + std::to_string(num_layers) + ")");
  }
}

// A field of the top-level object, or a tq::Error naming the file and the field.
const json& Field(const std::string& path, const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) Fail(path, std::string("missing field \"") + name + "\"");
  return *it;
}

int64_t IntField(const std::string& path, const json& j, const char* name) {
  const json& v = Field(path, j, name);
  if (!v.is_number_integer()) Fail(path, std::string("\"") + name + "\" is not an integer");
  return v.get<int64_t>();
}

void CheckCount(const std::string& path, const json& j, const char* name, int32_t want,
                const char* what) {
  const int64_t got = IntField(path, j, name);
  if (got != want) {
    Fail(path, "calibrated for " + std::to_string(got) + " " + what + ", the model has " +
                   std::to_string(want));
  }
}

// Reads a [num_layers][num_kv_heads][head_dim] array of floats into out (row-major).
// positive: every value must be > 0 (scales); otherwise only finite (means).
void ReadTensor(const std::string& path, const json& j, const char* name, int32_t num_layers,
                int32_t num_kv_heads, int32_t head_dim, bool positive, std::vector<float>* out) {
  const json& a = Field(path, j, name);
  auto where = [&](size_t l, size_t h, size_t c) {
    return std::string("\"") + name + "\"[" + std::to_string(l) + "][" + std::to_string(h) + "][" +
           std::to_string(c) + "]";
  };
  auto check_len = [&](const json& v, size_t want, const std::string& at) {
    if (!v.is_array() || v.size() != want) {
      Fail(path, at + " is not an array of " + std::to_string(want) +
                     " (shape must be [num_layers][num_kv_heads][head_dim] = [" +
                     std::to_string(num_layers) + "][" + std::to_string(num_kv_heads) + "][" +
                     std::to_string(head_dim) + "])");
    }
  };
  check_len(a, static_cast<size_t>(num_layers), std::string("\"") + name + "\"");
  out->clear();
  out->reserve(static_cast<size_t>(num_layers) * num_kv_heads * head_dim);
  for (size_t l = 0; l < a.size(); ++l) {
    check_len(a[l], static_cast<size_t>(num_kv_heads),
              std::string("\"") + name + "\"[" + std::to_string(l) + "]");
    for (size_t h = 0; h < a[l].size(); ++h) {
      const json& row = a[l][h];
      check_len(
          row, static_cast<size_t>(head_dim),
          std::string("\"") + name + "\"[" + std::to_string(l) + "][" + std::to_string(h) + "]");
      for (size_t c = 0; c < row.size(); ++c) {
        // A NaN or Inf saved by nlohmann becomes null; anything but a number is rejected.
        if (!row[c].is_number()) Fail(path, where(l, h, c) + " is not a finite number");
        const double v = row[c].get<double>();
        if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max()) {
          Fail(path, where(l, h, c) + " is not a finite float");
        }
        if (positive && !(static_cast<float>(v) > 0.0f)) {
          Fail(path, where(l, h, c) + " = " + row[c].dump() + ": scales must be positive");
        }
        out->push_back(static_cast<float>(v));
      }
    }
  }
}

json Nested(const std::vector<float>& v, int32_t num_layers, int32_t num_kv_heads,
            int32_t head_dim) {
  json a = json::array();
  size_t i = 0;
  for (int32_t l = 0; l < num_layers; ++l) {
    json layer = json::array();
    for (int32_t h = 0; h < num_kv_heads; ++h) {
      json row = json::array();
      for (int32_t c = 0; c < head_dim; ++c) row.push_back(v[i++]);
      layer.push_back(std::move(row));
    }
    a.push_back(std::move(layer));
  }
  return a;
}

}  // namespace

const float* KeyChannelStats::Mean(int32_t layer) const {
  CheckLayer(layer, num_layers, "KeyChannelStats::Mean");
  return mean.data() + static_cast<size_t>(layer) * num_kv_heads * head_dim;
}

const float* KeyChannelStats::Scale(int32_t layer) const {
  CheckLayer(layer, num_layers, "KeyChannelStats::Scale");
  return scale.data() + static_cast<size_t>(layer) * num_kv_heads * head_dim;
}

KeyStatsAccumulator::KeyStatsAccumulator(int32_t num_layers, int32_t num_kv_heads, int32_t head_dim)
    : num_layers_(num_layers), num_kv_heads_(num_kv_heads), head_dim_(head_dim) {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0) {
    throw std::invalid_argument("KeyStatsAccumulator: sizes must be positive (layers " +
                                std::to_string(num_layers) + ", kv heads " +
                                std::to_string(num_kv_heads) + ", head_dim " +
                                std::to_string(head_dim) + ")");
  }
  const size_t n = static_cast<size_t>(num_layers) * num_kv_heads * head_dim;
  count_.assign(static_cast<size_t>(num_layers), 0);
  mean_.assign(n, 0.0);
  m2_.assign(n, 0.0);
}

void KeyStatsAccumulator::Add(int32_t layer, const float* keys, int32_t num_tokens) {
  if (layer < 0 || layer >= num_layers_) {
    throw std::invalid_argument("KeyStatsAccumulator::Add: layer " + std::to_string(layer) +
                                " out of range [0, " + std::to_string(num_layers_) + ")");
  }
  if (num_tokens < 0) {
    throw std::invalid_argument("KeyStatsAccumulator::Add: negative token count " +
                                std::to_string(num_tokens));
  }
  if (num_tokens == 0) return;
  if (keys == nullptr) throw std::invalid_argument("KeyStatsAccumulator::Add: null keys");

  const size_t width = static_cast<size_t>(num_kv_heads_) * head_dim_;
  // Two passes over the batch: its mean, then its sum of squared deviations.
  std::vector<double> bmean(width, 0.0), bm2(width, 0.0);
  for (int32_t t = 0; t < num_tokens; ++t) {
    const float* row = keys + static_cast<size_t>(t) * width;
    for (size_t i = 0; i < width; ++i) bmean[i] += row[i];
  }
  const double nb = num_tokens;
  for (size_t i = 0; i < width; ++i) bmean[i] /= nb;
  for (int32_t t = 0; t < num_tokens; ++t) {
    const float* row = keys + static_cast<size_t>(t) * width;
    for (size_t i = 0; i < width; ++i) {
      const double d = row[i] - bmean[i];
      bm2[i] += d * d;
    }
  }
  // Merge (Chan, Golub & LeVeque 1979): exact in exact arithmetic, stable for large offsets.
  int64_t& count = count_[static_cast<size_t>(layer)];
  const double na = static_cast<double>(count);
  const double n = na + nb;
  double* mean = mean_.data() + static_cast<size_t>(layer) * width;
  double* m2 = m2_.data() + static_cast<size_t>(layer) * width;
  for (size_t i = 0; i < width; ++i) {
    const double delta = bmean[i] - mean[i];
    mean[i] += delta * (nb / n);
    m2[i] += bm2[i] + delta * delta * (na * nb / n);
  }
  count += num_tokens;
}

int64_t KeyStatsAccumulator::tokens(int32_t layer) const {
  CheckLayer(layer, num_layers_, "KeyStatsAccumulator::tokens");
  return count_[static_cast<size_t>(layer)];
}

KeyChannelStats KeyStatsAccumulator::Finish(std::string source) const {
  KeyChannelStats s;
  s.num_layers = num_layers_;
  s.num_kv_heads = num_kv_heads_;
  s.head_dim = head_dim_;
  s.num_tokens = *std::min_element(count_.begin(), count_.end());
  s.mean.resize(mean_.size());
  s.scale.resize(mean_.size());
  std::vector<double> sd(static_cast<size_t>(head_dim_));
  for (int32_t l = 0; l < num_layers_; ++l) {
    const int64_t n = count_[static_cast<size_t>(l)];
    if (n == 0) {
      throw Error("KV key calibration (" + source + "): layer " + std::to_string(l) +
                  " saw no tokens");
    }
    for (int32_t h = 0; h < num_kv_heads_; ++h) {
      const size_t base = (static_cast<size_t>(l) * num_kv_heads_ + h) * head_dim_;
      double max_sd = 0.0;
      for (int32_t c = 0; c < head_dim_; ++c) {
        sd[c] = std::sqrt(m2_[base + c] / static_cast<double>(n));  // population std
        max_sd = std::max(max_sd, sd[c]);
      }
      // The floor keeps (k − μ) / σ finite for channels that never varied; a head whose keys
      // were all constant normalizes to 0 whatever σ is, so 1 is as good as any value.
      const double floor =
          max_sd > 0.0 ? std::max(1e-6 * max_sd, double{std::numeric_limits<float>::min()}) : 1.0;
      for (int32_t c = 0; c < head_dim_; ++c) {
        const float mu = static_cast<float>(mean_[base + c]);
        const float sigma = static_cast<float>(std::max(sd[c], floor));
        if (!std::isfinite(mu) || !std::isfinite(sigma)) {
          throw Error("KV key calibration (" + source + "): keys of layer " + std::to_string(l) +
                      ", KV head " + std::to_string(h) +
                      " are not finite (NaN or Inf in the model's activations)");
        }
        s.mean[base + c] = mu;
        s.scale[base + c] = sigma;
      }
    }
  }
  s.source = std::move(source);
  return s;
}

std::string_view BuiltinCalibrationText() {
  // A raw string literal of about 2 KB: within every compiler's limit (MSVC's is 16 KB per
  // piece), and GCC/Clang have none to speak of.
  static constexpr std::string_view kText =
#include "calibration_text.inc"
      ;
  return kText;
}

std::string_view BuiltinHeldOutText() {
  static constexpr std::string_view kText =
#include "calibration_heldout.inc"
      ;
  return kText;
}

void SaveKeyStats(const std::string& path, const KeyChannelStats& stats) {
  const size_t n = static_cast<size_t>(std::max(stats.num_layers, 0)) *
                   static_cast<size_t>(std::max(stats.num_kv_heads, 0)) *
                   static_cast<size_t>(std::max(stats.head_dim, 0));
  if (stats.num_layers <= 0 || stats.num_kv_heads <= 0 || stats.head_dim <= 0 ||
      stats.mean.size() != n || stats.scale.size() != n) {
    throw std::invalid_argument("SaveKeyStats: mean/scale sizes disagree with the shape");
  }
  json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["num_layers"] = stats.num_layers;
  j["num_kv_heads"] = stats.num_kv_heads;
  j["head_dim"] = stats.head_dim;
  j["num_tokens"] = stats.num_tokens;
  j["source"] = stats.source;
  if (!stats.model_fingerprint.empty()) j["model_fingerprint"] = stats.model_fingerprint;
  j["mean"] = Nested(stats.mean, stats.num_layers, stats.num_kv_heads, stats.head_dim);
  j["scale"] = Nested(stats.scale, stats.num_layers, stats.num_kv_heads, stats.head_dim);
  // nlohmann writes doubles in shortest round-trip form; a float widened to double reads back
  // as the same double, hence the same float.
  const std::string text = j.dump() + "\n";

  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) Fail(path, std::string("cannot write ") + tmp + ": " + std::strerror(errno));
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    f.close();
    if (!f) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      Fail(path, "write failed: " + tmp);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    Fail(path, "cannot rename " + tmp + " to it: " + ec.message());
  }
}

KeyChannelStats LoadKeyStats(const std::string& path, int32_t num_layers, int32_t num_kv_heads,
                             int32_t head_dim, const std::string& model_fingerprint) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    Fail(path, std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) Fail(path, std::string("cannot open: ") + std::strerror(errno));
  json j;
  try {
    j = json::parse(f);
  } catch (const json::parse_error& e) {
    Fail(path, std::string("invalid JSON: ") + e.what());
  }
  if (!j.is_object()) Fail(path, "not a JSON object");
  const json& format = Field(path, j, "format");
  if (!format.is_string() || format.get<std::string>() != kFormat) {
    Fail(path, std::string("\"format\" is not \"") + kFormat + "\"");
  }
  if (IntField(path, j, "version") != kVersion) {
    Fail(path, "unsupported version " + Field(path, j, "version").dump() + " (expected " +
                   std::to_string(kVersion) + ")");
  }
  CheckCount(path, j, "num_layers", num_layers, "layers");
  CheckCount(path, j, "num_kv_heads", num_kv_heads, "KV heads");
  CheckCount(path, j, "head_dim", head_dim, "channels per head (head_dim)");

  KeyChannelStats s;
  s.num_layers = num_layers;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim;
  s.num_tokens = IntField(path, j, "num_tokens");
  if (s.num_tokens <= 0) Fail(path, "\"num_tokens\" must be positive");
  ReadTensor(path, j, "mean", num_layers, num_kv_heads, head_dim, false, &s.mean);
  ReadTensor(path, j, "scale", num_layers, num_kv_heads, head_dim, true, &s.scale);
  if (auto it = j.find("model_fingerprint"); it != j.end()) {
    if (!it->is_string()) Fail(path, "\"model_fingerprint\" is not a string");
    s.model_fingerprint = it->get<std::string>();
  }
  if (!model_fingerprint.empty() && s.model_fingerprint != model_fingerprint) {
    Fail(path, "calibrated for a different model (fingerprint '" + s.model_fingerprint +
                   "', this model '" + model_fingerprint + "'); delete it to recalibrate");
  }
  std::string saved_source;
  if (auto it = j.find("source"); it != j.end()) {
    if (!it->is_string()) Fail(path, "\"source\" is not a string");
    saved_source = it->get<std::string>();
  }
  s.source = "loaded from " + path;
  if (!saved_source.empty()) s.source += " (" + saved_source + ")";
  return s;
}

}  // namespace tq
