// Statistics and machine facts shared by the benchmarks' reports.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

namespace tq::bench {

/// Sorted v[min(n - 1, p * n)]: the nearest-rank percentile, p in [0, 1].
inline double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

/// Sorted v[n / 2]: the median of an odd count, the upper middle of an even one.
inline double UpperMedian(std::vector<double> v) {
  return Percentile(std::move(v), 0.5);
}

/// The median; of an even count the mean of the two middle values.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double Seconds(std::chrono::steady_clock::time_point a,
                      std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// CPU seconds used by all threads of this process. CPU time / (wall time x
/// threads) below ~0.9 during a measurement means the pool's threads were
/// preempted by other processes (the pool spins, so an undisturbed run is ~1).
inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// The first line of /proc/loadavg.
inline std::string LoadAvg() {
  std::ifstream in("/proc/loadavg");
  std::string s;
  std::getline(in, s);
  return s;
}

/// The first "model name" of /proc/cpuinfo, else "unknown".
inline std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

}  // namespace tq::bench
