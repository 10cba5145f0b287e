// ConfigReloader: what SIGHUP does to a running conveyord. It reads the
// config file again, applies the command line's overrides again
// (ApplyFlags), validates the result exactly as a start would — the text,
// then the disk: allowed_roots, every dataset loaded — and then, when the
// file changes nothing but pipelines (and allowed_roots; see
// server/config/reload_diff.h), makes the service serve the new pipelines:
// added ones at once, removed ones no longer, changed ones with their new
// definition for new streams; open streams keep what they opened with.
// With it come the settings applied live: the bearer tokens (every token
// file of access.tokens read again, so a changed file's new token is valid
// and its old one refused from the reload on) and log_level. Any problem —
// a token file that cannot be read or holds no valid token among them —
// leaves everything as it was. Every outcome is logged in one line naming
// the file and the problem (or what changed), and counted in the
// service's ReloadCounters (server/service/reload_counters.h).
//
// Thread-safety: Reload must not be called from two threads at once (the
// daemon calls it from its main thread); the service it drives is
// thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/config/config.h"
#include "server/flags.h"

namespace conveyor::server {

class ConveyorService;
class TokenIdentifier;

class ConfigReloader {
 public:
  // `running`: the config the daemon started with (flags applied).
  // `max_message_bytes`: the gRPC send limit the daemon started with (new
  // pipelines must fit in it). `service` is not owned and must outlive
  // this object; so must `tokens` (the daemon's bearer-token identifier,
  // Daemon::tokens(); null when it started without access.tokens).
  ConfigReloader(Flags flags, DaemonConfig running, uint64_t max_message_bytes,
                 ConveyorService* service, TokenIdentifier* tokens = nullptr);

  // Reloads (above). OK when the new pipelines are served; otherwise the
  // reason, and nothing changed. Either way it has been logged.
  absl::Status Reload();

  // One line for the service manager's status after the last Reload.
  const std::string& summary() const { return summary_; }

 private:
  absl::Status TryReload();

  const Flags flags_;
  DaemonConfig running_;  // what the daemon serves now
  const uint64_t max_message_bytes_;
  ConveyorService* const service_;
  TokenIdentifier* const tokens_;
  std::string summary_;
};

}  // namespace conveyor::server
