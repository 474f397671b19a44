// The HTTP server's TLS context (Asio over OpenSSL), built from the
// credentials `tqserve serve` loaded (server/tls/tls_credentials.h).
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <memory>

#include "server/tls/tls_credentials.h"

namespace tq::http {

/// A server context for `tls` (which must be enabled()): TLS 1.2 and 1.3
/// only, the certificate chain and key from memory; with a client CA, peers
/// must present a certificate it signed (the handshake fails otherwise).
/// Thread-safe once built (connections share it read-only). Throws tq::Error
/// when OpenSSL refuses the credentials.
std::unique_ptr<boost::asio::ssl::context> MakeServerTlsContext(const tls::TlsCredentials& tls);

}  // namespace tq::http
