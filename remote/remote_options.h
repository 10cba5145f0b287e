// RemoteOptions: how the daemon reads remote objects (the config's `remote`
// section, config/README.md): per-host limits, timeouts, retries, the
// read-ahead memory bound and where S3 lives. Plain values.
#pragma once

#include <cstdint>
#include <string>

namespace conveyor::remote {

struct RemoteOptions {
  // Transfers in flight to one host at most (more wait their turn): the cap
  // of the adaptive limit, or the fixed limit without it.
  uint32_t max_connections_per_host = 64;
  // Whether each host's limit adapts (remote/host_concurrency.h: starts at
  // 4, grows by one per round of answers while their latency holds, halves
  // on refused/reset/timed-out connections, 503/429 and slow connects), or
  // stays max_connections_per_host.
  bool adaptive_connections = true;
  // Requests started per second per host at most; 0 = no limit.
  double requests_per_second_per_host = 0;
  uint32_t connect_timeout_ms = 5'000;
  // A whole request (connect + answer) longer than this fails (and is retried).
  uint32_t request_timeout_ms = 60'000;
  // Tries per request, the first included; retries wait with exponential
  // backoff and jitter between these two bounds.
  uint32_t max_attempts = 5;
  uint32_t initial_backoff_ms = 100;
  uint32_t max_backoff_ms = 5'000;
  // What a read whose attempts are all spent is. kStream: an error of the
  // system (the engine retries the read, then ends the stream UNAVAILABLE).
  // kSample: an error of that object's sample (its stream's error_policy
  // decides) while the host answers other objects; a host that has answered
  // nothing, or whose other objects fail too, stays an error of the system.
  enum class FailedObject { kStream, kSample };
  FailedObject failed_object = FailedObject::kStream;
  // Plain http:// GETs through the reader's own HTTP/1.1 client
  // (remote/direct_http_path.h: the body received straight into the
  // sample's buffer) rather than libcurl. Off by default: libcurl is the one
  // HTTP stack; the direct client saves about half of the I/O thread's CPU
  // per image over single files, 13-21% over tar runs (bench/README.md), for
  // where that thread is the bottleneck.
  bool direct_http = false;
  // I/O threads of a reader, each with its own libcurl multi handle and
  // epoll loop; each object (URL) is always read by the same one (a hash of
  // the URL), and the per-host limits and the read-ahead budget are split
  // between them. One thread carries roughly 10k single-file images/s with
  // libcurl (bench/README.md).
  uint32_t io_threads = 1;
  // Bytes of prefetched objects kept (or on their way) for reads to come.
  uint64_t read_ahead_bytes = 256ull << 20;
  // S3: endpoint URL ("" = AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else
  // https://s3.REGION.amazonaws.com), region ("" = AWS_REGION,
  // AWS_DEFAULT_REGION, else us-east-1) and the profile of the shared
  // credentials file ("" = AWS_PROFILE, else "default").
  std::string s3_endpoint;
  std::string s3_region;
  std::string s3_profile;
};

}  // namespace conveyor::remote
