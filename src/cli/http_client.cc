#include "cli/http_client.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

namespace runnel::cli {

namespace {

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

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
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Buffered reads from a socket.
class Reader {
 public:
  explicit Reader(int fd) : fd_(fd) {}
  bool Fill() {
    char chunk[65536];
    ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
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
  int fd_;
  std::string buffer_;
};

}  // namespace

Result<HttpClient> HttpClient::Create(const std::string& base_url,
                                      const std::string& bearer_token) {
  if (bearer_token.find_first_of("\r\n") != std::string::npos) {
    return Status::InvalidArgument("the token must be one line");
  }
  constexpr std::string_view kScheme = "http://";
  if (base_url.rfind(kScheme, 0) != 0) {
    return Status::InvalidArgument("the server URL must start with http:// (got '" + base_url +
                                   "')");
  }
  std::string rest = base_url.substr(kScheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) {
    return Status::InvalidArgument("the server URL must not have a path: '" + base_url + "'");
  }
  std::string host = rest;
  std::string digits;
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos) return Status::InvalidArgument("bad host in '" + base_url + "'");
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
  uint16_t port = 80;
  if (!digits.empty()) {
    if (digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string::npos ||
        std::stoul(digits) > 65535) {
      return Status::InvalidArgument("bad port in '" + base_url + "'");
    }
    port = static_cast<uint16_t>(std::stoul(digits));
  }
  if (host.empty()) return Status::InvalidArgument("no host in '" + base_url + "'");
  HttpClient client(kScheme.data() + rest, host, port);
  client.bearer_token_ = bearer_token;
  return client;
}

Result<ClientResponse> HttpClient::Send(
    const std::string& method, const std::string& target,
    const std::vector<std::pair<std::string, std::string>>& headers,
    const std::string& body) const {
  RUNNEL_ASSIGN_OR_RETURN(int fd, Connect(host_, port_));
  Socket socket(fd);
  std::string request = method + " " + target + " HTTP/1.1\r\nHost: " + host_ + ":" +
                        std::to_string(port_) + "\r\nConnection: close\r\n";
  for (const auto& [name, value] : headers) request += name + ": " + value + "\r\n";
  if (!bearer_token_.empty()) request += "Authorization: Bearer " + bearer_token_ + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") {
    request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n";
  request += body;
  if (!SendAll(fd, request)) return Status::Unavailable("connection lost while sending");

  Reader reader(fd);
  ClientResponse response;
  std::string line;
  if (!reader.ReadLine(&line) || line.size() < 12 || line.rfind("HTTP/1.", 0) != 0) {
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
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace runnel::cli
