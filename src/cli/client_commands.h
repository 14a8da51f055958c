// The CLI as a client of `runnel serve`: create, append, read, tail, ls, describe, rm.
//
// Every command takes --url (or RUNNEL_URL; default http://127.0.0.1:4437), --token (or
// RUNNEL_TOKEN; sent as a bearer token), --tenant (or RUNNEL_TENANT; the tenant scope
// /v1/tenants/<tenant>/..., default global) and --json. Exit
// codes (ExitCodeForHttp): 0 success, 1 other failure, 2 usage error, 3 stream not found,
// 4 conflict (exists with another configuration, closed, sequence), 5 server unreachable.
// Human-readable output prints names, header values and messages through TerminalSafe()
// (terminal_text.h); --json prints them exactly, as JSON; `read` and `tail` print the stream's
// data itself, unescaped.
#ifndef RUNNEL_CLI_CLIENT_COMMANDS_H_
#define RUNNEL_CLI_CLIENT_COMMANDS_H_

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace runnel::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotFound = 3;
inline constexpr int kExitConflict = 4;
inline constexpr int kExitUnavailable = 5;

// The one mapping from an HTTP status to a CLI exit code.
int ExitCodeForHttp(int status);

// Registers the client subcommands on `app`.
void AddClientCommands(CLI::App& app);

// The command line as CLI11's parse(std::vector) takes it (last argument first). CLI11 reads an
// argument in brackets given to a list option ("[a,b]") as several values and drops the
// brackets; `append` sends each DATA argument byte for byte, so for `append` every argument that
// CLI11 would split, or that starts with the escape byte, gets one escape byte in front, which
// the command removes again from what it parsed.
std::vector<std::string> ParseableArgs(int argc, char** argv);

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_CLIENT_COMMANDS_H_
