// The HTTP surface, without sockets: sequences of requests with fuzzed methods, headers, query
// parameters and bodies go through the services behind the routes, over one memory store:
// StreamService (/v1/stream/..., the protocol), ChannelService (/v1/channels/...) and
// GroupService (/v1/groups/...). Bad input must get a clear client error, never a crash and
// never a 500: every response must have a valid status other than 500, and every error response
// must carry the JSON body {"error":{"code":...,"message":...}}.
//
// Input: a sequence of requests, each
//   u8 method, u8 path: below 0x80 one of a few paths (so requests meet on the same streams),
//     else u8 length and a raw request target, percent-decoded and split as the server does,
//   u8 header count, then per header: u8 name (from the protocol's header names), u8 length,
//     value;
//   u8 query count, then per parameter: u8 name, u8 length, value;
//   u16 body length (little-endian), body.
// A request cut short by the end of the input is sent with what it has.
#include <utility>  // first: Boost 1.74's awaitable.hpp needs std::exchange declared.

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "runnel/registry.h"
#include "runnel/store.h"
#include "server/channel_service.h"
#include "server/group_service.h"
#include "server/http_types.h"
#include "server/stream_service.h"

namespace {

using runnel::server::HttpRequest;
using runnel::server::HttpResponse;
using runnel::server::ParseRoute;
using runnel::server::StreamService;

constexpr const char* kMethods[] = {"PUT", "POST", "GET", "HEAD", "DELETE", "PATCH", "OPTIONS"};
constexpr const char* kPaths[] = {"/v1/stream/a",
                                  "/v1/stream/b",
                                  "/v1/stream/a/b",
                                  "/v1/stream/c",
                                  "/v1/channels/ch",
                                  "/v1/channels/ch/partitions/0",
                                  "/v1/channels/ch/partitions/1",
                                  "/v1/channels/ch/keys/k1",
                                  "/v1/groups/stream/a",
                                  "/v1/groups/stream/b",
                                  "/v1/stream/ch:0"};
constexpr const char* kHeaders[] = {"content-type",
                                    "stream-ttl",
                                    "stream-expires-at",
                                    "stream-seq",
                                    "producer-id",
                                    "producer-epoch",
                                    "producer-seq",
                                    "stream-closed",
                                    "stream-expected-offset",
                                    "if-none-match",
                                    "stream-forked-from",
                                    "stream-fork-offset",
                                    "stream-fork-sub-offset",
                                    "stream-retention",
                                    "stream-retention-max-events",
                                    "stream-retention-max-age-ms",
                                    "stream-retention-max-bytes",
                                    "access-control-request-headers",
                                    "partition-key",
                                    "idempotency-key",
                                    "publisher-id"};
constexpr const char* kQueries[] = {"offset", "live", "cursor", "limit", "prefix",    "after",
                                    "group",  "ack",  "prune",  "from",  "partitions"};

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::string Bytes(size_t n) {
    n = std::min(n, size_ - pos_);
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

template <size_t N>
const char* Pick(const char* const (&names)[N], uint8_t b) {
  return names[b % N];
}

void CheckResponse(const HttpRequest& request, const HttpResponse& r) {
  const bool status_ok = r.status >= 100 && r.status <= 599 && r.status != 500;
  // Errors carry the JSON body, HEAD answers too (the server sends only its length).
  const bool error_ok = r.status < 400 || r.body.rfind("{\"error\":{\"code\":\"", 0) == 0;
  if (status_ok && error_ok) return;
  std::fprintf(stderr, "stream_service_fuzz: %s %s answered %d: %s\n", request.method.c_str(),
               request.path.c_str(), r.status, r.body.c_str());
  std::abort();
}

struct Services {
  StreamService* streams;
  runnel::server::ChannelService* channels;
  runnel::server::GroupService* groups;
};

void Serve(const Services& services, HttpRequest request) {
  StreamService& service = *services.streams;
  const auto route = ParseRoute(request.path, /*allow_tenants=*/true);
  if (request.path.rfind("/v1/groups/", 0) == 0) {
    const runnel::server::GroupAnswer answer =
        services.groups->HandleNow(runnel::Principal::Platform(), request);
    if (!answer.live) CheckResponse(request, answer.response);
    return;
  }
  if (route.kind == runnel::server::Route::Kind::kChannel) {
    CheckResponse(request, services.channels->HandleNow(route, request));
    return;
  }
  if (route.kind == runnel::server::Route::Kind::kList && request.method == "GET") {
    CheckResponse(request, service.HandleList(route, request));
    return;
  }
  if (request.method == "OPTIONS") {
    CheckResponse(request, StreamService::Preflight(request));
  } else if (request.method == "HEAD") {
    CheckResponse(request, service.HandleHead(route, request));
  } else if (request.method == "GET") {
    HttpResponse error;
    auto state = service.BeginRead(route, request, &error);
    if (!state) {
      CheckResponse(request, error);
      return;
    }
    const runnel::server::ReadChunk chunk = service.Read(*state);
    const auto live = request.Query("live");
    if (live == std::optional<std::string_view>("sse")) {
      CheckResponse(request, service.SseHeaders(*state));
      (void)service.SseEvents(*state, chunk);
      const runnel::server::SseStep step = service.ReadSse(*state);
      (void)service.SseControl(*state, step);
    } else if (live && chunk.records.empty() && !chunk.gone) {
      CheckResponse(request, service.LongPollEmptyResponse(*state, chunk));
    } else {
      CheckResponse(request, service.ReadResponse(*state, chunk));
    }
  } else {
    const HttpRequest copy = request;
    bool answered = false;
    // The memory store answers inline and the service has no blocking pool here: the write
    // completes within run(), which returns once nothing is left to do (no work guard).
    boost::asio::io_context ioc(1);
    boost::asio::co_spawn(ioc, service.HandleWrite(route, std::move(request)),
                          [&copy, &answered](std::exception_ptr error, HttpResponse r) {
                            if (error) std::rethrow_exception(error);
                            CheckResponse(copy, r);
                            answered = true;
                          });
    ioc.run();
    if (!answered) {
      std::fprintf(stderr, "stream_service_fuzz: %s %s was not answered\n", copy.method.c_str(),
                   copy.path.c_str());
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  runnel::server::StreamServiceOptions options;
  options.long_poll_timeout_ms = 10;
  options.max_read_bytes = 4096;
  runnel::StreamRegistry registry(runnel::NewMemoryStore());
  StreamService service(registry, options, nullptr);
  runnel::server::ChannelService channels(registry, nullptr);
  runnel::server::GroupService groups(&service, nullptr);
  const Services services{&service, &channels, &groups};
  Input in(data, size);
  for (int n = 0; n < 64 && !in.empty(); ++n) {
    HttpRequest request;
    request.method = Pick(kMethods, in.U8());
    if (const uint8_t p = in.U8(); p < 0x80) {
      request.path = Pick(kPaths, p);
    } else {
      // A raw request target, decoded as the server decodes one (a malformed one is a 400 there
      // before any service sees it).
      const std::string target = in.Bytes(in.U8());
      const size_t question = target.find('?');
      auto path =
          runnel::server::PercentDecode(std::string_view(target).substr(0, question), false);
      if (!path) continue;
      request.path = std::move(*path);
      if (question != std::string::npos &&
          !runnel::server::ParseQuery(std::string_view(target).substr(question + 1),
                                      &request.query)) {
        continue;
      }
    }
    for (int h = in.U8() % 8; h > 0; --h) {
      const char* name = Pick(kHeaders, in.U8());
      request.headers[name] = in.Bytes(in.U8());
    }
    for (int q = in.U8() % 4; q > 0; --q) {
      const char* name = Pick(kQueries, in.U8());
      request.query.emplace(name, in.Bytes(in.U8()));
    }
    const size_t body = in.U8() | (size_t{in.U8()} << 8);
    request.body = in.Bytes(body);
    Serve(services, std::move(request));
  }
  return 0;
}
