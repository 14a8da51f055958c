// Bearer tokens: who a request is, for the tenant authorization rules (SEMANTICS Z1-Z6).
//
// A token is shown to its owner once, at creation, as `rnl_<id>_<secret>` (id: 12 hex digits,
// secret: 43 base64url characters, 256 random bits). Only SHA-256(secret) is kept, so a copy of
// the token file lets nobody in. Because the secret is 256 random bits, a fast hash is enough: no
// password-stretching is needed to resist guessing.
//
// Grants: a token names a tenant (or the platform, when it has none), optionally with the
// cross-tenant capability, optionally with an expiry.
//
// Persistence: the file is rewritten whole on every change (write to `<path>.tmp`, fsync,
// rename, fsync the directory), so a crash leaves either the old or the new set, never a mix.
// Format, one token per line, space-separated, `#` starts a comment:
//   v1 <id> <sha256-hex> <tenant or -> <cross: 0|1> <expires_at_ms or -> <created_at_ms> <note%>
// where the note is percent-encoded (spaces, '%' and control bytes).
//
// Thread-safety: all methods may be called concurrently; Authenticate takes a shared lock.
#ifndef RUNNEL_CORE_TOKEN_STORE_H_
#define RUNNEL_CORE_TOKEN_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "runnel/clock.h"
#include "runnel/registry.h"
#include "runnel/status.h"

namespace runnel {

struct TokenGrant {
  // Tenant the token acts as; none = the platform principal.
  std::optional<std::string> tenant;
  bool cross_tenant = false;
  // Absolute expiry; none = never.
  std::optional<uint64_t> expires_at_ms;
  // Free text for operators ("ci deploys", "alice laptop").
  std::string note;
};

struct TokenInfo {
  std::string id;
  TokenGrant grant;
  uint64_t created_at_ms = 0;
};

// A token as kept on disk: the grant and SHA-256(secret) in hex.
struct StoredToken {
  TokenInfo info;
  std::string hash_hex;
};

// Parses the token file format above. kCorruption names `origin` and the line of the first
// malformed entry. Never reads past `text`.
Result<std::vector<StoredToken>> ParseTokenFile(std::string_view text, std::string_view origin);

// kInvalidArgument unless the id is 1-128 bytes of [A-Za-z0-9._-].
Status ValidateTenantId(std::string_view tenant);

class TokenStore {
 public:
  // Loads `path` if it exists (an absent file is an empty store). kCorruption names the line of a
  // malformed file. `clock` is not owned; null means Clock::Real().
  static Result<std::unique_ptr<TokenStore>> Open(std::string path, Clock* clock = nullptr);

  // Creates a token and persists it before returning the full token text, which is never
  // stored and cannot be shown again.
  Result<std::string> Create(const TokenGrant& grant);
  // kNotFound if no token has that id.
  Status Revoke(std::string_view id);
  std::vector<TokenInfo> List() const;
  bool empty() const;

  // The principal of a bearer token. kPermissionDenied for a malformed, unknown, revoked or
  // expired token (the message says which of malformed/unknown/expired, never more).
  Result<Principal> Authenticate(std::string_view bearer) const;

 private:
  TokenStore(std::string path, Clock* clock) : path_(std::move(path)), clock_(clock) {}
  Status Load();
  Status Persist(const std::map<std::string, StoredToken>& entries) const RUNNEL_REQUIRES(mu_);

  const std::string path_;
  Clock* const clock_;
  mutable SharedMutex mu_;
  std::map<std::string, StoredToken> entries_ RUNNEL_GUARDED_BY(mu_);  // by id
};

}  // namespace runnel

#endif  // RUNNEL_CORE_TOKEN_STORE_H_
