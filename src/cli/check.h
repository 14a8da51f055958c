// `runnel check DIR`: offline verification of an embedded-log data directory.
#ifndef RUNNEL_CLI_CHECK_H_
#define RUNNEL_CLI_CHECK_H_

#include <CLI/CLI.hpp>

namespace runnel::cli {

// Adds the `check` subcommand. It prints what it found and sets *exit_code to 0 (healthy, or
// only a torn tail that the next open repairs), 1 (corruption: open refuses without salvage)
// or 2 (the directory could not be read, or is in use).
void AddCheckCommand(CLI::App& app, int* exit_code);

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_CHECK_H_
