// Subcommands of the tqserve binary. Each Add* registers one CLI11 subcommand
// whose callback runs it; errors surface as tq::Error, printed by main().
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace tq {

class Generator;

/// One line on the KV cache a Generator built: format, bits per element,
/// blocks, capacity in tokens, bytes, and how tq keys were calibrated.
std::string DescribeKvCache(const Generator& generator);

/// `tqserve generate --model DIR --prompt TEXT [sampling flags]`: prints the
/// prompt's continuation to stdout as it is generated.
void AddGenerateCommand(CLI::App& app);

/// `tqserve make-random-model --out DIR --preset NAME | --hidden-size ...`:
/// writes a random-weight HF checkpoint (engine/model/random_model.h).
void AddMakeRandomModelCommand(CLI::App& app);

/// `tqserve eval --model DIR --text FILE [--ctx N --stride S]`: perplexity.
void AddEvalCommand(CLI::App& app);

}  // namespace tq
