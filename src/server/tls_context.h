// The TLS side of the HTTP edge's listener: the server's TLS context from PEM files, and the
// protocol choice by ALPN (h2 or http/1.1). Used by HttpServer::Start (http_server.cc).
#ifndef RUNNEL_SERVER_TLS_CONTEXT_H_
#define RUNNEL_SERVER_TLS_CONTEXT_H_

#include <memory>
#include <string>

#include "runnel/status.h"
#include "server/http_net.h"

namespace runnel::server {

// A server TLS context from PEM files; a clear error for a missing, unreadable or mismatched
// certificate or key.
Result<std::unique_ptr<ssl::context>> MakeTlsContext(const std::string& cert_file,
                                                     const std::string& key_file);

// Has the TLS context choose a protocol by ALPN: h2 when the client offers it and `http2`,
// else http/1.1; a client that offers neither goes on without ALPN (HTTP/1.1).
void OfferAlpn(ssl::context* ctx, bool http2);

}  // namespace runnel::server

#endif  // RUNNEL_SERVER_TLS_CONTEXT_H_
