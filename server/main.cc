// tqserve: entry point. Parses the command line and runs one subcommand.
#include "server/cli_commands.h"

int main(int argc, char** argv) {
  return tq::RunTqserve(argc, argv);
}
