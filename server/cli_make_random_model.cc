#include <CLI/CLI.hpp>

#include "engine/common/error.h"
#include "server/cli_commands.h"

namespace tq {

// Placeholder until the random model writer lands (owned by the model-loading work).
void AddMakeRandomModelCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("make-random-model", "Write a random-weight HF checkpoint");
  cmd->callback([] { throw Error("make-random-model: not built yet"); });
}

}  // namespace tq
