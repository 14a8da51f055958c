// `runnel bench append | read | sse`: measure a running server from the command line, with the
// load driver of load_driver.h (the same one bench/http/compare.sh uses).
//
//   append [STREAM]  concurrent appends for a while: appends/s, MB/s, latency percentiles
//   read STREAM      catch-up reads of a whole stream: MB/s
//   sse STREAM       SSE readers at the tail and timed appends: delivery latency
//
// Every subcommand takes --url (RUNNEL_URL; http:// or https://), --cacert (RUNNEL_CACERT; the
// PEM certificates to trust for https instead of the system's, as the other commands take it),
// --token (RUNNEL_TOKEN), --tenant (RUNNEL_TENANT) and --json. Exit codes: 0 when every request
// succeeded, 1 when some failed (the figures are still printed), 2 for bad arguments, 5 when the
// server is unreachable.
#ifndef RUNNEL_CLI_BENCH_CMD_H_
#define RUNNEL_CLI_BENCH_CMD_H_

#include <CLI/CLI.hpp>

namespace runnel::cli {

// Registers `bench` on `app`; the chosen subcommand's exit code goes to *exit_code.
void AddBenchCommand(CLI::App& app, int* exit_code);

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_BENCH_CMD_H_
