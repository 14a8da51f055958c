#include "core/token_store.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

namespace runnel {
namespace {

constexpr std::string_view kPrefix = "rnl_";
constexpr size_t kIdBytes = 6;       // 12 hex digits
constexpr size_t kSecretBytes = 32;  // 256 bits

std::string Hex(const unsigned char* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[data[i] >> 4];
    out[2 * i + 1] = digits[data[i] & 15];
  }
  return out;
}

std::string Base64Url(const unsigned char* data, size_t n) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    acc = (acc << 8) | data[i];
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(alphabet[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(alphabet[(acc << (6 - bits)) & 63]);
  return out;
}

std::string Sha256Hex(std::string_view text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  return Hex(digest, sizeof(digest));
}

std::string PercentEncode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c <= ' ' || c == '%' || c >= 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = HexValue(s[i + 1]);
    const int lo = HexValue(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

std::optional<uint64_t> ParseU64(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

Status Errno(std::string_view what, const std::string& path) {
  return Status::IOError(std::string(what) + " " + path + ": " + std::strerror(errno));
}

}  // namespace

Status ValidateTenantId(std::string_view tenant) {
  if (tenant.empty() || tenant.size() > 128) {
    return Status::InvalidArgument("tenant id must be 1 to 128 characters");
  }
  // The token file writes "-" for "no tenant" (a platform token).
  if (tenant == "-") return Status::InvalidArgument("tenant id '-' is reserved");
  for (char c : tenant) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Status::InvalidArgument(
          "tenant id may contain only letters, digits, '.', '_' and '-'");
    }
  }
  return Status::OK();
}

Result<std::unique_ptr<TokenStore>> TokenStore::Open(std::string path, Clock* clock) {
  std::unique_ptr<TokenStore> store(new TokenStore(std::move(path), clock ? clock : Clock::Real()));
  RUNNEL_RETURN_IF_ERROR(store->Load());
  return store;
}

Result<std::vector<StoredToken>> ParseTokenFile(std::string_view text, std::string_view origin) {
  std::vector<StoredToken> out;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string line(text.substr(pos, eol - pos));
    pos = eol + 1;
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string version, id, hash, tenant, cross, expires, created, note, extra;
    fields >> version >> id >> hash >> tenant >> cross >> expires >> created >> note >> extra;
    auto bad = [&](const char* why) {
      return Status::Corruption("token file " + std::string(origin) + " line " +
                                std::to_string(line_no) + ": " + why);
    };
    auto all_hex = [](const std::string& s) {
      return std::all_of(s.begin(), s.end(), [](char c) { return HexValue(c) >= 0; });
    };
    if (version != "v1") return bad("unknown version (expected v1)");
    if (id.size() != kIdBytes * 2 || hash.size() != 64 || !all_hex(id) || !all_hex(hash)) {
      return bad("malformed id or hash");
    }
    if (!extra.empty()) return bad("trailing fields");
    StoredToken t;
    t.info.id = id;
    t.hash_hex = hash;
    if (tenant != "-") {
      if (!ValidateTenantId(tenant).ok()) return bad("malformed tenant");
      t.info.grant.tenant = tenant;
    }
    if (cross != "0" && cross != "1") return bad("cross-tenant flag must be 0 or 1");
    t.info.grant.cross_tenant = cross == "1";
    if (expires != "-") {
      auto v = ParseU64(expires);
      if (!v) return bad("malformed expiry");
      t.info.grant.expires_at_ms = *v;
    }
    auto c = ParseU64(created);
    if (!c) return bad("malformed creation time");
    t.info.created_at_ms = *c;
    auto n = PercentDecode(note);
    if (!n) return bad("malformed note");
    t.info.grant.note = *n;
    out.push_back(std::move(t));
  }
  return out;
}

Status TokenStore::Load() {
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec)) {
    return Status::IOError("cannot read token file '" + path_ + "': it is a directory");
  }
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return Status::OK();
    return Errno("cannot read token file", path_);
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  RUNNEL_ASSIGN_OR_RETURN(auto tokens, ParseTokenFile(text, path_));
  WriterLock lock(mu_);  // Open's store is not shared yet; taken for the analysis
  for (StoredToken& t : tokens) {
    const std::string id = t.info.id;
    entries_[id] = std::move(t);
  }
  return Status::OK();
}

