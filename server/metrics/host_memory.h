// Host memory of the machine and of this process, read from Linux procfs for
// the CPU device's memory gauges (docs/metrics.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tq {

/// The `MemTotal:` line of /proc/meminfo text ("MemTotal:  16384 kB") in
/// bytes (the kernel's "kB" is KiB, so 16384 kB -> 16777216). nullopt when
/// the line is missing or malformed. Source: proc(5), /proc/meminfo.
std::optional<uint64_t> ParseMemTotalBytes(std::string_view meminfo);

/// The resident set size from /proc/<pid>/statm text ("size resident shared
/// text lib data dt", all in pages): field 2 × `page_size` bytes. nullopt when
/// malformed. Source: proc(5), /proc/pid/statm.
std::optional<uint64_t> ParseStatmResidentBytes(std::string_view statm, uint64_t page_size);

/// Usable RAM of the machine (MemTotal of /proc/meminfo) in bytes; nullopt
/// when procfs cannot be read. Thread-safe (reads the file each call).
std::optional<uint64_t> HostMemTotalBytes();

/// This process's resident set size (/proc/self/statm × the page size) in
/// bytes; nullopt when procfs cannot be read. Thread-safe.
std::optional<uint64_t> ProcessResidentBytes();

}  // namespace tq
