// Who may use the unix socket and who is an operator (server/access/unix_access.h),
// how clients are told apart for stats and limits (ClientIdentity::LimitKey,
// SeesStreamsOf), and how a call's "fd:N" peer is mapped back to the
// credentials recorded at accept (UnixConnections, PeerCredentialsIdentifier).
#include "server/access/unix_access.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "core/base/unique_fd.h"
#include "server/access/peer_credentials_identifier.h"
#include "server/access/unix_connections.h"

namespace conveyor::server {
namespace {

UnixPeer Peer(uid_t uid, gid_t gid, std::vector<gid_t> groups = {}) {
  return UnixPeer{PeerCredentials{42, uid, gid}, std::move(groups)};
}

constexpr uid_t kDaemonUid = 990;

TEST_CASE("unix access: empty lists admit anyone; root and the daemon's uid always",
          "[unix_access]") {
  const UnixAccessPolicy open({}, {}, {}, {}, kDaemonUid);
  CHECK(open.Allows(Peer(1000, 1000)));
  CHECK_FALSE(open.IsOperator(Peer(1000, 1000)));
  CHECK(open.IsOperator(Peer(0, 0)));
  CHECK(open.IsOperator(Peer(kDaemonUid, 5)));

  const UnixAccessPolicy closed({1000}, {50}, {}, {}, kDaemonUid);
  CHECK(closed.Allows(Peer(1000, 1000)));
  CHECK_FALSE(closed.Allows(Peer(1001, 1001)));
  CHECK(closed.Allows(Peer(1001, 50)));             // primary group listed
  CHECK(closed.Allows(Peer(1001, 1001, {7, 50})));  // a supplementary group listed
  CHECK(closed.Allows(Peer(0, 0)));
  CHECK(closed.Allows(Peer(kDaemonUid, kDaemonUid)));
}

TEST_CASE("unix access: operators by uid or group", "[unix_access]") {
  const UnixAccessPolicy p({1000}, {}, {2000}, {60}, kDaemonUid);
  CHECK(p.IsOperator(Peer(2000, 2000)));
  CHECK(p.Allows(Peer(2000, 2000)));  // an operator is allowed in
  CHECK(p.IsOperator(Peer(3000, 3000, {60})));
  CHECK_FALSE(p.IsOperator(Peer(1000, 1000)));
}

TEST_CASE("unix access: names resolve, unknown names are refused naming the field",
          "[unix_access]") {
  ListenConfig l;
  l.allowed_uids = {"root", "1234"};
  l.operator_gids = {"root"};
  absl::StatusOr<UnixAccessPolicy> p = ResolveUnixAccess(l);
  REQUIRE(p.ok());
  CHECK(p->Allows(Peer(1234, 1234)));
  CHECK_FALSE(p->Allows(Peer(1235, 1235)));
  CHECK(p->IsOperator(Peer(1235, 0)));

  l.allowed_gids = {"no-such-group-conveyor"};
  absl::StatusOr<UnixAccessPolicy> bad = ResolveUnixAccess(l);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("listen.allowed_gids") != std::string::npos);
  CHECK(bad.status().message().find("no-such-group-conveyor") != std::string::npos);
}

TEST_CASE("unix access: a socket pair's peer is this process", "[unix_access]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  UniqueFd a(sv[0]), b(sv[1]);
  absl::StatusOr<UnixPeer> peer = ReadUnixPeer(a.get());
  REQUIRE(peer.ok());
  CHECK(peer->credentials.pid == ::getpid());
  CHECK(peer->credentials.uid == ::getuid());
  CHECK(peer->credentials.gid == ::getgid());
}

TEST_CASE("client identity: one key per principal, unix uid or TCP host", "[unix_access]") {
  ClientIdentity a = ClientIdentity::FromPeer("unix:/run/c.sock");
  a.credentials = PeerCredentials{1, 1000, 1000};
  ClientIdentity a2 = a;
  a2.credentials->pid = 2;  // another process of the same user
  ClientIdentity b = a;
  b.credentials->uid = 1001;
  CHECK(a.LimitKey() == "uid:1000");
  CHECK(a.LimitKey() == a2.LimitKey());
  CHECK(a.SeesStreamsOf(a2));
  CHECK_FALSE(a.SeesStreamsOf(b));

  const ClientIdentity t1 = ClientIdentity::FromPeer("ipv4:10.0.0.7:5000");
  const ClientIdentity t2 = ClientIdentity::FromPeer("ipv4:10.0.0.7:6000");
  const ClientIdentity t3 = ClientIdentity::FromPeer("ipv6:[::1]:5000");
  CHECK(t1.LimitKey() == "host:ipv4:10.0.0.7");
  CHECK(t3.LimitKey() == "host:ipv6:[::1]");
  CHECK(t1.SeesStreamsOf(t2));
  CHECK_FALSE(t1.SeesStreamsOf(t3));

  ClientIdentity p1 = t1, p2 = t3;
  p1.principal = p2.principal = "trainer";
  CHECK(p1.LimitKey() == "principal:trainer");
  CHECK(p1.SeesStreamsOf(p2));
  CHECK_FALSE(p1.SeesStreamsOf(t2));

  ClientIdentity op = b;
  op.is_operator = true;
  CHECK(op.SeesStreamsOf(a));
  CHECK(op.SeesStreamsOf(t1));
}

TEST_CASE("unix connections: an fd maps to its credentials only while it is that socket",
          "[unix_access]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  UniqueFd a(sv[0]), b(sv[1]);
  UnixConnections connections;
  REQUIRE(connections.Add(a.get(), PeerCredentials{11, 1000, 100}, false));
  PeerCredentialsIdentifier identifier(&connections, "/run/c.sock",
                                       std::make_unique<ClientIdentifier>());
  const std::string peer = "fd:" + std::to_string(a.get());
  auto id = identifier.IdentifyFdPeer(peer);
  REQUIRE(id.has_value());
  REQUIRE(id->ok());
  CHECK((*id)->is_unix());
  CHECK((*id)->peer == "unix:/run/c.sock");
  CHECK((*id)->credentials->uid == 1000);
  CHECK_FALSE((*id)->is_operator);
  CHECK((*id)->Describe() == "unix:/run/c.sock (pid 11, uid 1000, gid 100)");
  // Not an fd peer: someone else's business.
  CHECK_FALSE(identifier.IdentifyFdPeer("ipv4:10.0.0.1:5").has_value());
  // The number closed and reused by something that is not that socket.
  const int number = a.get();
  a.Reset();
  UniqueFd other(::eventfd(0, EFD_CLOEXEC));
  REQUIRE(other.get() == number);
  auto stale = identifier.IdentifyFdPeer(peer);
  REQUIRE(stale.has_value());
  CHECK(absl::IsUnauthenticated(stale->status()));
  // Never recorded.
  auto unknown = identifier.IdentifyFdPeer("fd:99999");
  REQUIRE(unknown.has_value());
  CHECK(absl::IsUnauthenticated(unknown->status()));
}

}  // namespace
}  // namespace conveyor::server
