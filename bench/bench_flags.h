// Small helpers shared by the benchmarks' flag parsing.
#pragma once

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace tq::bench {

/// "1,4,16" -> {1, 4, 16} (atol per item; no validation: benchmarks only).
template <typename T = long>
std::vector<T> ParseList(const std::string& s) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(static_cast<T>(std::atol(item.c_str())));
  return out;
}

}  // namespace tq::bench
