#include <CLI/CLI.hpp>

#include "engine/common/error.h"
#include "server/cli_commands.h"

namespace tq {

// Placeholder until the generator lands.
void AddGenerateCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt");
  cmd->callback([] { throw Error("generate: not built yet"); });
}

}  // namespace tq
