#include "cli/http_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "server/http_types.h"

namespace runnel::cli {

namespace {

// One connection: a socket, with TLS on top for https.
class Conn {
 public:
  explicit Conn(int fd) : fd_(fd) {}
  ~Conn() {
    if (ssl_ != nullptr) {
      SSL_shutdown(ssl_);
      SSL_free(ssl_);
    }
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // Handshakes as a TLS client, verifying the server's certificate for `host` against `cacert`
  // (a PEM file) or, when empty, the system's trust store.
  Status StartTls(const std::string& host, uint16_t port, const std::string& cacert) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (ctx_ == nullptr) return Status::Internal("cannot create a TLS context");
    SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (cacert.empty()) {
      SSL_CTX_set_default_verify_paths(ctx_);
    } else if (SSL_CTX_load_verify_locations(ctx_, cacert.c_str(), nullptr) != 1) {
      return Status::InvalidArgument("cannot load CA certificates (PEM) from '" + cacert + "'");
    }
    ssl_ = SSL_new(ctx_);
    if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) {
      return Status::Internal("cannot set up a TLS connection");
    }
    unsigned char ip[16];
    if (::inet_pton(AF_INET, host.c_str(), ip) == 1 ||
        ::inet_pton(AF_INET6, host.c_str(), ip) == 1) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl_, host.c_str());
      SSL_set1_host(ssl_, host.c_str());
    }
    if (SSL_connect(ssl_) != 1) {
      long verify = SSL_get_verify_result(ssl_);
      std::string reason;
      if (verify != X509_V_OK) {
        reason = std::string("certificate not trusted: ") + X509_verify_cert_error_string(verify) +
                 (cacert.empty() ? " (pass --cacert FILE for a self-signed server)" : "");
      } else if (unsigned long err = ERR_get_error(); err != 0) {
        char buf[256];
        ERR_error_string_n(err, buf, sizeof(buf));
        reason = buf;
      } else {
        reason = "the connection was closed";
      }
      return Status::Unavailable("TLS handshake with " + host + ":" + std::to_string(port) +
                                 " failed: " + reason);
    }
    return Status::OK();
  }

  // Bytes read (> 0), or 0 at the end of the stream or on an error.
  size_t Read(char* buffer, size_t size) {
    if (ssl_ != nullptr) {
      int n = SSL_read(ssl_, buffer, static_cast<int>(size));
      return n > 0 ? static_cast<size_t>(n) : 0;
    }
    ssize_t n = ::recv(fd_, buffer, size, 0);
    return n > 0 ? static_cast<size_t>(n) : 0;
  }

  bool WriteAll(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      if (ssl_ != nullptr) {
        int n = SSL_write(ssl_, data.data() + sent, static_cast<int>(data.size() - sent));
        if (n <= 0) return false;
        sent += static_cast<size_t>(n);
      } else {
        ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) return false;
        sent += static_cast<size_t>(n);
      }
    }
    return true;
  }

 private:
  int fd_;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
};

// How long one read or write on a connection may wait: 120 s (well above the server's default
// long-poll of 20 s), or RUNNEL_CLIENT_TIMEOUT_MS.
int IoTimeoutMs() {
  static const int ms = [] {
    const char* env = std::getenv("RUNNEL_CLIENT_TIMEOUT_MS");
    const long v = env != nullptr ? std::strtol(env, nullptr, 10) : 0;
    return v > 0 && v <= 86'400'000 ? static_cast<int>(v) : 120'000;
  }();
  return ms;
}

