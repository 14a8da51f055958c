// `runnel channel create | publish | read | resolve`: partitioned channels through the server.
#ifndef RUNNEL_CLI_CHANNEL_CMD_H_
#define RUNNEL_CLI_CHANNEL_CMD_H_

#include <CLI/CLI.hpp>

namespace runnel::cli {

// Registers the `channel` subcommand on `app`. Handlers exit with ExitCodeForHttp's codes.
void AddChannelCommand(CLI::App& app);

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_CHANNEL_CMD_H_
