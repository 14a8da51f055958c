// `runnel group ls | lag | ack | next | prune`: consumer groups of a stream on `runnel serve`
// (the server's /v1/groups/... endpoints, see src/server/group_service.h).
//
// Every subcommand takes --url (RUNNEL_URL), --token (RUNNEL_TOKEN), --tenant (RUNNEL_TENANT;
// addresses /v1/tenants/<tenant>/stream/<name> instead of the global /v1/stream/<name>) and
// --json. Exit codes follow ExitCodeForHttp (client_commands.h).
#ifndef RUNNEL_CLI_GROUP_CMD_H_
#define RUNNEL_CLI_GROUP_CMD_H_

#include <CLI/CLI.hpp>

namespace runnel::cli {

// Registers `group` on `app`; the chosen subcommand's exit code goes to *exit_code.
void AddGroupCommand(CLI::App& app, int* exit_code);

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_GROUP_CMD_H_
