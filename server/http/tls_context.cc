// The HTTP server's TLS context (see tls_context.h).
#include "server/http/tls_context.h"

#include <openssl/ssl.h>

#include <boost/system/system_error.hpp>

#include "engine/common/error.h"

namespace tq::http {

std::unique_ptr<boost::asio::ssl::context> MakeServerTlsContext(const tls::TlsCredentials& tls) {
  namespace ssl = boost::asio::ssl;
  auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
  try {
    context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                         ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                         ssl::context::no_tlsv1_1 | ssl::context::single_dh_use |
                         ssl::context::no_compression);
    context->use_certificate_chain(boost::asio::buffer(tls.cert_chain_pem));
    context->use_private_key(boost::asio::buffer(tls.private_key_pem), ssl::context::pem);
    if (!tls.client_ca_pem.empty()) {
      context->add_certificate_authority(boost::asio::buffer(tls.client_ca_pem));
      context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    // Resumed sessions (clients cache them) need a session id context once
    // peers are verified; without one OpenSSL fails the resumption with an
    // internal error.
    static constexpr unsigned char kSessionContext[] = "tqserve-http";
    SSL_CTX_set_session_id_context(context->native_handle(), kSessionContext,
                                   sizeof(kSessionContext) - 1);
  } catch (const boost::system::system_error& e) {
    throw Error(std::string("TLS (--ssl-certfile/--ssl-keyfile): ") + e.what());
  }
  return context;
}

}  // namespace tq::http
