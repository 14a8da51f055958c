// The TLS context of the HTTP edge (tls_context.h).
#include "server/tls_context.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include <openssl/err.h>
#include <openssl/x509.h>

namespace runnel::server {

namespace {

// The protocols offered by ALPN, in our order of preference (RFC 7301 wire format).
constexpr unsigned char kAlpnH2[] = "\x02h2\x08http/1.1";
constexpr unsigned char kAlpnHttp11[] = "\x08http/1.1";

}  // namespace

Result<std::unique_ptr<ssl::context>> MakeTlsContext(const std::string& cert_file,
                                                     const std::string& key_file) {
  for (const auto& [what, file] : {std::pair{"certificate", &cert_file}, {"key", &key_file}}) {
    std::error_code fs_ec;
    if (!std::filesystem::is_regular_file(*file, fs_ec)) {
      return Status::InvalidArgument(std::string("TLS ") + what + " file '" + *file +
                                     "' does not exist or is not a regular file");
    }
  }
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::single_dh_use,
                   ec);
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    return Status::InvalidArgument("cannot load the TLS certificate chain from '" + cert_file +
                                   "' (PEM expected): " + ec.message());
  }
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec && ec.category() == net::error::get_ssl_category() &&
      ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH) {
    return Status::InvalidArgument("the TLS private key '" + key_file +
                                   "' does not match the certificate '" + cert_file + "'");
  }
  if (ec) {
    return Status::InvalidArgument("cannot load the TLS private key from '" + key_file +
                                   "' (PEM expected): " + ec.message());
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return Status::InvalidArgument("the TLS private key '" + key_file +
                                   "' does not match the certificate '" + cert_file + "'");
  }
  return ctx;
}

void OfferAlpn(ssl::context* ctx, bool http2) {
  SSL_CTX_set_alpn_select_cb(
      ctx->native_handle(),
      [](SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
         unsigned int inlen, void* arg) -> int {
        const bool h2 = arg != nullptr;
        const unsigned char* ours = h2 ? kAlpnH2 : kAlpnHttp11;
        const unsigned int ours_len = h2 ? sizeof(kAlpnH2) - 1 : sizeof(kAlpnHttp11) - 1;
        unsigned char* chosen = nullptr;
        if (SSL_select_next_proto(&chosen, outlen, ours, ours_len, in, inlen) !=
            OPENSSL_NPN_NEGOTIATED) {
          return SSL_TLSEXT_ERR_NOACK;
        }
        *out = chosen;
        return SSL_TLSEXT_ERR_OK;
      },
      http2 ? ctx : nullptr);
}

}  // namespace runnel::server
