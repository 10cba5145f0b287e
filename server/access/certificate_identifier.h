// CertificateIdentifier: the client certificate of a TLS connection as an
// identity. When gRPC verified a client certificate (listen.tls.client_ca),
// the certificate's subject common name becomes the client's principal.
// Certificates authenticate and do not limit pipelines; a bearer token sent
// as well (server/access/token_identifier.h, wrapping this one) replaces the
// principal with the token's name and limits the client to its pipelines.
//
// Thread-safety: immutable; Identify may run concurrently.
#pragma once

#include <memory>

#include "server/access/identifier.h"

namespace conveyor::server {

class CertificateIdentifier final : public ClientIdentifier {
 public:
  explicit CertificateIdentifier(std::unique_ptr<ClientIdentifier> inner)
      : inner_(std::move(inner)) {}

  absl::StatusOr<ClientIdentity> Identify(const grpc::ServerContextBase& context) const override;

 private:
  const std::unique_ptr<ClientIdentifier> inner_;
};

}  // namespace conveyor::server
