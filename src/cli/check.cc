#include "cli/check.h"

#include <cstdio>
#include <memory>
#include <string>

#include "cli/terminal_text.h"
#include "env/env.h"
#include "store/log/log_check.h"

namespace runnel::cli {

void AddCheckCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("check", "Verify an embedded-log data directory offline");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("dir", *dir, "The data directory")->required();
  cmd->callback([dir, exit_code] {
    auto report = log::CheckLogDirectory(env::Env::Posix(), *dir);
    if (!report.ok()) {
      std::fprintf(stderr, "runnel check: %s\n", TerminalSafe(report.status().ToString()).c_str());
      *exit_code = 2;
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
