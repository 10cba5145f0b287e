#include "server/reloader.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "server/access/tls_credentials.h"
#include "server/access/token_identifier.h"
#include "server/config/loader.h"
#include "server/config/reload_diff.h"
#include "server/daemon.h"
#include "server/ops/grpc_logging.h"
#include "server/ops/logging.h"
#include "server/service/service.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {

std::string List(const std::vector<std::string>& names) {
  return absl::StrCat("[", absl::StrJoin(names, ", "), "]");
}

}  // namespace

ConfigReloader::ConfigReloader(Flags flags, DaemonConfig running, uint64_t max_message_bytes,
                               ConveyorService* service, TokenIdentifier* tokens)
    : flags_(std::move(flags)),
      running_(std::move(running)),
      max_message_bytes_(max_message_bytes),
      service_(service),
      tokens_(tokens) {}

absl::Status ConfigReloader::Reload() {
  spdlog::info("SIGHUP: reloading {}", EscapeText(flags_.config));
  // The TLS files are not part of what a reload changes (gRPC watches them),
  // but a SIGHUP is when an operator looks: an expired one is said again.
  if (running_.listen.tls.enabled() && !running_.listen.tcp.empty()) {
    WarnIfCertificateNotValid(running_.listen.tls, "TLS on SIGHUP");
  }
  absl::Status st = TryReload();
  if (!st.ok()) {
    // Counted before it is logged: whoever saw the line sees the count.
    service_->reloads().Failed();
    spdlog::error("config reload refused, the running config stays: {}", EscapeText(st.message()));
    summary_ = "last reload refused (see the log), running config unchanged";
  }
  return st;
}

absl::Status ConfigReloader::TryReload() {
  // The machine as it was at start: "N%" sizes resolve to the same bytes,
  // so an unchanged file compares equal.
  ASSIGN_OR_RETURN(DaemonConfig next, LoadConfigFile(flags_.config, running_.system));
  if (absl::Status st = ApplyFlags(flags_, &next); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flags_.config, ": ", st.message()));
  }
  if (std::vector<std::string> fields = ChangedRestartFields(running_, next); !fields.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        flags_.config,
        ": changes settings a running daemon cannot change: ", absl::StrJoin(fields, ", "),
        "; restart conveyord to apply them (or undo them to reload the pipelines)"));
  }
  ASSIGN_OR_RETURN(PipelineList pipelines, LoadPipelines(next, service_->Pipelines()));
  // The gRPC server's send limit was fixed at start.
  std::vector<std::string> too_large;
  for (const auto& p : pipelines) {
    if (MaxMessageBytes({p}) > max_message_bytes_) too_large.push_back(p->name);
  }
  if (!too_large.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(flags_.config, ": pipelines ", List(too_large),
                     " produce batches larger than the largest message this daemon sends (",
                     max_message_bytes_ >> 20,
                     " MiB, fixed at start by the pipelines it started with); "
                     "restart conveyord to serve them"));
  }

  // The token files, read again (ChangedRestartFields made sure the daemon
  // has tokens exactly when `next` has): a file that fails refuses the reload.
  TokenIdentifier::Tokens tokens;
  if (tokens_ != nullptr && !next.access.tokens.empty()) {
    absl::StatusOr<TokenIdentifier::Tokens> read = TokenIdentifier::ReadTokens(next.access);
    if (!read.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(flags_.config, ": ", read.status().message()));
    }
    tokens = *std::move(read);
  }

  // Everything checked: applied from here on.
  const PipelineChanges changes = ComparePipelines(running_, next);
  RETURN_IF_ERROR(service_->ReplacePipelines(std::move(pipelines)));
  std::string live;  // the settings applied live, for the log line
  if (tokens != nullptr) {
    tokens_->Replace(std::move(tokens));
    absl::StrAppend(&live, "; ", next.access.tokens.size(), " bearer token(s) read again");
  }
  const bool new_level = next.log_level != running_.log_level;
  if (new_level) absl::StrAppend(&live, "; log_level ", running_.log_level, " -> ", next.log_level);
  const std::string level = next.log_level;
  running_ = std::move(next);
  service_->reloads().Succeeded();  // applied (and counted before it is logged)

  // Open streams of pipelines that went or changed keep their definition.
  std::set<std::string> old_defs(changes.removed.begin(), changes.removed.end());
  old_defs.insert(changes.changed.begin(), changes.changed.end());
  int keeping = 0;
  const v1::GetStatsResponse stats = service_->GetStats();
  for (const v1::StreamStats& s : stats.streams()) keeping += old_defs.count(s.pipeline());
  spdlog::info(
      "config reloaded from {}: pipelines added {}, removed {}, changed {}, unchanged {}; "
      "{} open stream(s) finish on the definition they opened with{}",
      EscapeText(flags_.config), List(changes.added), List(changes.removed), List(changes.changed),
      List(changes.unchanged), keeping, live);
  // After the line above, so that it is logged whatever the new level.
  if (new_level) {
    SetLogLevel(level);
    SetGrpcLogLevel(level);  // how much gRPC core says follows the level too
  }
  summary_ = absl::StrCat("last reload: ", changes.added.size(), " added, ", changes.removed.size(),
                          " removed, ", changes.changed.size(), " changed");
  return absl::OkStatus();
}

}  // namespace conveyor::server
