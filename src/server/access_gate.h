// AccessGate: who an HTTP request is (bearer tokens from a TokenStore file) and whether it may
// touch what its route addresses (SEMANTICS Z1-Z4 through CheckStreamAccess). HTTP-library-free.
//
// Modes:
// - kAuto (default): tokens are required once the token file has held at least one token
//   (since start-up); before that the server runs open. Revoking the last token or deleting the
//   file never opens a server that required tokens: it then refuses every request until a
//   token exists again or it is restarted.
// - kTokens: tokens are always required (with an empty file every request is refused).
// - kNone: never authenticate.
// Open means every request acts as the platform principal with the cross-tenant capability.
//
// Authentication: `Authorization: Bearer <token>`. No Authorization header, or one with another
// scheme, is kUnauthenticated (401); a malformed, unknown, revoked or expired bearer token is
// kPermissionDenied (403).
//
// Authorization happens before any lookup of the stream, so a denied caller gets the same 403
// whether or not the stream exists (Z4); the message names only what the caller sent.
//
// The token file is re-read when its mtime, size or inode changes; the file is checked at most
// once per `reload_interval_ms` (0 = on every request). A file that fails to parse keeps the
// previous token set and is logged.
//
// Thread-safety: every method may be called from any thread concurrently.
#ifndef RUNNEL_SERVER_ACCESS_GATE_H_
#define RUNNEL_SERVER_ACCESS_GATE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/mutex.h"
#include "core/token_store.h"
#include "runnel/clock.h"
#include "runnel/registry.h"
#include "runnel/status.h"
#include "server/http_types.h"

namespace runnel::server {

struct AccessOptions {
  enum class Mode { kAuto, kTokens, kNone };
  Mode mode = Mode::kAuto;
  // The token file; empty means no file (no tokens).
  std::string tokens_path;
  uint64_t reload_interval_ms = 1000;
  // Not owned; null means Clock::Real(). Used for token expiry.
  Clock* clock = nullptr;
};

class AccessGate {
 public:
  // kCorruption when the token file exists but does not parse.
  static Result<std::shared_ptr<AccessGate>> Open(const AccessOptions& options);

  // True when requests currently need a token.
  bool RequiresTokens();
  // Tokens currently loaded.
  size_t token_count();

  // The request's principal, or kUnauthenticated / kPermissionDenied.
  Result<Principal> Authenticate(const HttpRequest& request);

  // Z1-Z4 for what `route` addresses: a stream (and, for a PUT with Stream-Forked-From, the fork
  // source too), a listing (the scope), /metrics (the global scope). kInvalidArgument for a
  // malformed tenant id in the path. Other routes need no authorization.
  static Status Authorize(const Principal& who, const Route& route, const HttpRequest& request);

  // Authenticate + Authorize. nullopt: go ahead as *who. Otherwise the response to send (401
  // carries WWW-Authenticate).
  std::optional<HttpResponse> Admit(const HttpRequest& request, const Route& route, Principal* who);

  // The response for an authentication or authorization failure.
  static HttpResponse Denied(const Status& status);

  // Re-reads the token file if it changed (at most once per reload_interval_ms), and returns
  // how many times the token set has been replaced since Open: a change means a response
  // admitted earlier may no longer be.
  uint64_t Refresh();

 private:
  explicit AccessGate(const AccessOptions& options);
  void MaybeReload();
  std::shared_ptr<const TokenStore> Current();

  const AccessOptions options_;
  Clock* const clock_;
  Mutex mu_;
  std::shared_ptr<const TokenStore> tokens_ RUNNEL_GUARDED_BY(mu_);
  struct FileId {
    int64_t mtime_ns = -1;
    int64_t size = -1;
    uint64_t inode = 0;
    bool operator==(const FileId&) const = default;
  };
  FileId file_id_ RUNNEL_GUARDED_BY(mu_);
  // Written under mu_; read without it first, so a request between two checks of the token
  // file takes no lock.
  std::atomic<uint64_t> last_check_ms_{0};
  // Whether tokens_ holds a token: written with tokens_, read without mu_ on every request.
  std::atomic<bool> tokens_nonempty_{false};
  std::atomic<bool> had_tokens_{false};
  std::atomic<uint64_t> generation_{0};
};

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_ACCESS_GATE_H_
