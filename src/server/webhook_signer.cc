#include "server/webhook_signer.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace runnel::server {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Writes `bytes` to `path` with mode 0600: a temporary file, fsync, rename, fsync of the folder.
Status WriteSecretFile(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError(Errno("cannot create", tmp));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = Status::IOError(Errno("cannot write", tmp));
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd, 0600) != 0 || ::fsync(fd) != 0) {
    Status s = Status::IOError(Errno("cannot sync", tmp));
    ::close(fd);
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError(Errno("cannot rename to", path));
  }
  std::string dir =
      path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/'));
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::OK();
}

}  // namespace

std::string Base64UrlEncode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == bytes.size()) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
  } else if (i + 2 == bytes.size()) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
  }
  return out;
}

std::optional<std::string> Base64UrlDecode(std::string_view text) {
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const char* p = std::strchr(kAlphabet, c);
    if (c == '\0' || p == nullptr) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(p - kAlphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

struct WebhookSigner::Key {
  EVP_PKEY* pkey = nullptr;
  ~Key() { EVP_PKEY_free(pkey); }
};

Result<std::unique_ptr<WebhookSigner>> WebhookSigner::LoadOrCreate(const std::string& key_path) {
  auto key = std::make_unique<Key>();
  bool exists = false;
  if (!key_path.empty()) {
    struct stat st;
    exists = ::stat(key_path.c_str(), &st) == 0;
  }
  if (exists) {
    std::ifstream in(key_path, std::ios::binary);
    if (!in) return Status::IOError(Errno("cannot read", key_path));
    std::stringstream text;
    text << in.rdbuf();
    std::string pem = text.str();
    BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
    key->pkey = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    if (key->pkey == nullptr || EVP_PKEY_id(key->pkey) != EVP_PKEY_ED25519) {
      return Status::Corruption(key_path + " does not hold an Ed25519 private key (PKCS#8 PEM)");
    }
  } else {
    EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
    bool ok =
        ctx != nullptr && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_keygen(ctx, &key->pkey) == 1;
    EVP_PKEY_CTX_free(ctx);
    if (!ok) return Status::Internal("cannot generate an Ed25519 key");
    if (!key_path.empty()) {
      BIO* bio = BIO_new(BIO_s_mem());
      PEM_write_bio_PrivateKey(bio, key->pkey, nullptr, nullptr, 0, nullptr, nullptr);
      char* data = nullptr;
      long len = BIO_get_mem_data(bio, &data);
      std::string pem(data, static_cast<size_t>(len));
      BIO_free(bio);
      Status written = WriteSecretFile(key_path, pem);
      OPENSSL_cleanse(pem.data(), pem.size());
      RUNNEL_RETURN_IF_ERROR(written);
    }
  }
  auto signer = std::unique_ptr<WebhookSigner>(new WebhookSigner(std::move(key)));
  return signer;
}

WebhookSigner::WebhookSigner(std::unique_ptr<Key> key) : key_(std::move(key)) {
  unsigned char raw[32];
  size_t len = sizeof(raw);
  EVP_PKEY_get_raw_public_key(key_->pkey, raw, &len);
  public_key_.assign(reinterpret_cast<char*>(raw), len);
  // RFC 7638: the required members in lexicographic order, no whitespace.
  std::string canonical =
      R"({"crv":"Ed25519","kty":"OKP","x":")" + Base64UrlEncode(public_key_) + "\"}";
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(canonical.data()), canonical.size(), digest);
  kid_ = "ds_" + Base64UrlEncode(std::string_view(reinterpret_cast<char*>(digest), sizeof(digest)));
}

WebhookSigner::~WebhookSigner() = default;

std::string WebhookSigner::JwksJson() const {
  nlohmann::json key = {{"kty", "OKP"}, {"crv", "Ed25519"}, {"kid", kid_},
                        {"use", "sig"}, {"alg", "EdDSA"},   {"x", Base64UrlEncode(public_key_)}};
  return nlohmann::json{{"keys", nlohmann::json::array({key})}}.dump();
}

std::string WebhookSigner::Sign(std::string_view message) const {
  unsigned char sig[64];
  size_t len = sizeof(sig);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr && EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, key_->pkey) == 1 &&
            EVP_DigestSign(ctx, sig, &len, reinterpret_cast<const unsigned char*>(message.data()),
                           message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) std::abort();  // Ed25519 signing cannot fail with a valid key and buffer.
  return std::string(reinterpret_cast<char*>(sig), len);
}

std::string WebhookSigner::SignatureHeader(uint64_t unix_seconds, std::string_view body) const {
  std::string t = std::to_string(unix_seconds);
  std::string message = t + "." + std::string(body);
  return "t=" + t + ",kid=" + kid_ + ",ed25519=" + Base64UrlEncode(Sign(message));
}

namespace {
std::string Mac(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return std::string(reinterpret_cast<char*>(mac), len);
}
}  // namespace

std::string NewTokenKey() {
  std::string key(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), 32) != 1) {
    // Without randomness no token could be trusted; refuse to run rather than mint weak ones.
    std::abort();
  }
  return key;
}

std::string MintToken(std::string_view key, std::string_view claims) {
  std::string encoded = Base64UrlEncode(claims);
  return encoded + "." + Base64UrlEncode(Mac(key, encoded));
}

std::optional<std::string> VerifyToken(std::string_view key, std::string_view token) {
  if (key.empty()) return std::nullopt;
  size_t dot = token.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  std::string_view encoded = token.substr(0, dot);
  auto mac = Base64UrlDecode(token.substr(dot + 1));
  std::string expected = Mac(key, encoded);
  if (!mac || mac->size() != expected.size() ||
      CRYPTO_memcmp(mac->data(), expected.data(), expected.size()) != 0) {
    return std::nullopt;
  }
  return Base64UrlDecode(encoded);
}

}  // namespace runnel::server
