// The engine of `runnel bench`: an HTTP/1.1 load driver over non-blocking sockets and epoll,
// with OpenSSL on top for https:// (the server's certificate verified as the other CLI commands
// verify it: against the system's trust store, or a given PEM file), cheap enough per request
// that the figures describe the server, not the driver. It speaks only the
// public Durable Streams protocol, so it drives any conforming server (runnel, the Node
// reference server) the same way; bench/http/compare.sh uses it for the catch-up and SSE cells.
//
// Every run is bounded: in time (appends), in rounds (catch-up), in readers, appends and
// waiting time (fan-out). Errors are Status values: kInvalidArgument for a bad URL or load,
// kUnavailable when the server cannot be reached (or its certificate is not trusted), kNotFound for
// a stream to read that does not exist, kInternal for an answer the driver cannot parse or did not
// expect.
//
// Thread-safety: each Run* call is independent; it starts and joins its own threads.
#ifndef RUNNEL_CLI_LOAD_DRIVER_H_
#define RUNNEL_CLI_LOAD_DRIVER_H_

#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runnel/status.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace runnel::cli::load {

// Where to send requests: a resolved http:// or https:// URL (a name, an IPv4 or a bracketed
// IPv6 literal). For https, `tls` is the client context every connection shares (TLS 1.2 or
// later, the server's certificate verified for `host`).
struct Endpoint {
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  std::string host_header;
  std::string host;                 // without port or brackets: what the certificate must name
  std::shared_ptr<ssl_ctx_st> tls;  // null for http://
};
// `cacert` (https only): a PEM file of the certificates to trust instead of the system's.
Result<Endpoint> ResolveUrl(std::string_view url, const std::string& cacert = "");

// Upper bounds on a run, stated once.
inline constexpr int kMaxConnections = 10000;
inline constexpr int kMaxThreads = 64;
inline constexpr double kMaxSeconds = 3600;
inline constexpr size_t kMaxBodyBytes = 16u << 20;

// Appends over a fixed number of connections, to `targets` spread round robin over them, until
// `seconds` pass; then the requests in flight are awaited (at most 10 s more), so every append
// the server acknowledged is counted. Without a rate each connection keeps one POST in flight
// (closed loop: the server's pace sets the load). With `rate`, appends are due on a fixed
// schedule of that many per second over all connections (open loop), and each latency runs
// from when its append was due, so a server that falls behind is charged for the queueing it
// causes; a connection still sends one append at a time, and when time runs out, the appends
// still due are counted as unsent (the server fell behind the schedule).
struct AppendLoad {
  std::vector<std::string> targets;  // request targets ("/v1/stream/x")
  std::string content_type;
  std::string body;
  std::string token;  // sent as a bearer token when not empty
  int connections = 16;
  int threads = 2;
  double seconds = 10;
  double rate = 0;  // appends per second over all connections; 0: closed loop
  // Called about once a second while the load runs, with the seconds since the start and the
  // appends acknowledged so far (for a progress line); may be empty.
  std::function<void(double seconds, uint64_t acknowledged)> progress;
};
struct AppendFigures {
  uint64_t acknowledged = 0;  // 2xx answers
  uint64_t failed = 0;        // other answers and broken connections
  uint64_t unsent = 0;        // with a rate: appends due before the deadline but not sent by then
  std::map<int, uint64_t> statuses;  // non-2xx answers by status (0: connection failed)
  double seconds = 0;                // from the first request to the last answer
  std::vector<uint32_t> latency_us;  // of acknowledged appends, sorted
};
Result<AppendFigures> RunAppends(const Endpoint& endpoint, const AppendLoad& load);

// Reads the whole stream at `target` from offset -1, following Stream-Next-Offset until
// Stream-Up-To-Date, `rounds` times after one warm-up round, over one keep-alive connection.
struct CatchupFigures {
  uint64_t bytes = 0;  // body bytes of the measured rounds
  double seconds = 0;
};
Result<CatchupFigures> RunCatchup(const Endpoint& endpoint, const std::string& target,
                                  const std::string& token, int rounds);

// Opens `readers` SSE readers at the tail of the stream at `target` (created as text/plain
// when missing) over `threads` epoll threads, appends `appends` messages "t=<microseconds since
// the epoch>" 100 ms apart, and measures when each reader sees each one. With `server_pid`, also
// the server's RSS and CPU time from /proc.
struct FanoutLoad {
  std::string target;
  std::string token;
  int readers = 1000;
  int appends = 50;
  int threads = 2;
  long server_pid = 0;
};
struct FanoutFigures {
  int readers = 0;
  uint64_t failed = 0;             // readers that could not connect or were cut off
  int complete = 0;                // readers that saw every append
  uint64_t delivered = 0;          // (reader, append) deliveries seen
  uint64_t expected = 0;           // (readers - failed) * appends
  double open_s = 0;               // time to open the readers
  std::vector<double> latency_ms;  // sorted
  // With server_pid (else -1): RSS before the readers, with them idle, after the appends; the
  // CPU time per append of the server and of this process.
  double rss_before_mb = -1, rss_idle_mb = -1, rss_mb = -1;
  double server_cpu_ms_per_append = -1, load_cpu_ms_per_append = -1;
};
Result<FanoutFigures> RunFanout(const Endpoint& endpoint, const FanoutLoad& load);

// A soak: `readers` SSE readers of the JSON stream at `target` (created when missing) follow it
// from its tail, reconnecting from their last offset whenever the server ends a response, while
// `writers` connections append {"t":0} at `rate` appends per second in all, for `seconds`. With
// `server_pid`, the server's RSS is sampled every second: at the end of the first
// `warmup_seconds` are not counted, and growth compares the mean of the first window after them
// with the mean of the last window. At the end every reader should have seen
// every acknowledged append exactly once (waited for at most 30 s).
struct SoakLoad {
  std::string target;
  std::string token;
  int readers = 10000;
  int writers = 64;
  double rate = 10;
  double seconds = 600;
  double warmup_seconds = 60;
  int threads = 2;
  long server_pid = 0;
  // Called about once a second with the seconds since the start and the server's RSS (MB).
  std::function<void(double seconds, double rss_mb)> progress;
};
struct SoakFigures {
  int readers = 0;
  uint64_t failed = 0;           // readers cut off for good (not reconnections)
  int complete = 0;              // readers that saw exactly every acknowledged append
  int extra = 0;                 // readers that saw more (a duplicate delivery)
  uint64_t reconnects = 0;       // responses the server ended that readers resumed
  uint64_t appended = 0;         // acknowledged appends
  uint64_t append_failures = 0;  // appends answered with an error or lost with a connection
  uint64_t delivered = 0;        // (reader, message) deliveries
  double seconds = 0;
  // With server_pid (else -1): the mean RSS over the first window after the warm-up and over the
  // last window of the run (each a tenth of the measured time, at least 10 s), the highest RSS
  // after the warm-up, the RSS once the readers caught up; the server's CPU time per append.
  double rss_warm_mb = -1, rss_last_mb = -1, rss_max_mb = -1, rss_end_mb = -1;
  double server_cpu_ms_per_append = -1;
};
Result<SoakFigures> RunSoak(const Endpoint& endpoint, const SoakLoad& load);

// The p-quantile (0..1) of sorted values; 0 when empty.
template <typename T>
double Quantile(const std::vector<T>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto i = static_cast<size_t>(p * static_cast<double>(sorted.size()));
  return static_cast<double>(sorted[std::min(sorted.size() - 1, i)]);
}

}  // namespace runnel::cli::load

#endif  // RUNNEL_CLI_LOAD_DRIVER_H_
