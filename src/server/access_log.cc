#include "server/access_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_map>

namespace runnel::server {

namespace {

// The open scope of each connection served by this thread.
std::unordered_map<const void*, AccessEntry*>& Scopes() {
  thread_local std::unordered_map<const void*, AccessEntry*> scopes;
  return scopes;
}

}  // namespace

Result<std::shared_ptr<AccessLog>> AccessLog::Open(const std::string& path, LogFormat format) {
  if (path == "-") return std::shared_ptr<AccessLog>(new AccessLog(stdout, false, format));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) {
    return Status::IOError("cannot open the access log " + path + ": " + std::strerror(errno));
  }
  std::FILE* file = ::fdopen(fd, "a");
  if (file == nullptr) {
    ::close(fd);
    return Status::IOError("cannot open the access log " + path + ": " + std::strerror(errno));
  }
  return std::shared_ptr<AccessLog>(new AccessLog(file, true, format));
}

AccessLog::~AccessLog() {
  if (owned_) std::fclose(file_);
}

std::string AccessLog::FormatLine(LogFormat format, const AccessEntry& entry,
                                  std::chrono::system_clock::time_point time, uint64_t micros) {
  char duration[32];
  std::snprintf(duration, sizeof(duration), "%llu.%03llu",
                static_cast<unsigned long long>(micros / 1000),
                static_cast<unsigned long long>(micros % 1000));
  std::string line;
  line.reserve(entry.target.size() + 96);
  if (format == LogFormat::kJson) {
    line += "{\"time\":\"" + LogTimestamp(time) + "\",\"method\":\"";
    AppendJsonEscaped(&line, entry.method);
    line += "\",\"target\":\"";
    AppendJsonEscaped(&line, entry.target);
    line += "\",\"protocol\":\"";
    AppendJsonEscaped(&line, entry.protocol);
    line += "\",\"status\":" + std::to_string(entry.status) +
            ",\"bytes\":" + std::to_string(entry.bytes) + ",\"duration_ms\":" + duration + "}\n";
    return line;
  }
  line += LogTimestamp(time) + " ACCESS ";
  AppendLineSafe(&line, entry.method);
  line += ' ';
  AppendLineSafe(&line, entry.target);
  line += ' ';
  AppendLineSafe(&line, entry.protocol);
  line += ' ' + std::to_string(entry.status) + ' ' + std::to_string(entry.bytes) + ' ' + duration +
          "ms\n";
  return line;
}

void AccessLog::Write(const AccessEntry& entry, std::chrono::steady_clock::time_point end) {
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(end - entry.start);
  const std::string line = FormatLine(format_, entry, std::chrono::system_clock::now(),
                                      static_cast<uint64_t>(std::max<int64_t>(0, micros.count())));
  std::lock_guard<std::mutex> lock(mu_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

AccessScope::AccessScope(AccessLog* log, const void* connection, std::string_view method,
                         std::string_view target, std::string_view protocol)
    : log_(log), connection_(connection) {
  if (log_ == nullptr) return;
  entry_ = std::make_unique<AccessEntry>();
  entry_->method = std::string(method);
  entry_->target = std::string(target);
  entry_->protocol = protocol;
  entry_->start = std::chrono::steady_clock::now();
  Scopes()[connection_] = entry_.get();
}

AccessScope::AccessScope(AccessScope&& other) noexcept
    : log_(other.log_), connection_(other.connection_), entry_(std::move(other.entry_)) {
  other.log_ = nullptr;
}

AccessScope& AccessScope::operator=(AccessScope&& other) noexcept {
  if (this != &other) {
    Finish();
    log_ = other.log_;
    connection_ = other.connection_;
    entry_ = std::move(other.entry_);
    other.log_ = nullptr;
  }
  return *this;
}

AccessScope::~AccessScope() {
  Finish();
}

void AccessScope::Finish() {
  if (log_ == nullptr || entry_ == nullptr) return;
  auto& scopes = Scopes();
  auto it = scopes.find(connection_);
  if (it != scopes.end() && it->second == entry_.get()) scopes.erase(it);
  if (entry_->status != 0) log_->Write(*entry_, std::chrono::steady_clock::now());
  entry_.reset();
  log_ = nullptr;
}

void AccessScope::Record(const void* connection, int status, uint64_t bytes) {
  auto& scopes = Scopes();
  auto it = scopes.find(connection);
  if (it == scopes.end()) return;
  if (status != 0) it->second->status = status;
  it->second->bytes += bytes;
}

}  // namespace runnel::server