Result<int> Connect(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) return Status::Unavailable("cannot resolve " + host + ": " + gai_strerror(rc));
  int fd = -1;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(result);
  if (fd < 0) {
    return Status::Unavailable("cannot connect to " + host + ":" + service + ": " +
                               std::strerror(errno));
  }
  const timeval tv{IoTimeoutMs() / 1000, (IoTimeoutMs() % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

// Buffered reads from a connection.
class Reader {
 public:
  explicit Reader(Conn* conn) : conn_(conn) {}
  bool Fill() {
    char chunk[65536];
    size_t n = conn_->Read(chunk, sizeof(chunk));
    if (n == 0) return false;
    buffer_.append(chunk, n);
    return true;
  }
  bool ReadLine(std::string* line) {
    size_t pos;
    while ((pos = buffer_.find("\r\n")) == std::string::npos) {
      if (!Fill()) return false;
    }
    *line = buffer_.substr(0, pos);
    buffer_.erase(0, pos + 2);
    return true;
  }
  bool ReadExactly(size_t n, std::string* out) {
    while (buffer_.size() < n) {
      if (!Fill()) return false;
    }
    out->append(buffer_, 0, n);
    buffer_.erase(0, n);
    return true;
  }
  void ReadToEnd(std::string* out) {
    while (Fill()) {
    }
    out->append(buffer_);
    buffer_.clear();
  }

 private:
  Conn* conn_;
  std::string buffer_;
};

}  // namespace

Result<HttpClient> HttpClient::Create(const std::string& base_url, const std::string& bearer_token,
                                      const std::string& cacert) {
  if (bearer_token.find_first_of("\r\n") != std::string::npos) {
    return Status::InvalidArgument("the token must be one line");
  }
  const bool tls = base_url.rfind("https://", 0) == 0;
  const std::string scheme = tls ? "https://" : "http://";
  if (base_url.rfind(scheme, 0) != 0) {
    return Status::InvalidArgument("the server URL must start with http:// or https:// (got '" +
                                   base_url + "')");
  }
  if (!cacert.empty() && !tls) {
    return Status::InvalidArgument("--cacert needs an https:// server URL");
  }
  std::string rest = base_url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) {
    return Status::InvalidArgument("the server URL must not have a path: '" + base_url + "'");
  }
  std::string host = rest;
  std::string digits;
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos)
      return Status::InvalidArgument("bad host in '" + base_url + "'");
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return Status::InvalidArgument("bad host in '" + base_url + "'");
      digits = rest.substr(close + 2);
      if (digits.empty()) return Status::InvalidArgument("bad port in '" + base_url + "'");
    }
  } else if (size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    digits = rest.substr(colon + 1);
    if (digits.empty()) return Status::InvalidArgument("bad port in '" + base_url + "'");
  }
  uint16_t port = tls ? 443 : 80;
  if (!digits.empty()) {
    if (digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string::npos ||
        std::stoul(digits) > 65535) {
      return Status::InvalidArgument("bad port in '" + base_url + "'");
    }
    port = static_cast<uint16_t>(std::stoul(digits));
  }
  if (host.empty()) return Status::InvalidArgument("no host in '" + base_url + "'");
  HttpClient client(scheme + rest, host, port);
  client.bearer_token_ = bearer_token;
  client.tls_ = tls;
  client.cacert_ = cacert;
  return client;
}

Result<ClientResponse> HttpClient::Send(
    const std::string& method, const std::string& target,
    const std::vector<std::pair<std::string, std::string>>& headers,
    const std::string& body) const {
  RUNNEL_ASSIGN_OR_RETURN(int fd, Connect(host_, port_));
  Conn conn(fd);
  if (tls_) RUNNEL_RETURN_IF_ERROR(conn.StartTls(host_, port_, cacert_));
  std::string request = method + " " + target + " HTTP/1.1\r\nHost: " + host_ + ":" +
                        std::to_string(port_) + "\r\nConnection: close\r\n";
  for (const auto& [name, value] : headers) request += name + ": " + value + "\r\n";
  if (!bearer_token_.empty()) request += "Authorization: Bearer " + bearer_token_ + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") {
    request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n";
  request += body;
  // A server that refuses a request early (413 for a body over its limit) answers and closes
  // while the body is still going out: its answer is read even when sending failed.
  const bool sent = conn.WriteAll(request);

  Reader reader(&conn);
  ClientResponse response;
  std::string line;
  errno = 0;
  if (!reader.ReadLine(&line) || line.size() < 12 || line.rfind("HTTP/1.", 0) != 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return Status::Unavailable("no answer from " + base_url_ + " within " +
                                 std::to_string(IoTimeoutMs()) +
                                 " ms (RUNNEL_CLIENT_TIMEOUT_MS sets this)");
    }
    if (!sent) return Status::Unavailable("connection lost while sending");
    return Status::Unavailable("no valid HTTP response from " + base_url_);
  }
  response.status = std::atoi(line.c_str() + 9);
  while (reader.ReadLine(&line) && !line.empty()) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t start = line.find_first_not_of(' ', colon + 1);
    response.headers[name] = start == std::string::npos ? "" : line.substr(start);
  }
  if (method == "HEAD" || response.status == 204 || response.status == 304) return response;
  if (response.Header("transfer-encoding").find("chunked") != std::string::npos) {
    for (;;) {
      if (!reader.ReadLine(&line)) return Status::Unavailable("truncated chunked response");
      size_t size = std::strtoul(line.c_str(), nullptr, 16);
      if (size == 0) break;
      if (!reader.ReadExactly(size, &response.body) || !reader.ReadLine(&line)) {
        return Status::Unavailable("truncated chunked response");
      }
    }
  } else if (std::string length = response.Header("content-length"); !length.empty()) {
    if (!reader.ReadExactly(std::strtoul(length.c_str(), nullptr, 10), &response.body)) {
      return Status::Unavailable("truncated response");
    }
  } else {
    reader.ReadToEnd(&response.body);
  }
  return response;
}

std::string UrlEncode(const std::string& text, bool keep_slash) {
  return server::PercentEncode(text, keep_slash);
}

}  // namespace runnel::cli
