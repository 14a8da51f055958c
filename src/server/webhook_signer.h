// WebhookSigner: the server's Ed25519 webhook signing key (PROTOCOL.md 6.5 and 7.1), and the
// HMAC tokens of subscription callbacks and claims (PROTOCOL.md 12.9).
//
// The Ed25519 key is persisted as a PKCS#8 PEM file (mode 0600, written to a temporary file,
// fsynced and renamed into place) so webhook receivers keep trusting it across restarts; with
// an empty path the key is process-local. `kid` is "ds_" plus the RFC 7638 JWK thumbprint of
// the public key (SHA-256, base64url), so it is stable for the lifetime of the key.
//
// Token keys are not held here: the subscription service keeps one random key per deployment in
// its state stream (subscription_service.h), so every node over one store accepts the tokens
// any node minted, across restarts, as long as the wake they name is current.
//
// Thread-safety: immutable after LoadOrCreate; every method may be called concurrently.
#ifndef RUNNEL_SERVER_WEBHOOK_SIGNER_H_
#define RUNNEL_SERVER_WEBHOOK_SIGNER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "runnel/status.h"

namespace runnel::server {

// Unpadded base64url (RFC 4648 section 5).
std::string Base64UrlEncode(std::string_view bytes);
// nullopt on a character outside the alphabet or an impossible length. Padding is refused.
std::optional<std::string> Base64UrlDecode(std::string_view text);

class WebhookSigner {
 public:
  // Loads the key at `key_path`, or creates one there when the file does not exist. An empty
  // path creates a process-local key. kIOError when the file cannot be read or written,
  // kCorruption when it does not hold an Ed25519 private key.
  static Result<std::unique_ptr<WebhookSigner>> LoadOrCreate(const std::string& key_path);
  ~WebhookSigner();
  WebhookSigner(const WebhookSigner&) = delete;
  WebhookSigner& operator=(const WebhookSigner&) = delete;

  const std::string& kid() const { return kid_; }
  // The 32-byte raw public key.
  const std::string& public_key() const { return public_key_; }
  // The JWK Set document: {"keys":[{"kty":"OKP","crv":"Ed25519","kid",..,"use":"sig",
  // "alg":"EdDSA","x":..}]}.
  std::string JwksJson() const;
  // The 64-byte Ed25519 signature of `message`.
  std::string Sign(std::string_view message) const;
  // "t=<unix_seconds>,kid=<kid>,ed25519=<base64url signature of "<t>.<body>">".
  std::string SignatureHeader(uint64_t unix_seconds, std::string_view body) const;

 private:
  struct Key;
  explicit WebhookSigner(std::unique_ptr<Key> key);
  std::unique_ptr<Key> key_;
  std::string public_key_;
  std::string kid_;
};

// A new random token key (32 bytes). Aborts when the system has no randomness: no token could
// be trusted then.
std::string NewTokenKey();
// HMAC-SHA256 tokens under `key`: "<base64url claims>.<base64url mac>". Verify returns the claims
// when the MAC matches (constant-time comparison), else nullopt.
std::string MintToken(std::string_view key, std::string_view claims);
std::optional<std::string> VerifyToken(std::string_view key, std::string_view token);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_WEBHOOK_SIGNER_H_
