// TokenIdentifier: bearer-token authentication (the `access.tokens` config
// section). Each call's `authorization: Bearer <token>` metadata is compared
// with every configured token; a match makes the token's name the client's
// principal and gives it the token's pipelines and operator right. When
// tokens are configured, a TCP call without a valid token is refused with
// UNAUTHENTICATED; so is a unix call when access.require_token_on_unix is
// set. A token presented that matches none is refused on every transport.
//
// Tokens are read from their files at start (ReadTokenFile) and again at
// each config reload (ReadTokens, then Replace: a SIGHUP makes a changed
// token file's new token the valid one and its old one invalid at once;
// a file that fails to read changes nothing). Only their SHA-256 digests
// are kept, and a presented token is compared by its
// digest against every configured one in constant time, so neither the
// match nor its position shows in timing. No message or log line ever
// quotes a token.
//
// It wraps an inner identifier (peer address, unix credentials, TLS client
// certificate) and refines the identity that one returns.
//
// Thread-safety: Identify and Authenticate may run concurrently with each
// other and with Replace; each call sees one whole token table, the old or
// the new.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/base/mutex.h"
#include "server/access/identifier.h"

namespace conveyor::server {

// One bearer token a client may present (access.tokens[i]). Its secret is
// read from `file` at start; the config holds only the path.
struct TokenSpec {
  std::string name;  // the principal a client holding it is known as
  std::string file;  // absolute, lexically normal
  // The pipelines it may open; unset: all of them.
  std::optional<std::set<std::string>> pipelines;
  bool is_operator = false;  // may see every client's streams in GetStats
  // Its holder's share of the workers' CPU under contention (ClientIdentity::
  // weight); 0: per_client.weight.
  double weight = 0;
};

// Who may use the daemon (the `access` section).
struct AccessConfig {
  std::vector<TokenSpec> tokens;  // empty: no bearer tokens (and none required)
  // Whether clients of the unix socket must present a token too (TCP clients
  // must whenever tokens are configured).
  bool require_token_on_unix = false;
};

// The token held by `path` (named by config field `field` in messages): its
// content without one trailing newline. Refused (naming the field and path,
// never the content) when the file cannot be read, is not a regular file, is
// readable or writable by others, is empty, is shorter than 16 bytes, or
// holds anything but printable ASCII without spaces (what gRPC metadata
// can carry).
absl::StatusOr<std::string> ReadTokenFile(const std::string& field, const std::string& path);

class TokenIdentifier final : public ClientIdentifier {
 private:
  struct Table;

 public:
  // The tokens of a config, read and checked, ready to Replace the ones in
  // use (opaque: only digests inside).
  using Tokens = std::shared_ptr<const Table>;

  // Reads every token of `access` (ReadTokenFile); two tokens with the same
  // content are refused. Errors name the field and the file.
  static absl::StatusOr<Tokens> ReadTokens(const AccessConfig& access);

  // Reads every token of `access` (ReadTokenFile); two tokens with the same
  // content are refused. `inner` identifies the client first.
  static absl::StatusOr<std::unique_ptr<TokenIdentifier>> Create(
      const AccessConfig& access, std::unique_ptr<ClientIdentifier> inner);

  absl::StatusOr<ClientIdentity> Identify(const grpc::ServerContextBase& context) const override;

  // The decision for a client `identity` (from the inner identifier) that
  // sent `authorization` (the metadata value; nullopt: none sent).
  absl::StatusOr<ClientIdentity> Authenticate(ClientIdentity identity,
                                              std::optional<absl::string_view> authorization) const;

  // Calls from now on are judged by `tokens` (from ReadTokens) instead of
  // the tokens in use: a config reload. REQUIRES: `tokens` non-null.
  void Replace(Tokens tokens);

  size_t num_tokens() const;

 private:
  using Digest = std::array<uint8_t, 32>;
  struct Token {
    std::string name;
    Digest digest;
    std::optional<std::set<std::string>> pipelines;
    bool is_operator = false;
    double weight = 0;
  };
  struct Table {
    std::vector<Token> tokens;
    bool require_on_unix = false;
  };

  TokenIdentifier(Tokens tokens, std::unique_ptr<ClientIdentifier> inner)
      : inner_(std::move(inner)), tokens_(std::move(tokens)) {}

  static Digest DigestOf(absl::string_view token);
  Tokens Current() const;

  const std::unique_ptr<ClientIdentifier> inner_;  // constant after construction
  mutable Mutex mu_;
  Tokens tokens_ ABSL_GUARDED_BY(mu_);  // never null; swapped whole by Replace
};

}  // namespace conveyor::server
