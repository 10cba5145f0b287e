// The `access` section: bearer tokens and whether the unix socket needs one
// (server/access/token_identifier.h).
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "server/config/field_checks.h"
#include "server/config/sections.h"

namespace conveyor::server {

namespace {

const Section<TokenSpec>& TokenSection() {
  using schema::Bool;
  using schema::Manual;
  using schema::Path;
  using schema::String;
  static const Section<TokenSpec> kSection({
      String<TokenSpec>("name", &TokenSpec::name, "what a client holding the token is known as")
          .WithDefault("required")
          .WithCheck([](const TokenSpec& t) {
            return ValidPipelineName(t.name)
                       ? absl::OkStatus()
                       : absl::InvalidArgumentError(
                             "a token name is 1-128 letters, digits, '-', '_' or '.', starting "
                             "with a letter or digit");
          }),
      Path<TokenSpec>("file", &TokenSpec::file, "the file holding the token")
          .WithDefault("required"),
      Manual<TokenSpec>("pipelines", "list of pipeline names", "all pipelines",
                        "the pipelines the token may open"),
      Bool<TokenSpec>("operator", &TokenSpec::is_operator,
                      "whether its holder sees every client's streams"),
      schema::Custom<TokenSpec>(
          "weight", NumberType(kMinClientWeight, kMaxClientWeight), "`per_client.weight`",
          "its holder's share of the workers' CPU under contention",
          [](const YamlFields& y, const YAML::Node& n, const std::string& field,
             TokenSpec* t) -> absl::Status {
            return y.ReadDouble(n, field, kMinClientWeight, kMaxClientWeight, &t->weight);
          }),
  });
  return kSection;
}

absl::Status ParseToken(const YamlFields& y, const std::string& field, const YAML::Node& n,
                        const DaemonConfig& c, TokenSpec* t) {
  const Section<TokenSpec>& s = TokenSection();
  RETURN_IF_ERROR(s.CheckKeys(y, n, field));
  if (!n["name"]) return y.Error(field, n, "missing `name` (what its holder is known as)");
  if (!n["file"]) return y.Error(field, n, "missing `file` (the file holding the token)");
  RETURN_IF_ERROR(s.ReadFields(y, n, field, t));
  if (const YAML::Node pl = n["pipelines"]) {
    if (!pl.IsSequence()) {
      return y.Error(field + ".pipelines", pl,
                     absl::StrCat("expected a list of pipeline names, got ", DescribeNode(pl)));
    }
    t->pipelines.emplace();
    for (size_t i = 0; i < pl.size(); ++i) {
      const std::string f = absl::StrCat(field, ".pipelines[", i, "]");
      std::string name;
      RETURN_IF_ERROR(y.ReadString(pl[i], f, &name));
      const bool known = std::any_of(c.pipelines.begin(), c.pipelines.end(),
                                     [&](const PipelineSpec& p) { return p.config.name == name; });
      if (!known) return y.Error(f, pl[i], absl::StrCat("no pipeline named '", name, "'"));
      t->pipelines->insert(name);
    }
  }
  return absl::OkStatus();
}

const Section<AccessConfig>& AccessSection() {
  using schema::Bool;
  using schema::Manual;
  static const Section<AccessConfig> kSection({
      Manual<AccessConfig>("tokens", "list", "none",
                           "bearer tokens clients may present, each `{name, file, pipelines, "
                           "operator, weight}`")
          .WithSubRows(TokenSection().Docs(), /*own=*/true, "[i]."),
      Bool<AccessConfig>("require_token_on_unix", &AccessConfig::require_token_on_unix,
                         "require a token on the unix socket too (needs `tokens`)")
          .InGroup("manual"),
  });
  return kSection;
}

}  // namespace

absl::Status ParseAccess(const YamlFields& y, const YAML::Node& n, const DaemonConfig& c,
                         AccessConfig* a) {
  const Section<AccessConfig>& s = AccessSection();
  RETURN_IF_ERROR(s.CheckKeys(y, n, "access"));
  if (const YAML::Node tl = n["tokens"]) {
    if (!tl.IsSequence()) {
      return y.Error(
          "access.tokens", tl,
          absl::StrCat("expected a list of {name, file, pipelines, operator, weight}, got ",
                       DescribeNode(tl)));
    }
    std::set<std::string> names;
    std::set<std::string> files;
    for (size_t i = 0; i < tl.size(); ++i) {
      const std::string f = absl::StrCat("access.tokens[", i, "]");
      TokenSpec t;
      RETURN_IF_ERROR(ParseToken(y, f, tl[i], c, &t));
      if (!names.insert(t.name).second) {
        return y.Error(f + ".name", tl[i]["name"],
                       absl::StrCat("duplicate token name '", t.name, "'"));
      }
      if (!files.insert(t.file).second) {
        return y.Error(f + ".file", tl[i]["file"],
                       absl::StrCat("'", t.file, "' is the file of another token too"));
      }
      a->tokens.push_back(std::move(t));
    }
  }
  // After the tokens: it needs them.
  RETURN_IF_ERROR(s.ReadOne(y, n, "access", "require_token_on_unix", a));
  if (n["require_token_on_unix"] && a->require_token_on_unix && a->tokens.empty()) {
    return y.Error("access.require_token_on_unix", n["require_token_on_unix"],
                   "needs access.tokens (no client could connect)");
  }
  return absl::OkStatus();
}

std::vector<FieldDoc> AccessDocs() { return AccessSection().Docs(); }

}  // namespace conveyor::server
