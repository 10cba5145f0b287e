#include "server/access/identity.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/text_escape.h"

namespace conveyor::server {

ClientIdentity ClientIdentity::FromPeer(std::string peer) {
  ClientIdentity c;
  c.via = absl::StartsWith(peer, "unix:") ? Via::kUnix : Via::kTcp;
  c.peer = std::move(peer);
  return c;
}

bool ClientIdentity::MayOpen(const std::string& pipeline) const {
  return !allowed_pipelines.has_value() || allowed_pipelines->count(pipeline) > 0;
}

std::string ClientIdentity::LimitKey() const {
  if (!principal.empty()) return absl::StrCat("principal:", principal);
  if (credentials) return absl::StrCat("uid:", credentials->uid);
  // "ipv4:10.0.0.1:5000" -> "ipv4:10.0.0.1"; "ipv6:[::1]:5000" -> "ipv6:[::1]".
  const size_t colon = peer.rfind(':');
  const size_t scheme = peer.find(':');
  const std::string host =
      (colon != std::string::npos && colon != scheme) ? peer.substr(0, colon) : peer;
  return absl::StrCat("host:", host);
}

bool ClientIdentity::SeesStreamsOf(const ClientIdentity& owner) const {
  return is_operator || LimitKey() == owner.LimitKey();
}

std::string ClientIdentity::Describe() const {
  std::vector<std::string> known;
  if (credentials) {
    known.push_back(absl::StrCat("pid ", credentials->pid, ", uid ", credentials->uid, ", gid ",
                                 credentials->gid));
  }
  if (!principal.empty()) {
    known.push_back(absl::StrCat("as '", EscapeText(principal, kClientStringCap), "'"));
  }
  const std::string who = EscapeText(peer, kClientStringCap);
  if (known.empty()) return who;
  return absl::StrCat(who, " (", absl::StrJoin(known, "; "), ")");
}

}  // namespace conveyor::server
