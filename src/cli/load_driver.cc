#include "cli/load_driver.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <sstream>
#include <thread>
#include <utility>

#include "base/mutex.h"
#include "cli/load_internal.h"

namespace runnel::cli::load {

using internal::Client;
using internal::Clock;
using internal::Escape;
using internal::Head;
using internal::SecondsSince;

namespace {

Result<uint64_t> ReadAll(Client& client, const std::string& target) {
  std::string offset = "-1";
  uint64_t total = 0;
  for (int page = 0; page < 1000000; ++page) {
    uint64_t bytes = 0;
    RUNNEL_ASSIGN_OR_RETURN(
        Head h, client.Request("GET", target + "?offset=" + Escape(offset), "", "", &bytes));
    if (h.status == 404) return Status::NotFound("no stream at " + target);
    if (h.status != 200) {
      return Status::Internal("a catch-up read answered HTTP " + std::to_string(h.status));
    }
    total += bytes;
    if (h.next_offset.empty()) return Status::Internal("a read without Stream-Next-Offset");
    offset = h.next_offset;
    if (h.up_to_date || bytes == 0) return total;
  }
  return Status::Internal("a catch-up read did not reach the tail in 1,000,000 pages");
}

}  // namespace

Result<Endpoint> ResolveUrl(std::string_view url, const std::string& cacert) {
  const bool tls = url.starts_with("https://");
  if (!tls && !url.starts_with("http://")) {
    return Status::InvalidArgument("the URL must start with http:// or https:// (got '" +
                                   std::string(url) + "')");
  }
  if (!cacert.empty() && !tls) {
    return Status::InvalidArgument("--cacert needs an https:// server URL");
  }
  url.remove_prefix(tls ? 8 : 7);
  url = url.substr(0, url.find('/'));
  if (url.empty()) return Status::InvalidArgument("the URL has no host");
  std::string host;
  std::string port = tls ? "443" : "80";
  if (url.front() == '[') {
    const size_t close = url.find(']');
    if (close == std::string_view::npos) return Status::InvalidArgument("unclosed [ in the URL");
    host = std::string(url.substr(1, close - 1));
    std::string_view rest = url.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Status::InvalidArgument("junk after ] in the URL");
      port = std::string(rest.substr(1));
    }
  } else {
    const size_t colon = url.rfind(':');
    host = std::string(url.substr(0, colon));
    if (colon != std::string_view::npos) port = std::string(url.substr(colon + 1));
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::atoi(port.c_str()) < 1 || std::atoi(port.c_str()) > 65535) {
    return Status::InvalidArgument("the URL's port must be 1..65535");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Status::Unavailable("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  }
  Endpoint e;
  std::memcpy(&e.addr, found->ai_addr, found->ai_addrlen);
  e.addr_len = found->ai_addrlen;
  ::freeaddrinfo(found);
  e.host_header = std::string(url);
  e.host = host;
  if (tls) {
    // As the other CLI commands (http_client.cc): TLS 1.2 or later, the server's certificate
    // verified against the system's trust store or `cacert`.
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == nullptr) return Status::Internal("cannot create a TLS context");
    e.tls = std::shared_ptr<ssl_ctx_st>(ctx, SSL_CTX_free);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (cacert.empty()) {
      SSL_CTX_set_default_verify_paths(ctx);
    } else if (SSL_CTX_load_verify_locations(ctx, cacert.c_str(), nullptr) != 1) {
      return Status::InvalidArgument("cannot load CA certificates (PEM) from '" + cacert + "'");
    }
  }
  return e;
}

Result<CatchupFigures> RunCatchup(const Endpoint& endpoint, const std::string& target,
                                  const std::string& token, int rounds) {
  if (rounds < 1 || rounds > 1000) return Status::InvalidArgument("rounds must be 1..1000");
  RUNNEL_ASSIGN_OR_RETURN(auto client, Client::Connect(endpoint, token));
  RUNNEL_RETURN_IF_ERROR(ReadAll(*client, target).status());  // warm-up
  const auto t0 = Clock::now();
  CatchupFigures f;
  for (int i = 0; i < rounds; ++i) {
    RUNNEL_ASSIGN_OR_RETURN(uint64_t bytes, ReadAll(*client, target));
    f.bytes += bytes;
  }
  f.seconds = SecondsSince(t0);
  return f;
}

}  // namespace runnel::cli::load
