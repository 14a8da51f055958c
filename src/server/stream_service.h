// StreamService: the Durable Streams protocol (PROTOCOL.md) over a StreamRegistry, independent
// of any HTTP library. The Beast adapter parses requests into HttpRequest values, calls the
// methods here and writes the HttpResponse values back; live reads (long-poll, SSE) are driven
// by the adapter with BeginRead / ReadChunk / Watch.
//
// Mapping onto the registry:
// - a protocol stream is a registry stream in the route's scope; each POST body (or each
//   message of a JSON-mode body) is one record, so a stream position (see offset_token.h) is a
//   record count;
// - protocol metadata (TTL, Expires-At, last Stream-Seq, fork origin, fork reference count,
//   soft deletion) lives in the stream's opaque attributes as JSON (core/protocol/meta.h); the
//   per-stream rules (expiry, Stream-Seq, producers, conditional appends, JSON mode) and the
//   catalog writes of DELETE and PATCH are core's (core/protocol/rules.h, catalog.h): this
//   service maps headers to those calls and their answers to responses;
// - idempotent producer state is the store's ProducerState, committed atomically with the
//   records through AppendOptions::producer; the last Stream-Seq is committed with the records
//   too, as new attributes in the same store write (AppendOptions::attributes);
// - forks copy the inherited records into the new stream at the same offsets.
//
// Every append is decided by the store inside its atomic step (the protocol's rules travel with
// the write as its AppendGuard). Writes to one stream whose answers depend on their order (PUT,
// DELETE, and POSTs with Stream-Seq, Stream-Closed or producer headers) are serialised in a
// per-stream lane, so they reach the store in the order they arrived (PROTOCOL.md 5.2.1
// "Concurrency Requirements"). Plain appends skip the lane (a close that lands first makes them
// fail with 409 + Stream-Closed).
//
// Writes are coroutines (Boost.Asio C++20 coroutines, server/await_call.h): HandleWrite's
// awaitable resumes its awaiting coroutine on that coroutine's executor with the response; the
// store's append is awaited there, and blocking store and catalog calls on the blocking pool
// (StreamServiceOptions::blocking_executor).
//
// Thread-safety: every method may be called from any thread concurrently; the awaitables of
// concurrent writes may run on different executors.
#ifndef RUNNEL_SERVER_STREAM_SERVICE_H_
#define RUNNEL_SERVER_STREAM_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "base/mutex.h"
#include "core/protocol/catalog.h"
#include "core/protocol/meta.h"
#include "core/state_compaction.h"
#include "runnel/registry.h"
#include "server/await_call.h"
#include "server/content_coding.h"
#include "server/http_types.h"
#include "server/keyed_lanes.h"
#include "server/metrics.h"
#include "server/offset_token.h"