Status TokenStore::Persist(const std::map<std::string, StoredToken>& entries) const {
  std::string text =
      "# runnel tokens: only hashes are stored. Format: docs in core/token_store.h\n";
  for (const auto& [id, e] : entries) {
    const TokenGrant& g = e.info.grant;
    text += "v1 " + id + " " + e.hash_hex + " " + (g.tenant ? *g.tenant : "-") + " " +
            (g.cross_tenant ? "1" : "0") + " " +
            (g.expires_at_ms ? std::to_string(*g.expires_at_ms) : "-") + " " +
            std::to_string(e.info.created_at_ms) + " " + PercentEncode(g.note) + "\n";
  }
  const std::string tmp = path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", tmp);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = Errno("cannot write", tmp);
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status s = Errno("cannot sync", tmp);
    ::close(fd);
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path_.c_str()) != 0) return Errno("cannot rename to", path_);
  const size_t slash = path_.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno("cannot open directory", dir);
  const int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) return Errno("cannot sync directory", dir);
  return Status::OK();
}

Result<std::string> TokenStore::Create(const TokenGrant& grant) {
  if (grant.tenant) RUNNEL_RETURN_IF_ERROR(ValidateTenantId(*grant.tenant));
  unsigned char id_bytes[kIdBytes];
  unsigned char secret[kSecretBytes];
  if (RAND_bytes(id_bytes, sizeof(id_bytes)) != 1 || RAND_bytes(secret, sizeof(secret)) != 1) {
    return Status::Internal("the system random generator failed");
  }
  const std::string id = Hex(id_bytes, sizeof(id_bytes));
  const std::string secret_text = Base64Url(secret, sizeof(secret));
  StoredToken e;
  e.info.id = id;
  e.info.grant = grant;
  e.info.created_at_ms = clock_->NowMs();
  e.hash_hex = Sha256Hex(secret_text);
  WriterLock lock(mu_);
  if (entries_.count(id)) return Status::Internal("token id collision; try again");
  auto next = entries_;
  next[id] = e;
  RUNNEL_RETURN_IF_ERROR(Persist(next));
  entries_ = std::move(next);
  return std::string(kPrefix) + id + "_" + secret_text;
}

Status TokenStore::Revoke(std::string_view id) {
  WriterLock lock(mu_);
  auto it = entries_.find(std::string(id));
  if (it == entries_.end()) return Status::NotFound("no token with id '" + std::string(id) + "'");
  auto next = entries_;
  next.erase(std::string(id));
  RUNNEL_RETURN_IF_ERROR(Persist(next));
  entries_ = std::move(next);
  return Status::OK();
}

std::vector<TokenInfo> TokenStore::List() const {
  ReaderLock lock(mu_);
  std::vector<TokenInfo> out;
  for (const auto& [id, e] : entries_) out.push_back(e.info);
  return out;
}

bool TokenStore::empty() const {
  ReaderLock lock(mu_);
  return entries_.empty();
}

Result<Principal> TokenStore::Authenticate(std::string_view bearer) const {
  // rnl_<12 hex>_<43 base64url>
  const size_t expected = kPrefix.size() + kIdBytes * 2 + 1 + 43;
  if (bearer.size() != expected || bearer.substr(0, kPrefix.size()) != kPrefix ||
      bearer[kPrefix.size() + kIdBytes * 2] != '_') {
    return Status::PermissionDenied("malformed token");
  }
  const std::string id(bearer.substr(kPrefix.size(), kIdBytes * 2));
  const std::string hash = Sha256Hex(bearer.substr(kPrefix.size() + kIdBytes * 2 + 1));
  ReaderLock lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() ||
      CRYPTO_memcmp(it->second.hash_hex.data(), hash.data(), hash.size()) != 0) {
    return Status::PermissionDenied("unknown token");
  }
  const TokenGrant& g = it->second.info.grant;
  if (g.expires_at_ms && clock_->NowMs() >= *g.expires_at_ms) {
    return Status::PermissionDenied("expired token");
  }
  return Principal{g.tenant, g.cross_tenant};
}

}  // namespace runnel
