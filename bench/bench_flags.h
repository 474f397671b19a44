// Flag parsing shared by the benchmarks: CLI11, as tqserve's own CLI.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/kv_layout.h"

namespace tq::bench {

/// A comma-separated list flag ("--rows 1,16,128"); its default shows in --help.
template <typename T>
CLI::Option* AddList(CLI::App& app, const std::string& name, std::vector<T>& out,
                     const std::string& help) {
  return app.add_option(name, out, help)->delimiter(',')->capture_default_str();
}

/// Reads a KV dtype name (kernels::ParseKvDtype) into a kernels::KvDtype
/// option or list: `->transform(KvDtypeName())`.
inline CLI::Validator KvDtypeName() {
  return CLI::Validator(
      [](std::string& name) {
        kernels::KvDtype d;
        if (!kernels::ParseKvDtype(name, &d)) return "unknown KV dtype " + name;
        name = std::to_string(static_cast<int>(d));
        return std::string();
      },
      "KV_DTYPE");
}

/// app.parse, exiting as CLI11_PARSE does: 0 after --help, non-zero with the
/// error on a bad command line.
inline void ParseOrExit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
}

}  // namespace tq::bench