namespace runnel::server {

struct StreamServiceOptions {
  // How long a long-poll waits before answering 204.
  uint64_t long_poll_timeout_ms = 20000;
  // A stream with a sliding TTL expires once it has been idle for TTL seconds plus this grace.
  // Whole-second TTLs renewed "just in time" by a client would otherwise race with request
  // scheduling delays; the grace makes the guarantee "alive for at least TTL seconds after the
  // last access, gone within TTL + grace". On a store shared with other nodes
  // (Store::SharedWithOtherNodes) each node records an access in the stream's metadata at most
  // once per TTL/4 (`touched_ms`, written on blocking_executor), and a stream expires once no
  // node recorded or saw an access for TTL + TTL/4 + grace: alive for at least TTL after the last
  // access through any node, gone within 1.25 TTL + grace.
  uint64_t ttl_grace_ms = 1000;
  // The most body bytes one catch-up response carries (at least one record is always sent).
  size_t max_read_bytes = 1u << 20;
  // The most records one catch-up response carries. Small JSON messages would otherwise cost a
  // round trip per thousand; max_read_bytes still bounds the response.
  size_t max_read_records = 65536;
  // The blocking pool: catalog writes (create, retention change, delete), which wait for their
  // commit to be durable, compactions, and the store calls of appends when
  // offload_store_calls is set run there, awaited by the writing coroutine
  // (server/await_call.h's OnPool). Handing them to a pool of threads keeps io threads free and
  // lets concurrent creates share one group commit. Null runs them inline (tests).
  BlockingExecutor blocking_executor;
  // Run appends that must look the stream up in the store (and the work after a store answer
  // that calls the store) on blocking_executor instead of the calling coroutine's thread: set
  // by a server whose store's calls may block (Store::CallsMayBlock), so no event-loop thread
  // waits on a database.
  bool offload_store_calls = false;
  // The most streams the catalog's append cache remembers (protocol::CatalogOptions::
  // append_cache_streams); 0 turns the cache off.
  size_t append_cache_streams = 65536;
  // The most bytes of framed SSE `data` events kept for sharing (see StreamService::ReadSse):
  // at most one frame per stream, the whole set dropped when a new frame would pass this.
  // 0 disables sharing (every SSE reader reads and frames on its own).
  size_t sse_shared_frame_bytes = 16u << 20;
  // The most record bytes (payloads and keys) a fork may copy from its source. A fork copies the
  // inherited records into the new stream as one atomic batch, held in memory until it commits,
  // like a request body; a larger fork is refused with 413 before it is created.
  size_t max_fork_bytes = 64u << 20;
  // The most live forks one stream may have: a source lists its forks' ids in its metadata,
  // which every fork created or removed rewrites. One more is refused with 409.
  size_t max_forks_per_stream = 1000;
  // Background compaction of State Protocol streams (core/state_compaction.h): a stream is
  // compacted on blocking_executor once the payload bytes appended to it through this service
  // since its last compaction pass this share of its retained bytes, and at least
  // compaction_min_bytes. Those bytes bound what the next compaction can drop from above (each
  // can supersede at most one earlier message). The count lives in memory and starts at 0 when
  // the service starts. 0 turns background compaction off (POST ?compact still works).
  double compaction_share = 0.5;
  uint64_t compaction_min_bytes = 1u << 20;
  // The most messages one JSON-mode append (or create with a body) may carry: a top-level array
  // of more elements is refused with 413 before any message is made. Each message costs about
  // 100 bytes of memory on top of its text while the append runs, so this bounds what a body of
  // tiny messages (`[1,1,1,...]`) can cost.
  size_t max_append_messages = 100000;
  // Compression of catch-up and long-poll bodies by Accept-Encoding (content_coding.h).
  CompressionOptions compression;
};

enum class LiveMode { kNone, kLongPoll, kSse };

// A read in progress: the stream, where the reader is, and how it reads.
struct ReadState {
  StreamScope scope = StreamScope::Global();
  std::string name;
  StreamId id = 0;
  std::string content_type;
  bool json = false;
  // SSE data events are base64 for content types other than text/* and application/json.
  bool base64 = false;
  LiveMode mode = LiveMode::kNone;
  bool offset_now = false;
  uint64_t position = 0;
  // The stream's compaction horizon when the read began. An SSE reader that started from the
  // beginning reads only survivors while the horizon stays there, so its positions below it are
  // safe; once a compaction moves it, they are not (ReadSse).
  uint64_t horizon_seen = 0;
  std::optional<std::string> client_cursor;
  std::optional<std::string> if_none_match;
  // Whether a shared cache (a CDN, a caching proxy) may store the answer and give it to anyone:
  // false for a read that needed a token, whose answers are `private`.
  bool shared_cache = true;
  // The coding the client's Accept-Encoding asks for (identity for SSE, and when compression
  // is off); ReadResponse uses it for bodies of at least CompressionOptions::min_bytes.
  ContentCoding coding = ContentCoding::kIdentity;
};

// One read from a ReadState's position.
struct ReadChunk {
  // Set when the stream vanished (deleted or expired) since BeginRead, or the read failed.
  bool gone = false;
  // Why, when the read failed for another reason than the stream being gone (a damaged record
  // reads as `corruption`, a failing disk as `io_error`): the answer carries it.
  Status error;
  // Gone because the reader's position fell below the stream's compaction horizon (410).
  bool below_horizon = false;
  // The records read, each as stored (a JSON message or a slice of bytes).
  std::vector<std::string> records;
  uint64_t start = 0;
  uint64_t next = 0;
  bool up_to_date = false;
  // Closed and this chunk reaches the final offset.
  bool closed = false;
};

// One step of an SSE response at a reader's position: the records there, framed once as an
// "event: data" block that every SSE reader of the stream at the same position shares.
struct SseStep {
  // Set when the stream vanished (deleted or expired) since BeginRead, or the read failed.
  bool gone = false;
  // Why, when the read failed for another reason than the stream being gone (damaged records
  // read as `corruption` with their offsets): the response sends it as an error event.
  Status error;
  uint64_t start = 0;
  uint64_t next = 0;
  bool up_to_date = false;
  // Closed and this step reaches the final offset.
  bool closed = false;
  // The framed data event; null when there are no records at the position.
  std::shared_ptr<const std::string> data;
};

class StreamService {
 public:
  StreamService(StreamRegistry registry, StreamServiceOptions options, Metrics* metrics);
  StreamService(const StreamService&) = delete;
  StreamService& operator=(const StreamService&) = delete;

