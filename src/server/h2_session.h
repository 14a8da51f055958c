// H2Session: the server side of one HTTP/2 connection (RFC 9113) on Debian's libnghttp2, with
// no I/O of its own: the caller feeds it the bytes it reads (Receive), writes out what it
// collects (Collect), and answers each request it reports (on_request) on that request's
// stream. http_h2.cc runs it on a connection's io thread and hands each request to the same
// request handling as HTTP/1.1.
//
// Limits: at most H2Limits::max_concurrent_streams requests open at a time (SETTINGS, enforced
// by nghttp2 with RST_STREAM REFUSED_STREAM); a request whose header fields (name and value
// bytes plus 32 per field, as RFC 9113 6.5.2 counts them) pass max_header_bytes is reported
// refused with 431, one whose :path passes max_url_bytes with 414, one whose body passes
// max_body_bytes with 413 (its further DATA is dropped, still acknowledged for flow control),
// one whose DATA would take the bodies being received on the connection past
// max_connection_body_bytes with 503.
// What a response has not sent yet waits in its stream's queue; the peer's flow-control
// windows decide when it leaves (Queued tells how much waits, so a live response can hold back).
//
// Thread-safety: none; one thread (the connection's) uses a session.
#ifndef RUNNEL_SERVER_H2_SESSION_H_
#define RUNNEL_SERVER_H2_SESSION_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http_types.h"

struct nghttp2_session;

namespace runnel::server {

struct H2Limits {
  size_t max_concurrent_streams = 100;
  size_t max_header_bytes = 16u << 10;
  size_t max_url_bytes = 8u << 10;
  size_t max_body_bytes = 64u << 20;
  // Request bodies being received on one connection, together: a DATA frame that would pass it
  // refuses its request with 503 (so a connection holds no more request bytes than one
  // HTTP/1.1 connection may, however many streams it opens).
  size_t max_connection_body_bytes = 64u << 20;
};

// A request as it arrived on a stream: method, raw target (:path), authority, header fields
// (names lower-case, repeated ones joined with ", ") and body; or, when it passed a limit, the
// status to refuse it with.
struct H2Request {
  int32_t stream_id = 0;
  std::string method;
  std::string target;
  std::string authority;
  std::map<std::string, std::string, std::less<>> headers;
  std::string body;
  int refuse_status = 0;  // 0, or 413, 414, 431, 503
  std::string refuse_message;
};

class H2Session {
 public:
  struct Callbacks {
    // A whole request (END_STREAM seen), or one refused for a limit.
    std::function<void(H2Request)> on_request;
    // A stream closed: its response finished, or the peer reset it (RST_STREAM), or the
    // connection went away. Runs for every stream on_request reported.
    std::function<void(int32_t stream_id)> on_stream_closed;
  };

  // Queues the server's SETTINGS. Throws std::bad_alloc only.
  H2Session(const H2Limits& limits, Callbacks callbacks);
  ~H2Session();
  H2Session(const H2Session&) = delete;
  H2Session& operator=(const H2Session&) = delete;

  // Takes over an HTTP/1.1 request that asked for `Upgrade: h2c` (RFC 7540 3.2) as stream 1,
  // half closed: `settings` is its decoded HTTP2-Settings payload. The request itself is not
  // reported (the caller has it); its answer goes to stream 1 with Respond. False when the
  // settings are malformed.
  bool Upgrade(std::string_view settings, bool head_request);
  // Feeds bytes read from the connection (the client preface first). False on a protocol
  // error: the GOAWAY nghttp2 queued should still be collected and written, then the
  // connection closed.
  bool Receive(std::string_view bytes);
  // Appends what is ready to go out to `out` (frames, and DATA the windows allow).
  void Collect(std::string* out);
  // False once the session has nothing more to read or write (GOAWAY exchanged, or an error).
  bool Alive() const;

  // Answers a stream with a status, header fields (any case; connection-specific ones are
  // dropped) and, unless `streaming`, a whole body: a streaming response stays open for Append
  // and End. False when the stream is gone (reset, closed).
  bool Respond(int32_t stream_id, int status,
               const std::vector<std::pair<std::string, std::string>>& headers, std::string body,
               bool streaming);
  // More body for a streaming response; false when the stream is gone.
  bool Append(int32_t stream_id, std::string_view data);
  // Ends a streaming response once its queue has gone out.
  void End(int32_t stream_id);
  // Resets a stream (RST_STREAM with `error_code`, 0 = NO_ERROR).
  void Reset(int32_t stream_id, uint32_t error_code);
  // Bytes of a response waiting in its queue (for the peer's window); 0 for a gone stream.
  size_t Queued(int32_t stream_id) const;
  // Bytes of every open stream's response waiting in its queue.
  size_t QueuedTotal() const { return queued_; }
  // Whether the stream is open (not closed nor reset).
  bool Open(int32_t stream_id) const;
  // Starts a graceful shutdown: GOAWAY, no new streams; open ones finish.
  void Shutdown();
  // Whether a request began (its HEADERS arrived) longer than `limit` before `now` and has not
  // arrived whole yet: a client that sends its request too slowly.
  bool RequestOverdue(std::chrono::steady_clock::duration limit,
                      std::chrono::steady_clock::time_point now) const;
  // Streams open now.
  size_t OpenStreams() const { return streams_.size(); }

 private:
  struct Stream;
  static H2Session* Of(void* user_data) { return static_cast<H2Session*>(user_data); }
  Stream* Find(int32_t id) const;

  H2Limits limits_;
  Callbacks callbacks_;
  nghttp2_session* session_ = nullptr;
  std::map<int32_t, std::unique_ptr<Stream>> streams_;
  size_t queued_ = 0;     // the sum of Queued over streams_
  size_t receiving_ = 0;  // the request bodies of streams_ not reported yet
  bool failed_ = false;

  friend struct H2Glue;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_H2_SESSION_H_
