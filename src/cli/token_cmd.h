// `runnel token create | ls | revoke`: manage the bearer tokens of a data directory.
#ifndef RUNNEL_CLI_TOKEN_CMD_H_
#define RUNNEL_CLI_TOKEN_CMD_H_

#include <CLI/CLI.hpp>

namespace runnel::cli {

// Adds the `token` subcommand to `app`. Its handlers set `*exit_code`.
void AddTokenCommand(CLI::App& app, int* exit_code);

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_TOKEN_CMD_H_
