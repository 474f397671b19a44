// Typed access to the fields of a Hugging Face config.json object, with the
// file name in every error: shared by the common parser (model_config.cc)
// and each architecture's own fields (engine/model/arch/).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/common/error.h"

namespace tq {

/// Throws tq::Error "<file>: <problem>" on one line (control characters of
/// either part replaced by '?', so a config value cannot forge log lines).
[[noreturn]] inline void ConfigFail(const std::string& file, const std::string& problem) {
  std::string s = file + ": " + problem;
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  throw Error(s);
}

/// Field access with the file name in every error. Absent and null read as
/// "not set". Holds a reference to the JSON object: it must outlive this.
class ConfigFields {
 public:
  using json = nlohmann::json;
  ConfigFields(const json& j, std::string file) : j_(j), file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  bool Has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& At(const std::string& key) const { return j_.at(key); }

  /// An integer >= lo; `def` when absent (required when def is empty).
  int32_t Int(const std::string& key, int64_t lo, std::optional<int32_t> def = {}) const {
    if (!Has(key)) {
      if (def) return *def;
      ConfigFail(file_, "required field '" + key + "' is missing");
    }
    return IntValue(At(key), key, lo);
  }
  int32_t IntValue(const json& v, const std::string& key, int64_t lo) const {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() &&
         v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) ||
        v.get<int64_t>() < lo || v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      ConfigFail(file_, "field '" + key + "' must be an integer >= " + std::to_string(lo) +
                            " (got " + v.dump() + ")");
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }
  /// A finite number > 0, `def` when absent.
  double Positive(const std::string& key, double def) const {
    if (!Has(key)) return def;
    const json& v = At(key);
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
      ConfigFail(file_, "field '" + key + "' must be a positive number (got " + v.dump() + ")");
    }
    return v.get<double>();
  }
  bool Bool(const std::string& key, bool def) const {
    if (!Has(key)) return def;
    if (!At(key).is_boolean()) {
      ConfigFail(file_, "field '" + key + "' must be true or false (got " + At(key).dump() + ")");
    }
    return At(key).get<bool>();
  }
  /// An int or a list of ints (HF allows both for eos_token_id), each >= 0.
  std::vector<int32_t> IntList(const std::string& key) const {
    std::vector<int32_t> out;
    if (!Has(key)) return out;
    const json& v = At(key);
    if (v.is_array()) {
      for (const json& e : v) out.push_back(IntValue(e, key, 0));
    } else {
      out.push_back(IntValue(v, key, 0));
    }
    return out;
  }

 private:
  const json& j_;
  std::string file_;
};

}  // namespace tq
