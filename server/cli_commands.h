// Subcommands of the tqserve binary. Each Add* registers one CLI11 subcommand
// whose callback runs it; errors surface as tq::Error, printed by main().
#pragma once

namespace CLI {
class App;
}

namespace tq {

/// `tqserve generate --model DIR --prompt TEXT [sampling flags]`: prints the
/// prompt's continuation to stdout as it is generated.
void AddGenerateCommand(CLI::App& app);

/// `tqserve make-random-model --out DIR --preset NAME | --hidden-size ...`:
/// writes a random-weight HF checkpoint (engine/model/random_model.h).
void AddMakeRandomModelCommand(CLI::App& app);

}  // namespace tq
