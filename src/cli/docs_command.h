// Shell completions and the man page, generated from the command tree the CLI declares with
// CLI11: every visible subcommand, option, flag and positional argument, with its description,
// default and environment variable. Nothing is listed twice, so the completions and the man page
// cannot drift from the parsers.
//
// Hidden subcommands print them: `runnel completion bash`, `runnel completion zsh` and
// `runnel manpage`. The build runs them to write runnel.bash, _runnel and runnel.1, which
// `cmake --install` installs.
#ifndef RUNNEL_CLI_DOCS_COMMAND_H_
#define RUNNEL_CLI_DOCS_COMMAND_H_

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>

namespace runnel::cli {

// A bash completion script (complete -F) for every visible command path of `app`.
std::string BashCompletion(const CLI::App& app);

// A zsh completion function (#compdef runnel) with each command's and option's description.
std::string ZshCompletion(const CLI::App& app);

// runnel.1 in man(7) roff: synopsis, global options, one section per command with its options
// and arguments, exit status and environment.
std::string ManPage(const CLI::App& app, std::string_view version);

// Registers the hidden `completion` and `manpage` subcommands on `app`; they describe `app` as
// it stands when they run, so call this after every other command was added.
void AddDocsCommands(CLI::App& app);

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_DOCS_COMMAND_H_
