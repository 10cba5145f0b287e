// The daemons of a PoolStream (pool_stream.h): the entries of its server
// list, with DNS names resolved to one daemon per address — the same rules
// as the Python client's servers= (client/python/conveyor/_pool_servers.py):
//   "unix:///path.sock", "unix:path", "/path.sock"   one daemon on this host
//   "10.0.0.7:50051", "[fd00::7]:50051"               one daemon
//   "name:port"                                       every address the name
//       resolves to (getaddrinfo: DNS, /etc/hosts), resolved again by
//       Resolve(); a name that stops resolving keeps its last answer.
// The first entry is the local daemon of the local_first policy.
//
// Thread-safety: Resolve() and Current() may be called from any threads.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"

namespace conveyor::client {

struct PoolEndpoint {
  std::string address;  // what a Client connects to
  std::string name;     // the DNS name it came from; empty for an address given as such
  size_t entry = 0;     // its entry in the server list (0: the local daemon)
};

// Every address of host:port, as "ip:port" / "[ip6]:port"; an error when
// it does not resolve.
using PoolResolver =
    std::function<absl::StatusOr<std::vector<std::string>>(const std::string& host, int port)>;

class PoolServers {
 public:
  // InvalidArgument naming the entry for an empty list, an empty entry, or
  // "host:port" without a port in 1..65535.
  static absl::StatusOr<std::unique_ptr<PoolServers>> Create(std::vector<std::string> entries,
                                                             PoolResolver resolver = {});

  bool has_names() const { return !names_.empty(); }
  const std::vector<std::string>& entries() const { return entries_; }

  // Resolves every name once more (blocking).
  void Resolve();
  // The daemons now, in entry order, each address once.
  std::vector<PoolEndpoint> Current() const;
  // Names whose last resolution failed, and why.
  std::map<std::string, std::string> Errors() const;

 private:
  PoolServers() = default;

  std::vector<std::string> entries_;
  std::map<size_t, std::pair<std::string, int>> names_;  // entry -> (host, port)
  PoolResolver resolver_;
  mutable Mutex mu_;
  std::map<size_t, std::vector<std::string>> answers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> errors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor::client
