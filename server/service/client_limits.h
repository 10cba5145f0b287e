// ClientLimits and ClientUsage: what one client may hold of the daemon —
// open streams, credits (slots) over its streams, slot memory — so that one
// user filling its share cannot lock others out (config per_client.*), and
// its weight: its share of the workers' CPU time when clients contend
// (StreamOptions::weight, core/engine/scheduler.h). A client is its
// ClientIdentity::LimitKey(): every connection of one uid (or one
// authenticated principal, or one TCP host) counts together, and its
// streams share one group of the scheduler.
//
// Thread-safety: ClientLimits is a plain value. ClientUsage is not
// thread-safe: its owner (ConveyorService) guards it with its own mutex.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"

namespace conveyor::server {

// Bounds of a client's weight (per_client.weight, access.tokens[i].weight).
inline constexpr double kMinClientWeight = 0.01;
inline constexpr double kMaxClientWeight = 10000;

struct ClientLimits {
  uint32_t max_streams = 0;  // open streams per client; 0 = no limit
  uint32_t max_credits = 0;  // credits summed over its open streams; 0 = no limit
  uint64_t max_bytes = 0;    // slot memory over its open streams; 0 = no limit
  // A client's share of the workers' CPU time under contention, relative to
  // the other clients' (a token's own weight, when set, wins).
  double weight = 1;
};

class ClientUsage {
 public:
  struct Usage {
    uint32_t streams = 0;
    uint64_t credits = 0;
    uint64_t bytes = 0;
  };

  // Adds a stream of `credits` and `bytes` to `key`'s usage, or
  // RESOURCE_EXHAUSTED naming the limit (per_client.max_streams,
  // max_credits or max_memory) and the figures, leaving the usage as it was.
  absl::Status Reserve(const std::string& key, uint32_t credits, uint64_t bytes,
                       const ClientLimits& limits);
  // Takes a stream Reserve added away again.
  void Release(const std::string& key, uint32_t credits, uint64_t bytes);

  Usage Of(const std::string& key) const;
  size_t clients() const { return usage_.size(); }

 private:
  std::map<std::string, Usage> usage_;  // only clients with an open stream
};

}  // namespace conveyor::server