  const StreamServiceOptions& options() const { return options_; }
  StreamRegistry& registry() { return registry_; }

  // PUT (create/fork), POST (append/close), DELETE and PATCH (retention). `route` must outlive
  // the awaitable (the awaiting coroutine's frame holds it).
  net::awaitable<HttpResponse> HandleWrite(const Route& route, HttpRequest request);
  // GET /v1/streams?prefix=&after=&limit= (runnel extension): streams of the route's scope in
  // name order as {"streams":[{name, content_type, next_offset, closed, ...}], "next_after"}.
  HttpResponse HandleList(const Route& route, const HttpRequest& request);
  // HEAD.
  HttpResponse HandleHead(const Route& route, const HttpRequest& request);

  // GET: validates the request and positions the reader. On failure, `error` holds the response
  // to send and the result is nullopt.
  std::optional<ReadState> BeginRead(const Route& route, const HttpRequest& request,
                                     HttpResponse* error);
  // Reads what is available at state.position (does not advance it).
  ReadChunk Read(const ReadState& state);
  // A 200 (or 304) response for a catch-up or long-poll read that has data or is catch-up.
  HttpResponse ReadResponse(const ReadState& state, const ReadChunk& chunk);
  // The 204 a long-poll answers on timeout or on a closed stream at its tail.
  HttpResponse LongPollEmptyResponse(const ReadState& state, const ReadChunk& chunk);
  // Headers of an SSE response (status 200, body empty).
  HttpResponse SseHeaders(const ReadState& state);
  // "event: data" (when the chunk has records) followed by "event: control".
  std::string SseEvents(const ReadState& state, const ReadChunk& chunk);
  // The next SSE step at state.position (does not advance it). Readers of one stream at the
  // same position share one store read and one framed data event: after an append wakes
  // thousands of readers, the first one reads and frames the new records and the rest reuse
  // them, checking only the stream's tail.
  SseStep ReadSse(const ReadState& state);
  // The "event: control" block that follows a step (PROTOCOL.md 10.2): its next offset, a
  // cursor unless closed, upToDate and streamClosed.
  std::string SseControl(const ReadState& state, const SseStep& step);
  // The "event: error" block that ends an SSE response whose read failed: the JSON error body
  // of the same failure as a catch-up read (ErrorBody), as its data.
  static std::string SseError(const Status& error);
  // The stream if it exists and is live (not expired, not soft-deleted), else kNotFound. For
  // runnel extensions (consumer groups, group_service.h) that address protocol streams.
  Result<StreamInfo> LookupLive(const StreamScope& scope, std::string_view name);
  // Wakes `on_hint` (from a store thread) when the stream may have moved.
  Result<Subscription> Watch(const ReadState& state, std::function<void()> on_hint);

  // The cursor for a live response (PROTOCOL.md 10.1).
  static std::string NextCursor(const std::optional<std::string>& client_cursor, uint64_t now_ms);

