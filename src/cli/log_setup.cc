#include "cli/log_setup.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <string_view>

namespace runnel::cli {

namespace {

LogLevel FromSpdlog(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug: return LogLevel::kDebug;
    case spdlog::level::info: return LogLevel::kInfo;
    case spdlog::level::warn: return LogLevel::kWarn;
    default: return LogLevel::kError;
  }
}

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kDebug: return spdlog::level::debug;
  }
  return spdlog::level::info;
}

// Hands each spdlog message to base/log.h, which formats, filters and writes it (and locks).
class RunnelLogSink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    Log(FromSpdlog(msg.level), std::string_view(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}
};

}  // namespace

void SetUpLogging(LogLevel level, LogFormat format) {
  ConfigureLog(level, format);
  auto logger = std::make_shared<spdlog::logger>("runnel", std::make_shared<RunnelLogSink>());
  logger->set_level(ToSpdlog(level));
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace runnel::cli
