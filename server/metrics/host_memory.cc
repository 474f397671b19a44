#include "server/metrics/host_memory.h"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <iterator>
#include <string>

namespace tq {
namespace {

// Skips spaces and tabs, then parses one unsigned decimal; advances `text`.
std::optional<uint64_t> NextNumber(std::string_view& text) {
  size_t start = text.find_first_not_of(" \t");
  if (start == std::string_view::npos) return std::nullopt;
  text.remove_prefix(start);
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc()) return std::nullopt;
  text.remove_prefix(static_cast<size_t>(end - text.data()));
  return value;
}

std::optional<std::string> ReadFile(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return std::nullopt;
  return text;
}

}  // namespace

std::optional<uint64_t> ParseMemTotalBytes(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemTotal:";
  size_t pos = 0;
  // The key must start a line, so that e.g. "HugeMemTotal:" would not match.
  while ((pos = meminfo.find(kKey, pos)) != std::string_view::npos) {
    if (pos == 0 || meminfo[pos - 1] == '\n') break;
    pos += kKey.size();
  }
  if (pos == std::string_view::npos) return std::nullopt;
  std::string_view rest = meminfo.substr(pos + kKey.size());
  std::optional<uint64_t> kib = NextNumber(rest);
  if (!kib) return std::nullopt;
  size_t unit = rest.find_first_not_of(" \t");
  if (unit == std::string_view::npos || rest.substr(unit, 2) != "kB") return std::nullopt;
  return *kib * 1024;
}

std::optional<uint64_t> ParseStatmResidentBytes(std::string_view statm, uint64_t page_size) {
  if (!NextNumber(statm)) return std::nullopt;  // size (VmSize), not used
  std::optional<uint64_t> pages = NextNumber(statm);
  if (!pages) return std::nullopt;
  return *pages * page_size;
}

std::optional<uint64_t> HostMemTotalBytes() {
  std::optional<std::string> text = ReadFile("/proc/meminfo");
  return text ? ParseMemTotalBytes(*text) : std::nullopt;
}

std::optional<uint64_t> ProcessResidentBytes() {
  long page_size = sysconf(_SC_PAGESIZE);
  std::optional<std::string> text = ReadFile("/proc/self/statm");
  if (!text || page_size <= 0) return std::nullopt;
  return ParseStatmResidentBytes(*text, static_cast<uint64_t>(page_size));
}

}  // namespace tq
