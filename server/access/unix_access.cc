#include "server/access/unix_access.h"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/posix_error.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"

namespace conveyor::server {

absl::StatusOr<UnixPeer> ReadUnixPeer(int fd) {
  UnixPeer peer;
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return PosixError("getsockopt SO_PEERCRED", errno);
  }
  peer.credentials = PeerCredentials{cred.pid, cred.uid, cred.gid};
  // The peer's supplementary groups (Linux 4.13+). Without them only the
  // primary gid can match allowed_gids.
  std::vector<gid_t> groups(16);
  while (true) {
    socklen_t bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
      groups.resize(bytes / sizeof(gid_t));
      break;
    }
    if (errno == ERANGE && bytes > groups.size() * sizeof(gid_t) && bytes <= (1u << 20)) {
      groups.resize(bytes / sizeof(gid_t));
      continue;
    }
    groups.clear();  // ENOPROTOOPT on old kernels
    break;
  }
  peer.groups = std::move(groups);
  return peer;
}

UnixAccessPolicy::UnixAccessPolicy(std::set<uid_t> allowed_uids, std::set<gid_t> allowed_gids,
                                   std::set<uid_t> operator_uids, std::set<gid_t> operator_gids,
                                   uid_t daemon_uid)
    : allowed_uids_(std::move(allowed_uids)),
      allowed_gids_(std::move(allowed_gids)),
      operator_uids_(std::move(operator_uids)),
      operator_gids_(std::move(operator_gids)),
      daemon_uid_(daemon_uid) {}

bool UnixAccessPolicy::Matches(const UnixPeer& peer, const std::set<uid_t>& uids,
                               const std::set<gid_t>& gids) {
  if (uids.count(peer.credentials.uid) > 0) return true;
  if (gids.count(peer.credentials.gid) > 0) return true;
  for (gid_t g : peer.groups) {
    if (gids.count(g) > 0) return true;
  }
  return false;
}

bool UnixAccessPolicy::Allows(const UnixPeer& peer) const {
  if (IsOperator(peer)) return true;
  if (allowed_uids_.empty() && allowed_gids_.empty()) return true;
  return Matches(peer, allowed_uids_, allowed_gids_);
}

bool UnixAccessPolicy::IsOperator(const UnixPeer& peer) const {
  const uid_t uid = peer.credentials.uid;
  if (uid == 0 || uid == daemon_uid_) return true;
  return Matches(peer, operator_uids_, operator_gids_);
}

std::string UnixAccessPolicy::Describe() const {
  if (allowed_uids_.empty() && allowed_gids_.empty()) return "anyone the socket mode admits";
  return absl::StrCat("uids [", absl::StrJoin(allowed_uids_, ", "), "], gids [",
                      absl::StrJoin(allowed_gids_, ", "), "], root and uid ", daemon_uid_);
}

namespace {

// A number, or a name looked up with `lookup` (getpwnam_r / getgrnam_r
// through the callers below).
template <typename Id, typename Lookup>
absl::Status ResolveIds(const std::vector<std::string>& names, const std::string& field,
                        const char* kind, Lookup lookup, std::set<Id>* out) {
  for (const std::string& name : names) {
    uint64_t n = 0;
    if (absl::SimpleAtoi(name, &n)) {
      if (n >= static_cast<uint64_t>(UINT_MAX)) {
        return absl::InvalidArgumentError(
            absl::StrCat("field ", field, ": ", kind, " id ", name, " is out of range"));
      }
      out->insert(static_cast<Id>(n));
      continue;
    }
    absl::StatusOr<Id> id = lookup(name);
    if (!id.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("field ", field, ": ", id.status().message()));
    }
    out->insert(*id);
  }
  return absl::OkStatus();
}

absl::StatusOr<uid_t> LookUpUser(const std::string& name) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  const int e = ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
  if (found == nullptr) {
    if (e != 0)
      return PosixError(
          absl::StrCat("cannot look up user '", EscapeText(name, kClientStringCap), "'"), e);
    return absl::NotFoundError(
        absl::StrCat("no user named '", EscapeText(name, kClientStringCap), "'"));
  }
  return pw.pw_uid;
}

absl::StatusOr<gid_t> LookUpGroup(const std::string& name) {
  group gr{};
  group* found = nullptr;
  std::vector<char> buf(65536);
  const int e = ::getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &found);
  if (found == nullptr) {
    if (e != 0)
      return PosixError(
          absl::StrCat("cannot look up group '", EscapeText(name, kClientStringCap), "'"), e);
    return absl::NotFoundError(
        absl::StrCat("no group named '", EscapeText(name, kClientStringCap), "'"));
  }
  return gr.gr_gid;
}

}  // namespace

UnixPeer PeerOfUid(uid_t uid) {
  UnixPeer peer;
  peer.credentials.uid = uid;
  peer.credentials.gid = static_cast<gid_t>(-1);  // no group unless the database says
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return peer;
  }
  peer.credentials.gid = pw.pw_gid;
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<size_t>(n));
    if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) n = 0;
  }
  groups.resize(static_cast<size_t>(std::max(n, 0)));
  peer.groups = std::move(groups);
  return peer;
}

absl::StatusOr<UnixAccessPolicy> ResolveUnixAccess(const ListenConfig& l) {
  std::set<uid_t> allowed_uids, operator_uids;
  std::set<gid_t> allowed_gids, operator_gids;
  RETURN_IF_ERROR(
      ResolveIds(l.allowed_uids, "listen.allowed_uids", "user", LookUpUser, &allowed_uids));
  RETURN_IF_ERROR(
      ResolveIds(l.allowed_gids, "listen.allowed_gids", "group", LookUpGroup, &allowed_gids));
  RETURN_IF_ERROR(
      ResolveIds(l.operator_uids, "listen.operator_uids", "user", LookUpUser, &operator_uids));
  RETURN_IF_ERROR(
      ResolveIds(l.operator_gids, "listen.operator_gids", "group", LookUpGroup, &operator_gids));
  return UnixAccessPolicy(std::move(allowed_uids), std::move(allowed_gids),
                          std::move(operator_uids), std::move(operator_gids), ::geteuid());
}

}  // namespace conveyor::server
