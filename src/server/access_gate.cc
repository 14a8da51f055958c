#include "server/access_gate.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <chrono>
#include <utility>

#include "server/stream_service.h"

namespace runnel::server {

namespace {

uint64_t SteadyMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

AccessGate::AccessGate(const AccessOptions& options)
    : options_(options), clock_(options.clock ? options.clock : Clock::Real()) {}

Result<std::shared_ptr<AccessGate>> AccessGate::Open(const AccessOptions& options) {
  std::shared_ptr<AccessGate> gate(new AccessGate(options));
  MutexLock lock(gate->mu_);  // not shared yet; taken for the analysis
  if (!options.tokens_path.empty()) {
    struct stat st {};
    if (::stat(options.tokens_path.c_str(), &st) == 0) {
      gate->file_id_ = {static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                        static_cast<int64_t>(st.st_size), static_cast<uint64_t>(st.st_ino)};
    }
    auto store = TokenStore::Open(options.tokens_path, gate->clock_);
    if (!store.ok()) return store.status();
    gate->tokens_ = std::shared_ptr<const TokenStore>(std::move(*store));
    gate->tokens_nonempty_.store(!gate->tokens_->empty());
  }
  gate->last_check_ms_.store(SteadyMs());
  return gate;
}

void AccessGate::MaybeReload() {
  if (options_.tokens_path.empty()) return;
  const uint64_t now = SteadyMs();
  // Between two checks (the common case, once per request) without taking the lock.
  if (options_.reload_interval_ms > 0 &&
      now - last_check_ms_.load(std::memory_order_relaxed) < options_.reload_interval_ms) {
    return;
  }
  MutexLock lock(mu_);
  if (options_.reload_interval_ms > 0 &&
      now - last_check_ms_.load() < options_.reload_interval_ms) {
    return;  // another thread checked meanwhile
  }
  last_check_ms_.store(now);
  FileId id;
  struct stat st {};
  if (::stat(options_.tokens_path.c_str(), &st) == 0) {
    id = {static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
          static_cast<int64_t>(st.st_size), static_cast<uint64_t>(st.st_ino)};
  }
  if (id == file_id_) return;
  auto store = TokenStore::Open(options_.tokens_path, clock_);
  if (!store.ok()) {
    spdlog::error("token file {} not reloaded, keeping the previous tokens: {}",
                  options_.tokens_path, store.status().ToString());
    return;
  }
  file_id_ = id;
  tokens_ = std::shared_ptr<const TokenStore>(std::move(*store));
  tokens_nonempty_.store(!tokens_->empty());
  generation_.fetch_add(1);
  spdlog::info("token file {} reloaded ({} tokens)", options_.tokens_path, tokens_->List().size());
}

uint64_t AccessGate::Refresh() {
  MaybeReload();
  return generation_.load();
}

std::shared_ptr<const TokenStore> AccessGate::Current() {
  MaybeReload();
  MutexLock lock(mu_);
  return tokens_;
}

bool AccessGate::RequiresTokens() {
  switch (options_.mode) {
    case AccessOptions::Mode::kNone: return false;
    case AccessOptions::Mode::kTokens: return true;
    case AccessOptions::Mode::kAuto: break;
  }
  if (had_tokens_.load()) return true;
  MaybeReload();
  // Sticky: revoking the last token or deleting the file must not open the server.
  if (tokens_nonempty_.load()) had_tokens_.store(true);
  return had_tokens_.load();
}

size_t AccessGate::token_count() {
  auto tokens = Current();
  return tokens ? tokens->List().size() : 0;
}

Result<Principal> AccessGate::Authenticate(const HttpRequest& request) {
  if (!RequiresTokens()) return Principal::Platform(/*cross_tenant=*/true);
  auto header = request.Header("authorization");
  constexpr std::string_view kScheme = "bearer";
  if (!header || header->size() <= kScheme.size() ||
      !EqualsIgnoreCase(header->substr(0, kScheme.size()), kScheme) ||
      (*header)[kScheme.size()] != ' ') {
    return Status::Unauthenticated("this server requires an Authorization: Bearer token");
  }
  const std::string_view bearer = TrimBlanks(header->substr(kScheme.size() + 1));
  auto tokens = Current();
  if (!tokens) return Status::PermissionDenied("unknown token");
  return tokens->Authenticate(bearer);
}

Status AccessGate::Authorize(const Principal& who, const Route& route, const HttpRequest& request) {
  switch (route.kind) {
    case Route::Kind::kStream:
    case Route::Kind::kList: {
      if (auto tenant = route.scope.tenant()) {
        // Only a caller who may act there learns that the id is malformed.
        RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, route.scope, route.name));
        RUNNEL_RETURN_IF_ERROR(ValidateTenantId(*tenant));
      }
      RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, route.scope, route.name));
      if (route.kind == Route::Kind::kStream && request.method == "PUT") {
        if (auto from = request.Header("stream-forked-from")) {
          auto decoded = PercentDecode(*from, false);
          Route source = ParseRoute(decoded ? *decoded : std::string(*from), true);
          if (source.kind == Route::Kind::kStream) {
            RUNNEL_RETURN_IF_ERROR(CheckStreamAccess(who, source.scope, source.name));
          }
        }
      }
      return Status::OK();
    }
    case Route::Kind::kChannel:
      // Channels live in the global scope: the platform, or a caller with the capability.
      return CheckStreamAccess(who, route.scope, route.name);
    case Route::Kind::kMetrics:
      // Server-wide counters: the platform, or a caller that may act in every scope.
      return CheckStreamAccess(who, StreamScope::Global(), "/metrics");
    case Route::Kind::kHealth:
    case Route::Kind::kDashboard:  // static files; the page calls the API with its own token
    case Route::Kind::kNotFound: return Status::OK();
  }
  return Status::OK();
}

HttpResponse AccessGate::Denied(const Status& status) {
  HttpResponse r = StreamService::ErrorResponse(status);
  if (status.code() == StatusCode::kUnauthenticated) {
    r.Set("WWW-Authenticate", "Bearer realm=\"runnel\"");
  } else if (status.code() == StatusCode::kPermissionDenied) {
    r.Set("Cache-Control", "no-store");
  }
  return r;
}

std::optional<HttpResponse> AccessGate::Admit(const HttpRequest& request, const Route& route,
                                              Principal* who) {
  auto principal = Authenticate(request);
  if (!principal.ok()) {
    HttpResponse r = Denied(principal.status());
    if (principal.status().code() == StatusCode::kPermissionDenied) {
      r.Set("WWW-Authenticate", "Bearer realm=\"runnel\", error=\"invalid_token\"");
    }
    return r;
  }
  Status allowed = Authorize(*principal, route, request);
  if (!allowed.ok()) return Denied(allowed);
  *who = std::move(*principal);
  return std::nullopt;
}

}  // namespace runnel::server
