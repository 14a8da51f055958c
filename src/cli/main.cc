// The runnel binary: server and command-line client.
#include <CLI/CLI.hpp>
#include <cstdio>

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
      "Client exit codes: 0 ok; 1 failure (also a missing token, HTTP 401); 2 usage, or a request "
      "the server refused as malformed or too large (400, 413, 414, 431); 3 not found (404, 410); "
      "4 conflict or forbidden (409, 403); 5 server unreachable, unavailable (503) or silent for "
      "RUNNEL_CLIENT_TIMEOUT_MS (default 120000).");
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
    app.parse(runnel::cli::ParseableArgs(argc, argv));
  } catch (const CLI::ParseError& e) {
    // CLI11 reports a usage error by throwing; app.exit prints it (or the help, which is a
    // success). Every usage error exits 2, the documented code, not CLI11's own numbers.
    return app.exit(e) == 0 ? 0 : runnel::cli::kExitUsage;
  }
  return exit_code;
}
