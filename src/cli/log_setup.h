// The server's log configuration: --log-level and --log-format apply to every log line
// (base/log.h), including the server's spdlog calls, which are routed there.
#ifndef RUNNEL_CLI_LOG_SETUP_H_
#define RUNNEL_CLI_LOG_SETUP_H_

#include "base/log.h"

namespace runnel::cli {

// Configures base/log.h and makes spdlog's default logger write through it, at the same level.
void SetUpLogging(LogLevel level, LogFormat format);

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_LOG_SETUP_H_
