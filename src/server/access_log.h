// The access log (`runnel serve --access-log PATH|-`): one line per answered request, with its
// method, target (as sent, still percent-encoded), protocol ("HTTP/1.1" or "HTTP/2"), status,
// body bytes sent and duration, in the log's format (base/log.h):
//
//   2026-12-05T23:06:01.123Z ACCESS GET /v1/stream/orders?offset=-1 HTTP/1.1 200 1532 0.412ms
//   {"time":"...","method":"GET","target":"/v1/stream/orders?offset=-1","protocol":"HTTP/1.1",
//    "status":200,"bytes":1532,"duration_ms":0.412}
//
// The server opens an AccessScope per request; the writes of that request record their status
// and bytes into it through its connection (Record), and the line is written when the scope
// ends: after the response was written, or for SSE when the response ends. A request answered
// before its head could be parsed (400, 413, 414, 431 on a malformed head) has no line.
//
// Thread-safety: AccessLog::Write may be called from any thread. AccessScope and Record belong
// to the io thread that serves the connection (each connection lives on one io thread).
#ifndef RUNNEL_SERVER_ACCESS_LOG_H_
#define RUNNEL_SERVER_ACCESS_LOG_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "base/log.h"
#include "runnel/status.h"

namespace runnel::server {

struct AccessEntry {
  std::string method;
  std::string target;
  int status = 0;      // 0: no response written (no line)
  uint64_t bytes = 0;  // body bytes sent
  std::chrono::steady_clock::time_point start;
  std::string_view protocol = "HTTP/1.1";  // a literal: "HTTP/1.1" or "HTTP/2"
};

class AccessLog {
 public:
  // "-" is standard output; any other path is opened for appending (created 0640 if missing).
  static Result<std::shared_ptr<AccessLog>> Open(const std::string& path, LogFormat format);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // Writes the entry's line (flushed, so `tail -f` sees it at once).
  void Write(const AccessEntry& entry, std::chrono::steady_clock::time_point end);

  static std::string FormatLine(LogFormat format, const AccessEntry& entry,
                                std::chrono::system_clock::time_point time, uint64_t micros);

 private:
  AccessLog(std::FILE* file, bool owned, LogFormat format)
      : file_(file), owned_(owned), format_(format) {}
  std::mutex mu_;
  std::FILE* file_;
  bool owned_;
  LogFormat format_;
};

// One request's line, written when the scope ends (when a response was recorded). Movable, so a
// request that turns into an SSE response hands its scope to the code that serves it.
class AccessScope {
 public:
  AccessScope() = default;
  // Registers `connection` (any address unique to the connection while it lives; on HTTP/2,
  // to the stream) for Record. A null `log` makes an inert scope. `protocol` must be a literal.
  AccessScope(AccessLog* log, const void* connection, std::string_view method,
              std::string_view target, std::string_view protocol = "HTTP/1.1");
  AccessScope(AccessScope&& other) noexcept;
  AccessScope& operator=(AccessScope&& other) noexcept;
  ~AccessScope();

  // Adds a written response's status and body bytes to the scope registered for `connection`
  // on this thread, if any; status 0 adds bytes only (the later chunks of a streamed body).
  static void Record(const void* connection, int status, uint64_t bytes);

 private:
  void Finish();
  AccessLog* log_ = nullptr;
  const void* connection_ = nullptr;
  std::unique_ptr<AccessEntry> entry_;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_ACCESS_LOG_H_
