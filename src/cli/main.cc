// The runnel binary: server and command-line client.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/bench_cmd.h"
#include "cli/channel_cmd.h"
#include "cli/check.h"
#include "cli/client_commands.h"
#include "cli/docs_command.h"
#include "cli/group_cmd.h"
#include "cli/serve_command.h"
#include "cli/token_cmd.h"
#include "runnel/registry.h"

int main(int argc, char** argv) {
  CLI::App app{"runnel: a durable event-stream engine"};
  app.require_subcommand(1);
  app.footer(
      "Global options --url, --token, --tenant, --cacert, --json and --data go before or after "
      "the command (`runnel --json describe s` is `runnel describe s --json`).\n"
      "Offsets: every command that takes one accepts a record number N (the place after record "
      "N) or the offset token the server gives for it (0000000000000000_000000000000000N).\n"
      "Exit codes: 0 ok; 1 failure (also a missing token, HTTP 401; `check`: damage found); 2 "
      "usage, or a request the server refused as malformed or too large (400, 413, 414, 431); 3 "
      "not found (404, 410; `check`: no log in the directory); 4 conflict or forbidden (409, "
      "403); 5 server unreachable, unavailable (503) or silent for RUNNEL_CLIENT_TIMEOUT_MS "
      "(default 120000); 6 `check`: the directory is in use by a running server.");
  app.set_version_flag("--version", std::string("runnel ") + RUNNEL_VERSION,
                       "Print the version and exit");
  int exit_code = 0;
  auto* version = app.add_subcommand("version", "Print the version and exit");
  version->callback([] { std::printf("runnel %s\n", RUNNEL_VERSION); });
  runnel::cli::AddServeCommand(app);
  runnel::cli::AddClientCommands(app);
  runnel::cli::AddChannelCommand(app);
  runnel::cli::AddTokenCommand(app, &exit_code);
  runnel::cli::AddCheckCommand(app, &exit_code);
  runnel::cli::AddGroupCommand(app, &exit_code);
  runnel::cli::AddBenchCommand(app, &exit_code);
  // Last: the completions and the man page describe every command added before.
  runnel::cli::AddDocsCommands(app);
  try {
    app.name(argc > 0 ? argv[0] : "runnel");
    app.parse(runnel::cli::ParseableArgs(app, argc, argv));
  } catch (const CLI::ParseError& e) {
    // CLI11 reports a usage error by throwing; app.exit prints it (or the help, which is a
    // success). Every usage error exits 2, the documented code, not CLI11's own numbers.
    return app.exit(e) == 0 ? 0 : runnel::cli::kExitUsage;
  }
  return exit_code;
}
