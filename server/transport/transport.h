// Transports: the ways a stream's batch bytes reach its client, behind one
// interface so that the service and the gRPC adapter hold no code of any
// one of them, and a new way is one more implementation.
//
//   SHARED_MEMORY  the client maps the stream's memfd, fetched on the fd
//                  hand-over socket (server/transport/shm.h)
//   DATA_SOCKET    the bytes travel on the daemon's data socket beside the
//                  gRPC call (server/transport/data_socket.h)
//   INLINE         the bytes are copied into each Batch message
//                  (server/transport/inline.h)
//   DEVICE_MEMORY  the batches land in a ring of GPU buffers the client maps,
//                  its fd fetched like the memfd
//                  (server/transport/device/device_transport.h)
//
// A Transport is the daemon-wide half (what the daemon offers, whom it can
// serve, the per-daemon sockets); Open gives a StreamTransport, one
// stream's half, owned by the stream's Session. A TransportSet holds the
// daemon's transports in AUTO's order of preference and picks one per
// stream.
//
// Thread-safety: Transport and TransportSet methods may be called from any
// thread. A StreamTransport is used by its stream's owner (the reactor,
// under its lock): DescribeIn, Deliver and Finish are never called
// concurrently with each other; MustWaitForClient may be called from any
// thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conveyor/v1/conveyor.pb.h"
#include "core/engine/batch_layout.h"
#include "core/engine/stream.h"
#include "server/access/identity.h"

namespace conveyor::server {

// Whether a stream that ended with `status` still has a client that will
// read the batches already sent (fetch the region, drain the data socket):
// not when the client went away (CANCELLED) or the daemon is going
// (UNAVAILABLE).
bool ClientStillReads(const absl::Status& status);

// "shared_memory", "data_socket", "inline", "auto", for logs.
const char* TransportName(v1::Transport kind);

// One stream's transport.
class StreamTransport {
 public:
  virtual ~StreamTransport() = default;

  // Adds what the client needs to reach the bytes (secret, socket path,
  // port) to the stream's first message.
  virtual void DescribeIn(v1::StreamOpened* opened) const = 0;

  // Hands over the images of `batch`, whose header `message` already holds
  // (server/service/batch_message.h): sets images or images_offset, or queues the
  // bytes elsewhere. Called in stream order; must not block.
  // REQUIRES: the consumer holds batch.slot until the client releases it.
  virtual void Deliver(const BatchInfo& batch, v1::Batch* message) = 0;

  // Whether the call, which the stream ended with `end` (its last batch, or
  // an error of the stream), must stay open a while because the client may
  // still need the daemon to read what it was sent (a short stream can be
  // fully produced before its client fetched the region). The owner asks
  // again when woken (the `wake` of Transport::Open) and stops waiting
  // after its grace period anyway.
  virtual bool MustWaitForClient(const absl::Status& end) const { return false; }

  // The call is over with `end`; what was sent but not read yet is dropped
  // when no client is left to read it (!ClientStillReads(end)).
  virtual void Finish(const absl::Status& end) {}
};

// A way of handing over batches, as the daemon offers it.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual v1::Transport kind() const = 0;

  // Whether this transport can serve `request` from `client`:
  // OK, or FAILED_PRECONDITION saying what to ask for instead.
  virtual absl::Status CanServe(const v1::OpenStream& request,
                                const ClientIdentity& client) const = 0;

  // Whether TRANSPORT_AUTO may pick it for `request` from `client`.
  virtual bool OfferedByAuto(const v1::OpenStream& request, const ClientIdentity& client) const {
    return CanServe(request, client).ok();
  }

  // The kind of memory the stream's slots must be in (a memfd another
  // process can map, pinned for the device, ...: core/engine/slot_memory.h).
  virtual SlotMemory slot_memory() const { return SlotMemory::kPrivate; }

  // The asynchronous last step of the stream's batches between collation
  // and delivery (core/engine/batch_finisher.h), for a stream of `request`
  // on `pipeline`; null (the default) when batches are ready once collated.
  // Called once per stream, after CanServe, before the budget checks and
  // the engine opens it (a stream refused there drops it unattached); the
  // engine attaches it to the stream's slots and drains it when the stream
  // goes. An error (FAILED_PRECONDITION, RESOURCE_EXHAUSTED, ... naming
  // why) refuses the stream with it.
  virtual absl::StatusOr<std::shared_ptr<BatchFinisher>> MakeFinisher(
      const v1::OpenStream& request, const PipelineConfig& pipeline) const {
    return std::shared_ptr<BatchFinisher>();
  }

  // Whether the host slots hold uint8 samples even when the pipeline's
  // dtype is a float type (StreamOptions::collate_uint8): the finisher
  // converts and normalises.
  virtual bool collate_uint8() const { return false; }

  // Checks that a stream with batches of `layout` can be served
  // (INVALID_ARGUMENT saying what to change otherwise).
  virtual absl::Status CheckLayout(const BatchLayout& layout) const { return absl::OkStatus(); }

  // The transport of a newly opened `stream`. `wake` (may be null) is
  // called from any thread, with no lock of the transport held, when
  // MustWaitForClient may have changed.
  virtual absl::StatusOr<std::unique_ptr<StreamTransport>> Open(
      const std::shared_ptr<Stream>& stream, std::function<void()> wake) = 0;
};

class TransportSet {
 public:
  // `transports` in AUTO's order of preference, one per kind.
  explicit TransportSet(std::vector<std::unique_ptr<Transport>> transports)
      : transports_(std::move(transports)) {}

  // The transport for `request` from `client`: for TRANSPORT_AUTO the first
  // offered, else the one asked for. INVALID_ARGUMENT for an unknown kind,
  // FAILED_PRECONDITION (from CanServe) when it cannot serve this client.
  absl::StatusOr<Transport*> Choose(const v1::OpenStream& request,
                                    const ClientIdentity& client) const;

 private:
  const std::vector<std::unique_ptr<Transport>> transports_;
};

}  // namespace conveyor::server
