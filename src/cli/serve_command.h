// `runnel serve`: flags (each also a RUNNEL_* environment variable) and the server's lifecycle.
#ifndef RUNNEL_CLI_SERVE_COMMAND_H_
#define RUNNEL_CLI_SERVE_COMMAND_H_

#include <CLI/CLI.hpp>

namespace runnel::cli {

// Registers the `serve` subcommand on `app`.
void AddServeCommand(CLI::App& app);

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_SERVE_COMMAND_H_
