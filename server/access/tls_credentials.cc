#include "server/access/tls_credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

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

// OpenSSL's last error, for messages; clears the queue.
std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

absl::Status Bad(const char* field, const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("field ", field, ": '", path, "': ", why));
}

absl::StatusOr<std::unique_ptr<BIO, BioFree>> OpenFile(const char* field, const std::string& path) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_file(path.c_str(), "r"));
  if (bio == nullptr) {
    ERR_clear_error();
    return Bad(field, path, "cannot be read");
  }
  return bio;
}

}  // namespace

absl::Status CheckTlsFiles(const TlsConfig& tls) {
  ERR_clear_error();
  absl::StatusOr<std::unique_ptr<BIO, BioFree>> cert_bio = OpenFile("listen.tls.cert", tls.cert);
  if (!cert_bio.ok()) return cert_bio.status();
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(cert_bio->get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return Bad("listen.tls.cert", tls.cert,
               absl::StrCat("not a PEM certificate (", OpenSslError(), ")"));
  }
  absl::StatusOr<std::unique_ptr<BIO, BioFree>> key_bio = OpenFile("listen.tls.key", tls.key);
  if (!key_bio.ok()) return key_bio.status();
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(key_bio->get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return Bad("listen.tls.key", tls.key,
               absl::StrCat("not an unencrypted PEM private key (", OpenSslError(), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return Bad("listen.tls.key", tls.key,
               absl::StrCat("is not the key of the certificate '", tls.cert, "'"));
  }
  if (!tls.client_ca.empty()) {
    absl::StatusOr<std::unique_ptr<BIO, BioFree>> ca_bio =
        OpenFile("listen.tls.client_ca", tls.client_ca);
    if (!ca_bio.ok()) return ca_bio.status();
    std::unique_ptr<X509, X509Free> ca(PEM_read_bio_X509(ca_bio->get(), nullptr, nullptr, nullptr));
    if (ca == nullptr) {
      return Bad("listen.tls.client_ca", tls.client_ca,
                 absl::StrCat("holds no PEM certificate (", OpenSslError(), ")"));
    }
  }
  return absl::OkStatus();
}

namespace {
std::string AsnTimeText(const ASN1_TIME* t) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || ASN1_TIME_print(bio.get(), t) != 1) {
    ERR_clear_error();
    return "?";
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n > 0 ? n : 0));
}
}  // namespace

std::string CertificateValidityProblem(const TlsConfig& tls, time_t now) {
  if (tls.cert.empty()) return "";
  std::unique_ptr<BIO, BioFree> bio(BIO_new_file(tls.cert.c_str(), "r"));
  if (bio == nullptr) {
    ERR_clear_error();
    return absl::StrCat("listen.tls.cert '", tls.cert, "' cannot be read");
  }
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    ERR_clear_error();
    return absl::StrCat("listen.tls.cert '", tls.cert, "' holds no PEM certificate");
  }
  const ASN1_TIME* not_before = X509_get0_notBefore(cert.get());
  const ASN1_TIME* not_after = X509_get0_notAfter(cert.get());
  if (X509_cmp_time(not_after, &now) < 0) {
    return absl::StrCat("listen.tls.cert '", tls.cert, "' expired on ", AsnTimeText(not_after),
                        ": TLS clients will refuse it until it is renewed");
  }
  if (X509_cmp_time(not_before, &now) > 0) {
    return absl::StrCat("listen.tls.cert '", tls.cert, "' is not valid before ",
                        AsnTimeText(not_before),
                        ": TLS clients will refuse it until then (is the clock right?)");
  }
  return "";
}

bool WarnIfCertificateNotValid(const TlsConfig& tls, const char* when) {
  const std::string problem = CertificateValidityProblem(tls, ::time(nullptr));
  if (problem.empty()) return false;
  spdlog::warn("{}: {}", when, problem);
  return true;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeTlsServerCredentials(
    const TlsConfig& tls) {
  if (absl::Status st = CheckTlsFiles(tls); !st.ok()) return st;
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      tls.key, tls.cert, tls.client_ca, tls.reload_interval_seconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!tls.client_ca.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(tls.require_client_cert
                                      ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                      : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  std::shared_ptr<grpc::ServerCredentials> creds =
      grpc::experimental::TlsServerCredentials(options);
  if (creds == nullptr) {
    return absl::InternalError("gRPC could not build TLS server credentials from listen.tls");
  }
  return creds;
}

}  // namespace conveyor::server
