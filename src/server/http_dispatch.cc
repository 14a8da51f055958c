// Dispatch: one request on the HTTP edge, whatever its protocol (HTTP/1.1 plain or TLS, or an
// HTTP/2 stream). Preflight, authentication and tenant authorization (Z4), quotas, then the
// route: the subscription API, consumer groups, health, metrics, the dashboard, listings,
// channels, and the stream operations, whose reads may turn into a long-poll or an SSE
// response (http_live.cc).
#include "server/http_internal.h"

#include "server/dashboard.h"

namespace runnel::server {

// Handles one request. Returns false when the connection must close; an SSE request is
// returned in *sse (and false) for the caller to serve. Admission comes first (preflight,
// authentication, quotas); the route then picks one of the steps below.
template <typename Stream>
net::awaitable<bool> HttpServer::Impl::Dispatch(Stream& stream, HttpRequest request,
                                                bool keep_alive, PendingSse* sse) {
  Route route = ParseRoute(request.path, /*allow_tenants=*/true);
  const std::string method = request.method;
  if (method == "OPTIONS") {
    co_return co_await Write(stream, StreamService::Preflight(request), keep_alive, false,
                             route.label, method);
  }
  // Authentication and tenant authorization, before anything looks at a stream (Z4).
  Principal principal = Principal::Platform(/*cross_tenant=*/true);
  if (options_.access && route.kind != Route::Kind::kHealth &&
      route.kind != Route::Kind::kDashboard &&
      !(options_.subscriptions && SubscriptionService::SelfAuthenticated(route))) {
    if (auto denied = options_.access->Admit(request, route, &principal)) {
      co_return co_await Write(stream, std::move(*denied), keep_alive, method == "HEAD",
                               route.label, method);
    }
  }
  // Quotas limit a tenant's streams, bytes and appends; the reserved __ds endpoints
  // (subscriptions) are none of these, and their wake-token routes admit callers without a
  // tenant token, who must not be able to draw on (or learn about) a tenant's quota.
  // An admitted create keeps its place under the stream limit until this request is done.
  TenantQuota::CreateHold create_hold;
  if (quota_ && !SubscriptionService::Matches(route)) {
    if (auto limited = co_await CheckQuota(route, request, &create_hold)) {
      co_return co_await Write(stream, std::move(*limited), keep_alive, method == "HEAD",
                               route.label, method);
    }
  }
  if (options_.subscriptions && SubscriptionService::Matches(route)) {
    co_return co_await DispatchSubscription(stream, route, request, keep_alive);
  }
  if (GroupService::Matches(request.path)) {
    co_return co_await DispatchGroup(stream, std::move(principal), std::move(request), method,
                                     keep_alive, sse);
  }
  if (route.kind != Route::Kind::kStream) {
    co_return co_await DispatchService(stream, route, std::move(request), method, keep_alive);
  }
  co_return co_await DispatchStream(stream, route, std::move(request), method, keep_alive, sse);
}

// The tenant quota's verdict on an admitted request (TenantQuota::Check): an answer when it is
// over a limit; a create that passes keeps its place in *hold.
net::awaitable<std::optional<HttpResponse>> HttpServer::Impl::CheckQuota(
    const Route& route, const HttpRequest& request, TenantQuota::CreateHold* hold) {
  TenantQuota* quota = quota_.get();
  const Route* rt = &route;
  const HttpRequest* rq = &request;
  const std::function<std::optional<HttpResponse>()> check = [quota, rt, rq, hold] {
    return quota->Check(*rt, *rq, hold);
  };
  co_return co_await StoreCall(check);
}

// The reserved `__ds` subscription API (subscription_service.h).
template <typename Stream>
net::awaitable<bool> HttpServer::Impl::DispatchSubscription(Stream& stream, const Route& route,
                                                            const HttpRequest& request,
                                                            bool keep_alive) {
  const Route* rt = &route;
  const HttpRequest* rq = &request;
  SubscriptionService* subscriptions = options_.subscriptions.get();
  const std::function<HttpResponse()> handle = [subscriptions, rt, rq] {
    return subscriptions->Handle(*rt, *rq);
  };
  HttpResponse r = co_await StoreCall(handle);
  co_return co_await Write(stream, std::move(r), keep_alive, request.method == "HEAD",
                           "subscriptions", request.method);
}

// A consumer-group request (group_service.h): answered at once, or a read-next that waits for
// work, as a long-poll or (left in *sse) an SSE response.
template <typename Stream>
net::awaitable<bool> HttpServer::Impl::DispatchGroup(Stream& stream, Principal principal,
                                                     HttpRequest request, const std::string& method,
                                                     bool keep_alive, PendingSse* sse) {
  auto shared = std::make_shared<const HttpRequest>(std::move(request));
  GroupAnswer answer = co_await groups_.Handle(principal, *shared);
  if (!answer.live) {
    co_return co_await Write(stream, std::move(answer.response), keep_alive, method == "HEAD",
                             "groups", method);
  }
  if (answer.live->mode == LiveMode::kSse) {
    sse->state = std::move(*answer.live);
    sse->label = "groups";
    sse->path = shared->path;
    if (auto a = shared->Header("authorization")) sse->authorization = std::string(*a);
    co_return false;
  }
  co_return co_await GroupLongPoll(stream, std::move(principal), std::move(shared),
                                   std::move(*answer.live), keep_alive);
}

// The routes that are not a stream's: health, metrics, the dashboard, unknown paths, the
// stream listing and channels.
template <typename Stream>
net::awaitable<bool> HttpServer::Impl::DispatchService(Stream& stream, const Route& route,
                                                       HttpRequest request,
                                                       const std::string& method, bool keep_alive) {
  StreamService* service = &service_;
  const Route* rt = &route;
  const HttpRequest* rq = &request;
  if ((route.kind == Route::Kind::kHealth || route.kind == Route::Kind::kMetrics) &&
      method != "GET" && method != "HEAD") {
    HttpResponse r = StreamService::ErrorResponse(
        Status::InvalidArgument("use GET on /" + std::string(route.label)));
    r.status = 405;
    r.Set("Allow", "GET, HEAD");
    co_return co_await Write(stream, std::move(r), keep_alive, false, route.label, method);
  }
  switch (route.kind) {
    case Route::Kind::kHealth: {
      HttpResponse r;
      r.Set("Content-Type", "text/plain");
      r.Set("Cache-Control", "no-store");
      r.body = "ok\n";
      co_return co_await Write(stream, std::move(r), keep_alive, method == "HEAD", route.label,
                               method);
    }
    case Route::Kind::kMetrics: {
      HttpResponse r;
      r.Set("Content-Type", "text/plain; version=0.0.4");
      r.Set("Cache-Control", "no-store");
      r.body = RenderInfo(options_.info, service_.registry().store().Durability()) +
               metrics_.Render() +
               RenderStoreCommitStats(service_.registry().store().CommitStats());
      co_return co_await Write(stream, std::move(r), keep_alive, method == "HEAD", route.label,
                               method);
    }
    case Route::Kind::kDashboard: {
      HttpResponse r = options_.dashboard
                           ? DashboardResponse(request.path, method)
                           : StreamService::ErrorResponse(Status::NotFound("no such route"));
      co_return co_await Write(stream, std::move(r), keep_alive, method == "HEAD", route.label,
                               method);
    }
    case Route::Kind::kNotFound:
      co_return co_await Write(stream,
                               StreamService::ErrorResponse(Status::NotFound("no such route")),
                               keep_alive, method == "HEAD", route.label, method);
    case Route::Kind::kList: {
      if (method == "GET" || method == "HEAD") {
        const std::function<HttpResponse()> list = [service, rt, rq] {
          return service->HandleList(*rt, *rq);
        };
        HttpResponse r = co_await StoreCall(list);
        co_return co_await Write(stream, std::move(r), keep_alive, method == "HEAD", route.label,
                                 method);
      }
      HttpResponse r =
          StreamService::ErrorResponse(Status::InvalidArgument("use GET to list streams"));
      r.status = 405;
      r.Set("Allow", "GET, HEAD");
      co_return co_await Write(stream, std::move(r), keep_alive, false, route.label, method);
    }
    case Route::Kind::kChannel: {
      const bool head = method == "HEAD";
      HttpResponse r = co_await channels_.Handle(route, std::move(request));
      co_return co_await Write(stream, std::move(r), keep_alive, head, route.label, method);
    }
    case Route::Kind::kStream: break;
  }
  // Stream routes go to DispatchStream.
  co_return false;
}

// A stream operation: writes (create, append, close, delete, and PATCH), HEAD, and reads.
template <typename Stream>
net::awaitable<bool> HttpServer::Impl::DispatchStream(Stream& stream, const Route& route,
                                                      HttpRequest request,
                                                      const std::string& method, bool keep_alive,
                                                      PendingSse* sse) {
  StreamService* service = &service_;
  const Route* rt = &route;
  const HttpRequest* rq = &request;
  if (method == "PUT" || method == "POST" || method == "DELETE" || method == "PATCH") {
    HttpResponse r = co_await service->HandleWrite(route, std::move(request));
    if (options_.subscriptions && r.status < 300) options_.subscriptions->NoteWrite(route);
    co_return co_await Write(stream, std::move(r), keep_alive, false, route.label, method);
  }
  if (method == "HEAD") {
    const std::function<HttpResponse()> head = [service, rt, rq] {
      return service->HandleHead(*rt, *rq);
    };
    HttpResponse r = co_await StoreCall(head);
    co_return co_await Write(stream, std::move(r), keep_alive, true, route.label, method);
  }
  if (method == "GET") {
    co_return co_await DispatchRead(stream, route, std::move(request), keep_alive, sse);
  }
  HttpResponse r = StreamService::ErrorResponse(
      Status::InvalidArgument("method " + method + " is not allowed on a stream"));
  r.status = 405;
  r.Set("Allow", "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS");
  co_return co_await Write(stream, std::move(r), keep_alive, false, route.label, method);
}

// A stream read: a catch-up read answered whole, a long-poll, or (left in *sse) an SSE
// response.
template <typename Stream>
net::awaitable<bool> HttpServer::Impl::DispatchRead(Stream& stream, const Route& route,
                                                    HttpRequest request, bool keep_alive,
                                                    PendingSse* sse) {
  StreamService* service = &service_;
  const Route* rt = &route;
  const HttpRequest* rq = &request;
  const std::string& method = request.method;
  // A read that needed a token answers `private` unless the operator declared its scope's
  // data public (ServerOptions::public_cache_scopes). Decided here, off the append path.
  const bool shared_cache = !options_.access || !options_.access->RequiresTokens() ||
                            options_.public_cache_scopes.count(route.scope.Label()) != 0;
  const std::function<ReadStart()> begin = [service, rt, rq, shared_cache] {
    ReadStart s;
    s.state = service->BeginRead(*rt, *rq, &s.response);
    if (s.state) s.state->shared_cache = shared_cache;
    if (s.state && s.state->mode == LiveMode::kNone) {
      s.response = service->ReadResponse(*s.state, service->Read(*s.state));
      s.state.reset();
    }
    return s;
  };
  ReadStart start = co_await StoreCall(begin);
  if (!start.state) {
    co_return co_await Write(stream, std::move(start.response), keep_alive, false, route.label,
                             method);
  }
  auto& state = start.state;
  switch (state->mode) {
    case LiveMode::kNone:  // answered above; kept for completeness
      co_return co_await Write(stream, std::move(start.response), keep_alive, false, route.label,
                               method);
    case LiveMode::kLongPoll: co_return co_await LongPoll(stream, std::move(*state), keep_alive);
    case LiveMode::kSse: break;
  }
  sse->state = std::move(*state);
  sse->label = "stream";
  sse->path = request.path;
  if (auto a = request.Header("authorization")) sse->authorization = std::string(*a);
  co_return false;
}

template net::awaitable<bool> HttpServer::Impl::Dispatch<beast::tcp_stream>(beast::tcp_stream&,
                                                                            HttpRequest, bool,
                                                                            PendingSse*);
template net::awaitable<bool> HttpServer::Impl::Dispatch<TlsStream>(TlsStream&, HttpRequest, bool,
                                                                    PendingSse*);
template net::awaitable<bool> HttpServer::Impl::Dispatch<H2Stream>(H2Stream&, HttpRequest, bool,
                                                                   PendingSse*);

}  // namespace runnel::server
