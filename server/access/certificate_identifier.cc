#include "server/access/certificate_identifier.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>

namespace conveyor::server {

absl::StatusOr<ClientIdentity> CertificateIdentifier::Identify(
    const grpc::ServerContextBase& context) const {
  absl::StatusOr<ClientIdentity> identity = inner_->Identify(context);
  if (!identity.ok() || identity->is_unix()) return identity;
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return identity;
  for (const grpc::string_ref& cn : auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
    identity->principal.assign(cn.data(), cn.size());
    break;
  }
  return identity;
}

}  // namespace conveyor::server
