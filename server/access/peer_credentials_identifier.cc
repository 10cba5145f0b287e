#include "server/access/peer_credentials_identifier.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/base/text_escape.h"

namespace conveyor::server {

PeerCredentialsIdentifier::PeerCredentialsIdentifier(const UnixConnections* connections,
                                                     std::string unix_path,
                                                     std::unique_ptr<ClientIdentifier> others)
    : connections_(connections), unix_path_(std::move(unix_path)), others_(std::move(others)) {}

std::optional<absl::StatusOr<ClientIdentity>> PeerCredentialsIdentifier::IdentifyFdPeer(
    const std::string& peer) const {
  absl::string_view rest = peer;
  if (!absl::ConsumePrefix(&rest, "fd:")) return std::nullopt;
  int fd = -1;
  std::optional<UnixConnections::Connection> c;
  if (absl::SimpleAtoi(rest, &fd) && fd >= 0) c = connections_->Find(fd);
  if (!c) {
    return absl::StatusOr<ClientIdentity>(absl::UnauthenticatedError(absl::StrCat(
        "the daemon has no credentials for connection ", EscapeText(peer, kClientStringCap))));
  }
  ClientIdentity id;
  id.via = ClientIdentity::Via::kUnix;
  id.peer = absl::StrCat("unix:", unix_path_);
  id.credentials = c->credentials;
  id.is_operator = c->is_operator;
  return absl::StatusOr<ClientIdentity>(std::move(id));
}

absl::StatusOr<ClientIdentity> PeerCredentialsIdentifier::Identify(
    const grpc::ServerContextBase& context) const {
  std::optional<absl::StatusOr<ClientIdentity>> unix_client = IdentifyFdPeer(context.peer());
  if (unix_client) return *std::move(unix_client);
  return others_->Identify(context);
}

}  // namespace conveyor::server