  // Headers every response carries (CORS exposure, browser security).
  static void AddCommonHeaders(HttpResponse* response);
  // The same headers as HTTP/1.1 header lines ("Name: value\r\n" each), built once.
  static std::string_view CommonHeaderLines();
  // CORS preflight.
  static HttpResponse Preflight(const HttpRequest& request);
  // An error response with the JSON body from the one Status mapping.
  static HttpResponse ErrorResponse(const Status& status);
  // The same for a refused request body: kResourceExhausted (a limit of the body's size or
  // message count) is 413, not 429.
  static HttpResponse PayloadErrorResponse(const Status& status);
  // 409 failed_precondition for a write, trim or delete of a channel's stream (its partitions
  // and checkpoint hold the channel's rows; see runnel/channel.h).
  static HttpResponse ChannelOwned(std::string_view name);

 private:
  using Meta = protocol::Meta;

  static std::string LaneKey(const StreamScope& scope, std::string_view name);

  // PUT: the headers become a protocol::CreateSpec; protocol::Catalog::Create decides.
  HttpResponse Create(const Route& route, const HttpRequest& request);
  // POST: the headers become a protocol::AppendSpec; protocol::Catalog::PrepareAppend and
  // FinishAppend decide (core/protocol/append.h). An append to a remembered stream that is gone
  // runs again from a fresh lookup: at most two rounds.
  net::awaitable<HttpResponse> Append(const Route& route, const HttpRequest& request);
  // The HTTP answer to an append's outcome: status and headers, nothing decided.
  static HttpResponse AppendResponse(const Route& route, const protocol::AppendOutcome& outcome);
  // PUT, PATCH or DELETE: blocking catalog calls (on the blocking pool in a server).
  HttpResponse RunCatalogWrite(const Route& route, const HttpRequest& request);
  HttpResponse Delete(const Route& route);
  // PATCH (runnel extension): replaces the stream's retention caps with the
  // Stream-Retention-Max-* headers sent (an absent header clears that cap); with none of them,
  // `Stream-Retention: none` clears every cap and anything else is 400.
  HttpResponse UpdateRetention(const Route& route, const HttpRequest& request);
  // POST <stream>?compact: compacts a State Protocol stream now (core/state_compaction.h) and
  // answers what it reclaimed as JSON. One compaction per stream at a time (409 otherwise).
  HttpResponse CompactNow(const Route& route);
  // Runs one compaction of stream `id` unless one is running (then kConflict).
  Result<compaction::Report> RunCompaction(StreamId id, const StreamScope& scope,
                                           std::string_view name);
  // Counts `bytes` appended to a compacted stream and starts a background compaction when
  // they pass StreamServiceOptions::compaction_share.
  void NoteCompactedAppend(const StreamScope& scope, const StreamInfo& info, uint64_t bytes);
  // Streams being compacted now, and payload bytes appended to compacted streams since their
  // last compaction; guarded by compacting_mu_.
  Mutex compacting_mu_;
  std::unordered_set<StreamId> compacting_;
  std::unordered_map<StreamId, uint64_t> appended_since_compaction_;

  StreamRegistry registry_;
  StreamServiceOptions options_;
  Metrics* metrics_;
  // The protocol's per-stream state and rules (expiry, access times, forks, metadata writes).
  protocol::Catalog catalog_;

  // Per-stream lanes of the writes that validate against state they then change (LaneKey).
  KeyedLanes lanes_;

  // The latest framed SSE data event per stream (ReadSse), bounded by
  // options_.sse_shared_frame_bytes. Frames cover immutable records, so a frame stays correct
  // for its position; only the tail-dependent flags are computed per reader.
  struct SharedSseFrame {
    uint64_t start = 0;
    uint64_t next = 0;
    bool base64 = false;
    std::shared_ptr<const std::string> data;
  };
  Mutex sse_mu_;
  std::unordered_map<StreamId, SharedSseFrame> sse_frames_ RUNNEL_GUARDED_BY(sse_mu_);
  size_t sse_frame_bytes_ RUNNEL_GUARDED_BY(sse_mu_) = 0;
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_STREAM_SERVICE_H_
