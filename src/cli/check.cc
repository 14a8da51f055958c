#include "cli/check.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/client_commands.h"
#include "cli/terminal_text.h"
#include "env/env.h"
#include "store/log/log_check.h"

namespace runnel::cli {

void AddCheckCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "check",
      "Verify an embedded-log data directory offline. Exit codes: 0 intact; 1 damage found; 2 "
      "usage or unreadable; 3 no log in the directory; 6 in use by a running server");
  auto dir = std::make_shared<std::string>();
  auto* positional = cmd->add_option("dir", *dir, "The data directory");
  // The same directory as `--data` of `serve` and `token`, so it may be given that way too.
  cmd->add_option("--data", *dir, "The data directory")->excludes(positional);
  cmd->callback([dir, exit_code] {
    if (dir->empty()) {
      std::fprintf(stderr, "runnel check: give the data directory (DIR or --data DIR)\n");
      *exit_code = kExitUsage;
      return;
    }
    // A directory with no segment and no checkpoint holds no log: nothing was verified, so it
    // does not pass (a mistyped path must not look like a healthy store). Decided before the
    // check takes the directory's lock, so nothing is written there.
    std::error_code ec;
    if (std::filesystem::is_directory(*dir, ec)) {
      bool has_log = false;
      for (const auto& entry : std::filesystem::directory_iterator(*dir, ec)) {
        const std::string name = entry.path().filename().string();
        const bool segment = name.size() == 24 && name.substr(20) == ".log";
        const bool checkpoint = name.rfind("checkpoint-", 0) == 0;
        has_log = has_log || segment || checkpoint;
      }
      if (!ec && !has_log) {
        std::fprintf(stderr,
                     "runnel check: %s holds no runnel log (no segment or checkpoint files)\n",
                     TerminalSafe(*dir).c_str());
        *exit_code = kExitNotFound;
        return;
      }
    }
    auto report = log::CheckLogDirectory(env::Env::Posix(), *dir);
    if (!report.ok()) {
      const StatusCode code = report.status().code();
      if (code == StatusCode::kUnavailable) {
        std::fprintf(stderr,
                     "runnel check: %s is in use: a running server holds its lock (stop it, or "
                     "check a copy)\n",
                     TerminalSafe(*dir).c_str());
        *exit_code = kExitInUse;
        return;
      }
      std::fprintf(stderr, "runnel check: %s\n", TerminalSafe(report.status().ToString()).c_str());
      *exit_code = code == StatusCode::kNotFound ? kExitNotFound : kExitUsage;
      return;
    }
    // Findings may quote stream names, which clients chose.
    std::printf("checking %s\n", TerminalSafe(*dir).c_str());
    for (const auto& line : report->lines) std::printf("  %s\n", TerminalSafe(line).c_str());
    std::printf("%llu segments, %llu frames, %llu records, %llu stream creations\n",
                static_cast<unsigned long long>(report->segments),
                static_cast<unsigned long long>(report->frames),
                static_cast<unsigned long long>(report->records),
                static_cast<unsigned long long>(report->streams_created));
    if (!report->corruption.empty()) {
      for (const auto& c : report->corruption) {
        std::printf("CORRUPTION: %s\n", TerminalSafe(c).c_str());
      }
      if (report->open.ok()) {
        std::printf(
            "result: corrupt (the store still opens, see the recovery lines above; reads of "
            "damaged records fail)\n");
      } else {
        std::printf(
            "result: corrupt (`runnel serve` refuses to open it; `runnel serve --salvage` opens it "
            "without the damaged bytes)\n");
      }
      *exit_code = 1;
      return;
    }
    std::printf("result: ok%s\n", report->torn_tail ? " (torn tail, repaired at next open)" : "");
    *exit_code = 0;
  });
}

}  // namespace runnel::cli
