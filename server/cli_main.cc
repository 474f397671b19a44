// The tqserve command line (RunTqserve): shared by server/main.cc and the
// test-only tests/integration/fault_inject_main.cc.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "engine/common/error.h"
#include "server/cli_commands.h"

namespace tq {

int RunTqserve(int argc, char** argv) {
  CLI::App app{"tqserve: an LLM inference server with a 3-bit paged KV cache"};
  app.set_version_flag("--version", "tqserve 0.1.0");
  app.require_subcommand(1);
  // A flag given twice takes the last value, as in vLLM and llama.cpp.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  AddGenerateCommand(app);
  AddMakeRandomModelCommand(app);
  AddEvalCommand(app);
  AddServeCommand(app);
  AddQuantizeCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a usage error exits 2 (as getopt tools do).
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "tqserve: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tqserve: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace tq
