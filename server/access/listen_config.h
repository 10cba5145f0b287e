// ListenConfig: where conveyord listens and who may connect there (the
// `listen` config section) — the unix socket and its mode and allowed
// users, the TCP listener and its TLS, the data socket of TCP clients.
// Owned by the access layer that enforces it (server/access/unix_access.h,
// the TLS contexts); server/config/ only parses it.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "server/access/tls_config.h"

namespace conveyor::server {

inline constexpr char kDefaultUnixSocket[] = "/run/conveyor/conveyor.sock";

struct ListenConfig {
  std::string unix_path = kDefaultUnixSocket;  // "" disables the unix socket
  mode_t unix_mode = 0660;                     // of the socket and its ".fd" sibling
  std::string tcp;                             // "host:port", "" = no TCP listener
  // The batch-data socket of DATA_SOCKET streams (TCP clients): "host:port";
  // "" = the TCP listener's host with a free port (announced to each client
  // in StreamOpened); "none" = no data socket (TCP clients get INLINE
  // batches). Unused without a TCP listener; with listen.tls it speaks TLS.
  std::string data_tcp;
  TlsConfig tls;
  // Serve TCP on a non-loopback address with neither TLS nor bearer tokens
  // (refused at start otherwise; a warning is logged when allowed).
  bool allow_insecure_tcp = false;
  // Who may connect to the unix socket (and fetch memory from its ".fd"
  // sibling), checked against each connection's kernel credentials: user
  // and group names or numbers, resolved when the daemon starts
  // (server/access/unix_access.h). Both empty: anyone the socket mode admits.
  // Root and the daemon's own uid are always allowed.
  std::vector<std::string> allowed_uids;
  std::vector<std::string> allowed_gids;
  // Unix clients who see every client's streams in GetStats (besides root
  // and the daemon's uid, who always do).
  std::vector<std::string> operator_uids;
  std::vector<std::string> operator_gids;
};

// Whether `host_port`'s host is a loopback address (127.0.0.0/8, ::1,
// localhost): reachable from this machine only.
bool IsLoopbackAddress(const std::string& host_port);

// The address the data socket listens on, or "" for none (see data_tcp).
std::string DataSocketAddress(const ListenConfig& listen);

}  // namespace conveyor::server
