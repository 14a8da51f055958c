// A small blocking HTTP/1.1 client over POSIX sockets for the CLI: http://, and https:// with
// OpenSSL (the server's certificate is verified against the system's trust store, or a given
// PEM file for a self-signed server; TLS 1.2 or later). One
// connection per request; responses are read by Content-Length, chunked encoding or until
// close.
//
// Thread-safety: an HttpClient is used by one thread at a time.
#ifndef RUNNEL_CLI_HTTP_CLIENT_H_
#define RUNNEL_CLI_HTTP_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runnel/status.h"

namespace runnel::cli {

struct ClientResponse {
  int status = 0;
  // Lower-cased names.
  std::map<std::string, std::string> headers;
  std::string body;

  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class HttpClient {
 public:
  // `base_url` like "http://127.0.0.1:4437" or "https://host:4437"; kInvalidArgument for any
  // other form. A non-empty `bearer_token` is sent as `Authorization: Bearer <token>` on every
  // request. A non-empty `cacert` (https only) is the PEM file of the certificates to trust
  // instead of the system's.
  static Result<HttpClient> Create(const std::string& base_url,
                                   const std::string& bearer_token = "",
                                   const std::string& cacert = "");

  // Sends one request. kUnavailable when the server cannot be reached or the TLS handshake
  // fails (an untrusted certificate included).
  Result<ClientResponse> Send(const std::string& method, const std::string& target,
                              const std::vector<std::pair<std::string, std::string>>& headers,
                              const std::string& body = "") const;

  const std::string& base_url() const { return base_url_; }

 private:
  HttpClient(std::string base_url, std::string host, uint16_t port)
      : base_url_(std::move(base_url)), host_(std::move(host)), port_(port) {}
  std::string base_url_;
  std::string host_;
  uint16_t port_;
  std::string bearer_token_;
  bool tls_ = false;
  std::string cacert_;
};

// Percent-encodes a stream name for a URL path ('/' kept) or a query value ('/' encoded).
std::string UrlEncode(const std::string& text, bool keep_slash);

}  // namespace runnel::cli

#endif  // RUNNEL_CLI_HTTP_CLIENT_H_
