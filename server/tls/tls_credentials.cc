// Reading and checking the TLS files (see tls_credentials.h).
#include "server/tls/tls_credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "engine/common/error.h"

namespace tq::tls {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;

// OpenSSL's reason for the last failure on this thread ("" when none), and
// clears the queue.
std::string LastOpenSslError() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "";
  const char* reason = ERR_reason_error_string(code);
  return reason != nullptr ? std::string(": ") + reason : "";
}

// A passphrase callback that gives none: an encrypted key fails to load
// instead of OpenSSL prompting on the terminal.
int NoPassphrase(char*, int, int, void*) {
  return 0;
}

std::string ReadFile(const std::string& flag, const std::string& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(flag + " " + path + ": cannot read the file" +
                (errno != 0 ? std::string(" (") + std::strerror(errno) + ")" : ""));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(flag + " " + path + ": cannot read the file");
  if (text.str().empty()) throw Error(flag + " " + path + ": the file is empty");
  return text.str();
}

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The certificates of a PEM text, in order; throws when there is none.
std::vector<X509Ptr> ParseCertificates(const std::string& flag, const std::string& path,
                                       const std::string& pem) {
  ERR_clear_error();
  BioPtr bio = MemoryBio(pem);
  std::vector<X509Ptr> certs;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    certs.emplace_back(cert);
  }
  ERR_clear_error();  // the loop ends on "no start line" after the last one
  if (certs.empty()) {
    throw Error(flag + " " + path +
                ": no PEM certificate in the file (-----BEGIN CERTIFICATE-----)");
  }
  return certs;
}

}  // namespace

TlsCredentials LoadTlsCredentials(const TlsFlags& flags) {
  if (flags.certfile.empty() && flags.keyfile.empty()) {
    if (!flags.ca_certs.empty()) {
      throw Error(
          "--ssl-ca-certs needs --ssl-certfile and --ssl-keyfile (TLS is off without them)");
    }
    return {};
  }
  if (flags.certfile.empty() || flags.keyfile.empty()) {
    throw Error(std::string("--ssl-certfile and --ssl-keyfile go together: ") +
                (flags.certfile.empty() ? "--ssl-keyfile" : "--ssl-certfile") +
                " was given without " +
                (flags.certfile.empty() ? "--ssl-certfile" : "--ssl-keyfile"));
  }
  TlsCredentials out;
  out.cert_chain_pem = ReadFile("--ssl-certfile", flags.certfile);
  out.private_key_pem = ReadFile("--ssl-keyfile", flags.keyfile);
  const std::vector<X509Ptr> chain =
      ParseCertificates("--ssl-certfile", flags.certfile, out.cert_chain_pem);

  ERR_clear_error();
  BioPtr key_bio = MemoryBio(out.private_key_pem);
  const KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  if (!key) {
    throw Error("--ssl-keyfile " + flags.keyfile +
                ": not an unencrypted PEM private key (-----BEGIN PRIVATE KEY-----)" +
                LastOpenSslError());
  }
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    ERR_clear_error();
    throw Error("--ssl-keyfile " + flags.keyfile + ": the key does not match the certificate of " +
                "--ssl-certfile " + flags.certfile);
  }
  if (!flags.ca_certs.empty()) {
    out.client_ca_pem = ReadFile("--ssl-ca-certs", flags.ca_certs);
    ParseCertificates("--ssl-ca-certs", flags.ca_certs, out.client_ca_pem);
  }
  return out;
}

}  // namespace tq::tls
