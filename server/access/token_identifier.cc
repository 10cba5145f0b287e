#include "server/access/token_identifier.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/posix_error.h"
#include "core/base/unique_fd.h"

namespace conveyor::server {

namespace {

constexpr size_t kMinTokenBytes = 16;
constexpr size_t kMaxTokenBytes = 4096;
constexpr char kBearer[] = "bearer ";

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& field, const std::string& path) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("field ", field, ": '", path, "' ", why));
  };
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) return PosixError(absl::StrCat("field ", field, ": open '", path, "'"), errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return PosixError(absl::StrCat("field ", field, ": stat '", path, "'"), errno);
  }
  if (!S_ISREG(st.st_mode)) return bad("is not a regular file");
  if ((st.st_mode & 0007) != 0) {
    return bad(absl::StrFormat(
        "may be read or written by others (mode %04o): a token file must be private to the "
        "daemon (chmod 0600 or 0640)",
        st.st_mode & 07777));
  }
  if (st.st_size > static_cast<off_t>(kMaxTokenBytes) + 2) {
    return bad(absl::StrCat("is larger than a token (", st.st_size, " bytes; at most ",
                            kMaxTokenBytes, ")"));
  }
  std::string token(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < token.size()) {
    const ssize_t n = ::read(fd.get(), token.data() + got, token.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError(absl::StrCat("field ", field, ": read '", path, "'"), errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  token.resize(got);
  if (absl::EndsWith(token, "\n")) token.pop_back();
  if (absl::EndsWith(token, "\r")) token.pop_back();
  if (token.empty()) return bad("is empty (it must hold the token)");
  for (const char c : token) {
    if (c <= ' ' || c > '~') {
      return bad(
          "holds a space, a control character or a non-ASCII byte, which gRPC metadata "
          "cannot carry (one line of printable ASCII expected)");
    }
  }
  if (token.size() < kMinTokenBytes) {
    return bad(absl::StrCat("holds a token of ", token.size(), " bytes; at least ", kMinTokenBytes,
                            " are needed (e.g. openssl rand -hex 32)"));
  }
  return token;
}

TokenIdentifier::Digest TokenIdentifier::DigestOf(absl::string_view token) {
  Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d.data());
  return d;
}

absl::StatusOr<TokenIdentifier::Tokens> TokenIdentifier::ReadTokens(const AccessConfig& access) {
  auto table = std::make_shared<Table>();
  table->require_on_unix = access.require_token_on_unix;
  std::vector<Token>& tokens = table->tokens;
  for (size_t i = 0; i < access.tokens.size(); ++i) {
    const TokenSpec& spec = access.tokens[i];
    const std::string field = absl::StrCat("access.tokens[", i, "].file");
    absl::StatusOr<std::string> secret = ReadTokenFile(field, spec.file);
    if (!secret.ok()) return secret.status();
    Token t{spec.name, DigestOf(*secret), spec.pipelines, spec.is_operator, spec.weight};
    OPENSSL_cleanse(secret->data(), secret->size());
    for (const Token& other : tokens) {
      if (other.digest == t.digest) {
        return absl::InvalidArgumentError(
            absl::StrCat("field ", field, ": '", spec.file, "' holds the same token as token '",
                         other.name, "' (every token must be different)"));
      }
    }
    tokens.push_back(std::move(t));
  }
  return Tokens(std::move(table));
}

absl::StatusOr<std::unique_ptr<TokenIdentifier>> TokenIdentifier::Create(
    const AccessConfig& access, std::unique_ptr<ClientIdentifier> inner) {
  absl::StatusOr<Tokens> tokens = ReadTokens(access);
  if (!tokens.ok()) return tokens.status();
  return std::unique_ptr<TokenIdentifier>(
      new TokenIdentifier(*std::move(tokens), std::move(inner)));
}

void TokenIdentifier::Replace(Tokens tokens) {
  MutexLock lock(&mu_);
  tokens.swap(tokens_);
  // The old table is freed here or by the last call still reading it.
}

TokenIdentifier::Tokens TokenIdentifier::Current() const {
  MutexLock lock(&mu_);
  return tokens_;
}

size_t TokenIdentifier::num_tokens() const { return Current()->tokens.size(); }

absl::StatusOr<ClientIdentity> TokenIdentifier::Identify(
    const grpc::ServerContextBase& context) const {
  absl::StatusOr<ClientIdentity> identity = inner_->Identify(context);
  if (!identity.ok()) return identity.status();
  std::optional<absl::string_view> authorization;
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  return Authenticate(*std::move(identity), authorization);
}

absl::StatusOr<ClientIdentity> TokenIdentifier::Authenticate(
    ClientIdentity identity, std::optional<absl::string_view> authorization) const {
  const Tokens table = Current();  // one whole table for this call
  if (!authorization.has_value()) {
    if (table->tokens.empty() || (identity.is_unix() && !table->require_on_unix)) return identity;
    return absl::UnauthenticatedError(absl::StrCat(
        "this daemon requires a bearer token on ", identity.is_unix() ? "its unix socket" : "TCP",
        " (metadata 'authorization: Bearer TOKEN'; the Python client's token_file= or "
        "--token-file)"));
  }
  absl::string_view value = *authorization;
  if (value.size() < sizeof(kBearer) - 1 ||
      !absl::EqualsIgnoreCase(value.substr(0, sizeof(kBearer) - 1), kBearer)) {
    return absl::UnauthenticatedError(
        "the authorization metadata is not of the form 'Bearer TOKEN'");
  }
  const Digest presented =
      DigestOf(absl::StripLeadingAsciiWhitespace(value.substr(sizeof(kBearer) - 1)));
  // Every token is compared, whatever matched before: the time taken tells
  // nothing of which token (if any) matched.
  const Token* match = nullptr;
  for (const Token& t : table->tokens) {
    const bool equal = CRYPTO_memcmp(t.digest.data(), presented.data(), presented.size()) == 0;
    if (equal) match = &t;
  }
  if (match == nullptr) {
    return absl::UnauthenticatedError("the bearer token presented is not valid for this daemon");
  }
  identity.principal = match->name;
  identity.allowed_pipelines = match->pipelines;
  identity.is_operator = match->is_operator;
  identity.weight = match->weight;
  return identity;
}

}  // namespace conveyor::server
