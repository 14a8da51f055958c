// The CLI as a client of `runnel serve`: create, append, read, tail, ls, describe, close,
// retention, rm.
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

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/http_client.h"
#include "runnel/status.h"

namespace runnel::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotFound = 3;
inline constexpr int kExitConflict = 4;
inline constexpr int kExitUnavailable = 5;
// `runnel check`: the directory is held by a running server (its lock is taken).
inline constexpr int kExitInUse = 6;

// The one offset syntax of every command that takes an offset: a record number N in decimal
// digits, or an offset token as the server gives them ("0000000000000000_0000000000000042").
// Both name the same place: the position after record N, where a read of the records after
// it starts and up to which a group acknowledges. Returns that position.
Result<uint64_t> OffsetPositionArg(std::string_view text);

// An offset for a read's `offset=` query: "-1" and "now" as they are, else the token of
// OffsetPositionArg's position.
Result<std::string> OffsetQueryArg(std::string_view text);

// Prints a request that got no answer (or could not be sent) and returns its exit code.
int ReportClientFailure(const Status& status);

// The one wording of a failed answer about the `kind` ("stream", "channel") named `name`: a 404
// is "<kind> '<name>' does not exist" and a 401 asks for a token, whichever command met them;
// otherwise the server's message.
std::string HttpFailureMessage(const std::string& kind, const std::string& name,
                               const ClientResponse& r);

// Prints a failed answer ("runnel: WHAT failed: HTTP N: message" on stderr, or with --json
// {"ok":false,"status":N,"error":"..."} plus `extra` on stdout) and returns its exit code.
int ReportHttpFailure(const std::string& what, const std::string& kind, const std::string& name,
                      const ClientResponse& r, bool json_output,
                      const nlohmann::json& extra = nlohmann::json::object());

// The one mapping from an HTTP status to a CLI exit code.
int ExitCodeForHttp(int status);

// Registers the client subcommands on `app`.
void AddClientCommands(CLI::App& app);

// The command line as CLI11's parse(std::vector) takes it (last argument first).
//
// Global options (kGlobalOptions) may come before the command as well as after it: those given
// before the (sub)command's name are moved to just after it, so `runnel --json describe s` is
// parsed as `runnel describe --json s`, and `runnel --data D token create` as
// `runnel token create --data D`.
//
// CLI11 reads an argument in brackets given to a list option ("[a,b]") as several values and
// drops the brackets; `append` sends each DATA argument byte for byte, so for `append` every
// argument that CLI11 would split, or that starts with the escape byte, gets one escape byte in
// front, which the command removes again from what it parsed.
std::vector<std::string> ParseableArgs(CLI::App& app, int argc, char** argv);

// The options every command that has them accepts before or after its name; each but --json
// takes a value.
inline constexpr const char* kGlobalOptions[] = {"--url",  "--token",  "--tenant",
                                                 "--data", "--cacert", "--json"};

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_CLIENT_COMMANDS_H_
