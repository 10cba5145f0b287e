// Client: the C++ client of conveyord. One gRPC channel to one daemon, from
// which streams of batches are opened (stream.h says how a stream and its
// batch leases behave).
//
//   ASSIGN_OR_RETURN(auto client,
//   conveyor::client::Client::Create("unix:///run/conveyor/conveyor.sock"));
//   conveyor::client::StreamOptions o;
//   o.pipeline = "imagenet-train"; o.batch_size = 256; o.seed = 0;
//   ASSIGN_OR_RETURN(auto stream, client.OpenStream(o));
//   while (true) {
//     ASSIGN_OR_RETURN(std::optional<BatchLease> batch, stream->Next());
//     if (!batch) break;                 // end of the stream
//     Train(batch->images(), batch->header().labels());
//   }                                    // each lease releases its slot here
//
// Addresses: "unix:///path.sock" or an absolute path (batches in shared
// memory handed over as an fd), "host:port" (batches on the daemon's data
// socket beside the gRPC call; inline in the messages when the daemon has
// none). TCP is plaintext here: a daemon whose listener uses TLS is not
// reachable by this client (the Python client speaks TLS). A bearer token,
// when given, goes with every call.
//
// The channel connects lazily: a wrong address shows as Unavailable from
// the first call (ListPipelines or OpenStream), with gRPC's reason.
//
// Thread-safety: a Client is safe for concurrent use (its methods are
// const; gRPC channels and stubs are thread-safe). Streams may outlive the
// Client that opened them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cpp/stream.h"

namespace conveyor::client {

struct ClientOptions {
  std::string token;  // bearer token for every call; empty: none
};

class Client {
 public:
  // InvalidArgument for an empty address or a token that is not one line of
  // printable ASCII without spaces.
  static absl::StatusOr<Client> Create(std::string_view address, ClientOptions options = {});

  // The pipelines the daemon serves to this client.
  absl::StatusOr<std::vector<v1::PipelineInfo>> ListPipelines(
      absl::Duration timeout = absl::Seconds(10)) const;

  // Opens a stream (see stream.h); the daemon's refusal comes back with its
  // code (NOT_FOUND for an unknown pipeline, INVALID_ARGUMENT for a bad
  // field, ...) and message.
  absl::StatusOr<std::unique_ptr<Stream>> OpenStream(const StreamOptions& options) const;

  const std::string& target() const { return target_; }

 private:
  Client() = default;

  std::string target_;
  std::optional<std::string> data_host_;  // the TCP host; nullopt on a unix socket
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<v1::Conveyor::Stub> stub_;
};

}  // namespace conveyor::client
