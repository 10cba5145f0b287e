// Tests of bearer-token authentication (server/access/token_identifier.h): who a
// token makes a client, what it may open, and what is refused on which
// transport, decided on identities without a gRPC server (the integration
// suite tests/integration/test_access_tcp.py drives real daemons). Compiled
// only when the server library is built.
#ifdef CONVEYOR_HAVE_SERVER

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <memory>
#include <set>
#include <string>

#include "server/access/token_identifier.h"
#include "tests/unit/temp_dir.h"

namespace conveyor::server {
namespace {

using ::conveyor::testing::TempDir;

constexpr char kTrainer[] = "trainer-token-0123456789abcdef";
constexpr char kOps[] = "ops-token-0123456789abcdef0123";

std::string TokenFile(const TempDir& dir, const std::string& name, const std::string& content) {
  const std::string path = dir.Write(name, content + "\n");
  REQUIRE(::chmod(path.c_str(), 0600) == 0);
  return path;
}

AccessConfig Access(const TempDir& dir, bool require_on_unix = false) {
  AccessConfig a;
  a.tokens.push_back(
      {"trainer", TokenFile(dir, "trainer", kTrainer), std::set<std::string>{"a"}, false});
  a.tokens.push_back({"ops", TokenFile(dir, "ops", kOps), std::nullopt, true});
  a.require_token_on_unix = require_on_unix;
  return a;
}

std::unique_ptr<TokenIdentifier> Make(const AccessConfig& access) {
  absl::StatusOr<std::unique_ptr<TokenIdentifier>> t =
      TokenIdentifier::Create(access, std::make_unique<ClientIdentifier>());
  REQUIRE(t.ok());
  return *std::move(t);
}

const ClientIdentity kTcp = ClientIdentity::FromPeer("ipv4:10.0.0.7:5000");
const ClientIdentity kUnix = ClientIdentity::FromPeer("unix:/run/conveyor/conveyor.sock");

TEST_CASE("a token makes the client its principal with its pipelines", "[tokens]") {
  TempDir dir;
  std::unique_ptr<TokenIdentifier> ids = Make(Access(dir));
  CHECK(ids->num_tokens() == 2);

  absl::StatusOr<ClientIdentity> c = ids->Authenticate(kTcp, std::string("Bearer ") + kTrainer);
  REQUIRE(c.ok());
  CHECK(c->principal == "trainer");
  CHECK(c->MayOpen("a"));
  CHECK_FALSE(c->MayOpen("b"));
  CHECK_FALSE(c->is_operator);
  CHECK(c->peer == kTcp.peer);

  c = ids->Authenticate(kTcp, std::string("bearer  ") + kOps);  // scheme in any case
  REQUIRE(c.ok());
  CHECK(c->principal == "ops");
  CHECK(c->MayOpen("b"));
  CHECK(c->is_operator);

  // A unix client that sends a token is held to it too.
  c = ids->Authenticate(kUnix, std::string("Bearer ") + kTrainer);
  REQUIRE(c.ok());
  CHECK_FALSE(c->MayOpen("b"));
}

TEST_CASE("replaced tokens judge every call from then on; a bad file changes nothing", "[tokens]") {
  TempDir dir;
  AccessConfig access = Access(dir);
  std::unique_ptr<TokenIdentifier> ids = Make(access);
  const std::string old_auth = std::string("Bearer ") + kTrainer;
  REQUIRE(ids->Authenticate(kTcp, old_auth).ok());

  // The trainer's file now holds another token; ops loses its operator right.
  constexpr char kRotated[] = "rotated-token-0123456789abcdef";
  TokenFile(dir, "trainer", kRotated);
  access.tokens[1].is_operator = false;
  absl::StatusOr<TokenIdentifier::Tokens> next = TokenIdentifier::ReadTokens(access);
  REQUIRE(next.ok());
  // Read, not applied yet: the old token still counts.
  CHECK(ids->Authenticate(kTcp, old_auth).ok());
  ids->Replace(*std::move(next));
  CHECK(ids->Authenticate(kTcp, old_auth).status().code() == absl::StatusCode::kUnauthenticated);
  absl::StatusOr<ClientIdentity> c = ids->Authenticate(kTcp, std::string("Bearer ") + kRotated);
  REQUIRE(c.ok());
  CHECK(c->principal == "trainer");
  c = ids->Authenticate(kTcp, std::string("Bearer ") + kOps);
  REQUIRE(c.ok());
  CHECK_FALSE(c->is_operator);

  // A file others may read is refused by name, and nothing is replaced.
  const std::string path = TokenFile(dir, "trainer", "another-token-0123456789abcdef");
  REQUIRE(::chmod(path.c_str(), 0644) == 0);
  absl::StatusOr<TokenIdentifier::Tokens> bad = TokenIdentifier::ReadTokens(access);
  REQUIRE_FALSE(bad.ok());
  const std::string why(bad.status().message());
  CHECK(why.find("access.tokens[0].file") != std::string::npos);
  CHECK(why.find(path) != std::string::npos);
  CHECK(why.find("another-token") == std::string::npos);
  CHECK(ids->Authenticate(kTcp, std::string("Bearer ") + kRotated).ok());
}

TEST_CASE("missing and wrong tokens are UNAUTHENTICATED and never quoted", "[tokens]") {
  TempDir dir;
  std::unique_ptr<TokenIdentifier> ids = Make(Access(dir));
  auto refused = [&](const ClientIdentity& who, std::optional<std::string> auth) {
    absl::StatusOr<ClientIdentity> c = ids->Authenticate(who, auth);
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == absl::StatusCode::kUnauthenticated);
    const std::string msg(c.status().message());
    INFO(msg);
    if (auth && auth->size() > 16)
      CHECK(msg.find(auth->substr(auth->size() - 16)) == std::string::npos);
    return msg;
  };
  CHECK(refused(kTcp, std::nullopt).find("requires a bearer token on TCP") != std::string::npos);
  refused(kTcp, std::string("Bearer ") + kTrainer + "x");
  refused(kTcp, std::string("Bearer ") + std::string(kTrainer).substr(1));
  refused(kUnix, std::string("Bearer wrong-token-0123456789abcdef"));
  refused(kTcp, std::string("Basic ") + kTrainer);
  refused(kTcp, std::string("Bearer"));
  refused(kTcp, std::string(""));
  // The unix socket needs none unless asked to.
  absl::StatusOr<ClientIdentity> c = ids->Authenticate(kUnix, std::nullopt);
  REQUIRE(c.ok());
  CHECK(c->principal.empty());
  CHECK_FALSE(c->allowed_pipelines.has_value());

  std::unique_ptr<TokenIdentifier> strict = Make(Access(dir, /*require_on_unix=*/true));
  c = strict->Authenticate(kUnix, std::nullopt);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(std::string(c.status().message()).find("on its unix socket") != std::string::npos);
}

TEST_CASE("two tokens with the same content are refused", "[tokens]") {
  TempDir dir;
  AccessConfig a = Access(dir);
  a.tokens[1].file = TokenFile(dir, "copy", kTrainer);
  absl::StatusOr<std::unique_ptr<TokenIdentifier>> t =
      TokenIdentifier::Create(a, std::make_unique<ClientIdentifier>());
  REQUIRE_FALSE(t.ok());
  const std::string msg(t.status().message());
  CHECK(msg.find("field access.tokens[1].file") == 0);
  CHECK(msg.find("the same token as token 'trainer'") != std::string::npos);
  CHECK(msg.find(kTrainer) == std::string::npos);
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
