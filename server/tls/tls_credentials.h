// TLS certificate, key and client CAs of `tqserve serve` (--ssl-certfile,
// --ssl-keyfile, --ssl-ca-certs), read and checked once at start-up and
// shared by the HTTP and gRPC servers.
#pragma once

#include <string>

namespace tq::tls {

/// The TLS flags as given (paths; empty: not given).
struct TlsFlags {
  std::string certfile;  // --ssl-certfile: PEM certificate chain, leaf first
  std::string keyfile;   // --ssl-keyfile: PEM private key of the leaf certificate
  std::string ca_certs;  // --ssl-ca-certs: PEM CAs; clients must present a certificate they signed
};

/// The PEM texts the servers build their TLS contexts from. Empty
/// cert_chain_pem: TLS off (plaintext HTTP and gRPC).
struct TlsCredentials {
  std::string cert_chain_pem;  // the leaf certificate first, then intermediates
  std::string private_key_pem;
  std::string client_ca_pem;  // non-empty: client certificates are required and verified

  /// True when the servers speak TLS.
  bool enabled() const { return !cert_chain_pem.empty(); }
};

/// Reads the files of `flags` and checks them with OpenSSL: certfile and
/// keyfile both or neither; each file readable and holding PEM a
/// certificate / private key parses from; the key matching the first
/// certificate; ca_certs (optional, only with the other two) holding at least
/// one certificate. Returns empty credentials when no flag is given. Throws
/// tq::Error with one line naming the flag, the file and the problem.
TlsCredentials LoadTlsCredentials(const TlsFlags& flags);

}  // namespace tq::tls
