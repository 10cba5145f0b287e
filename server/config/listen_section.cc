// The `listen` section and its `tls` map: where the daemon listens and who
// may connect (server/access/listen_config.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "server/config/field_checks.h"
#include "server/config/sections.h"

namespace conveyor::server {

namespace {

// Largest reload interval of the TLS files: a day.
constexpr uint64_t kMaxTlsReloadSeconds = 86400;
// Longest user or group name accepted in the access lists.
constexpr size_t kMaxIdLength = 256;

// A list of user or group names or numbers (resolved at start, not here).
FieldSpec<ListenConfig> IdList(std::string key, std::vector<std::string> ListenConfig::*member,
                               const char* what, std::string doc) {
  return schema::Custom<ListenConfig>(
      std::move(key), absl::StrCat("list of ", what, " names or numbers"), "none", std::move(doc),
      [member](const YamlFields& y, const YAML::Node& n, const std::string& field,
               ListenConfig* out) -> absl::Status {
        if (!n.IsSequence()) {
          return y.Error(
              field, n, absl::StrCat("expected a list of names or numbers, got ", DescribeNode(n)));
        }
        for (size_t i = 0; i < n.size(); ++i) {
          const std::string item = absl::StrCat(field, "[", i, "]");
          std::string v;
          RETURN_IF_ERROR(y.ReadString(n[i], item, &v));
          const bool printable = std::all_of(
              v.begin(), v.end(), [](char ch) { return ch > ' ' && ch < 0x7f && ch != ':'; });
          if (v.empty() || v.size() > kMaxIdLength || !printable) {
            return y.Error(item, n[i], "expected a user or group name or number");
          }
          (out->*member).push_back(v);
        }
        return absl::OkStatus();
      });
}

const Section<TlsConfig>& TlsSection() {
  using schema::Bool;
  using schema::Path;
  using schema::Uint;
  static const Section<TlsConfig> kSection({
      Path<TlsConfig>("cert", &TlsConfig::cert,
                      "PEM certificate (chain) of the server; with `key`, TLS on TCP"),
      Path<TlsConfig>("key", &TlsConfig::key, "PEM private key of `cert`"),
      Path<TlsConfig>("client_ca", &TlsConfig::client_ca,
                      "PEM CAs client certificates are verified against"),
      Bool<TlsConfig>("require_client_cert", &TlsConfig::require_client_cert,
                      "refuse TLS clients without a valid certificate (needs `client_ca`)"),
      Uint<TlsConfig>("reload_interval_seconds", &TlsConfig::reload_interval_seconds, 1,
                      kMaxTlsReloadSeconds, "how often the files are checked for renewal"),
  });
  return kSection;
}

absl::Status ParseTls(const YamlFields& y, const YAML::Node& n, TlsConfig* t) {
  const Section<TlsConfig>& s = TlsSection();
  RETURN_IF_ERROR(s.CheckKeys(y, n, "listen.tls"));
  if (!n["cert"] || !n["key"]) {
    return y.Error("listen.tls", n, "needs both `cert` and `key` (PEM files of the server)");
  }
  RETURN_IF_ERROR(s.ReadFields(y, n, "listen.tls", t));
  if (n["require_client_cert"] && t->require_client_cert && t->client_ca.empty()) {
    return y.Error("listen.tls.require_client_cert", n["require_client_cert"],
                   "needs listen.tls.client_ca (the CAs client certificates are checked against)");
  }
  return absl::OkStatus();
}

const Section<ListenConfig>& ListenSection() {
  using schema::Bool;
  using schema::Custom;
  using schema::Manual;
  using schema::String;
  static const Section<ListenConfig> kSection({
      Custom<ListenConfig>("unix", "path", Quoted(kDefaultUnixSocket),
                           "the unix socket of the gRPC service (`\"\"`: none); at most 104 bytes",
                           [](const YamlFields& y, const YAML::Node& n, const std::string& field,
                              ListenConfig* l) -> absl::Status {
                             std::string s;
                             RETURN_IF_ERROR(y.ReadString(n, field, &s));
                             l->unix_path = s.empty() ? "" : ResolvePath(y.base_dir(), s);
                             if (!l->unix_path.empty()) {
                               if (absl::Status st = ValidateUnixPath(l->unix_path); !st.ok()) {
                                 return y.Error(field, n, std::string(st.message()));
                               }
                             }
                             return absl::OkStatus();
                           }),
      Custom<ListenConfig>(
          "unix_mode", "octal string", "`\"0660\"`",
          "permissions of the socket and its `.fd` sibling (owner rw, nothing for others)",
          [](const YamlFields& y, const YAML::Node& n, const std::string& field,
             ListenConfig* l) -> absl::Status {
            RETURN_IF_ERROR(y.Scalar(n, field, "an octal mode"));
            if (absl::Status st = ParseUnixMode(n.Scalar(), &l->unix_mode); !st.ok()) {
              return y.Error(field, n, std::string(st.message()));
            }
            return absl::OkStatus();
          }),
      IdList("allowed_uids", &ListenConfig::allowed_uids, "user",
             "who may use the unix socket, by kernel credentials"),
      IdList("allowed_gids", &ListenConfig::allowed_gids, "group",
             "groups whose members may use the unix socket"),
      IdList("operator_uids", &ListenConfig::operator_uids, "user",
             "unix clients who see every client's streams"),
      IdList("operator_gids", &ListenConfig::operator_gids, "group",
             "groups whose members are operators"),
      String<ListenConfig>("tcp", &ListenConfig::tcp, "an optional TCP listener")
          .WithType("`host:port`")
          .WithCheck([](const ListenConfig& l) {
            return l.tcp.empty() ? absl::OkStatus() : ValidateTcpAddress(l.tcp);
          }),
      String<ListenConfig>("data_tcp", &ListenConfig::data_tcp,
                           "the data socket of TCP streams (`none`: bytes inline)")
          .WithType("`host:port` or `none`")
          .WithDefault("the `listen.tcp` host, port 0")
          .WithCheck([](const ListenConfig& l) {
            return l.data_tcp.empty() || l.data_tcp == "none" ? absl::OkStatus()
                                                              : ValidateTcpAddress(l.data_tcp);
          }),
      Manual<ListenConfig>("tls", "map", "none", "TLS of the TCP listener")
          .WithSubRows(TlsSection().Docs()),
      Bool<ListenConfig>("allow_insecure_tcp", &ListenConfig::allow_insecure_tcp,
                         "serve a non-loopback `tcp` with neither TLS nor tokens"),
  });
  return kSection;
}

}  // namespace

absl::Status ParseListen(const YamlFields& y, const YAML::Node& n, ListenConfig* out) {
  RETURN_IF_ERROR(ListenSection().Read(y, n, "listen", out));
  if (n["tls"]) RETURN_IF_ERROR(ParseTls(y, n["tls"], &out->tls));
  return absl::OkStatus();
}

std::vector<FieldDoc> ListenDocs() { return ListenSection().Docs(); }

}  // namespace conveyor::server
