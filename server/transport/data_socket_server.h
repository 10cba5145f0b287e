// DataSocketServer: the batch-data socket of DATA_SOCKET streams, the fast
// path for clients that reach the daemon over TCP. gRPC still carries every
// message of the stream (StreamOpened, Batch headers with labels and shapes,
// Release, EpochEnd, StreamEnd); only the image bytes of each batch travel on
// a TCP connection of their own (TLS under listen.tls, see below), sent
// straight from the batch slot with one kernel copy (plaintext) and read by the client straight
// into its buffer (a gRPC message of 9.6 MB costs several user-space copies on each side: see
// README, design decisions).
//
// Protocol (also in conveyor.proto, StreamOpened.data_port): the client
// connects to the daemon's host at `data_port` and makes the handshake of
// server/transport/handshake.h: the 8-byte little-endian stream id then the 32-byte
// secret from StreamOpened, answered by one status byte (0 = accepted,
// 1 = unknown stream or wrong secret, then the server closes). After a 0
// the server writes, for every Batch message of the stream and in the same
// order, exactly `images_bytes` bytes: that batch's images. The client
// sends nothing more; closing the connection ends the stream (UNAVAILABLE).
//
// TLS (listen.tls): with a TlsConfig the socket speaks TLS 1.2+ with the
// gRPC listener's certificate (and client certificates when client_ca is
// set; required with require_client_cert): the TLS handshake runs on the
// same thread without blocking and within the same 5 s, then the request,
// the status byte and the batch bytes travel inside TLS (written with
// SSL_write from the slot: one encryption pass, no extra copy). Renewed
// certificate files are picked up by new connections (ReloadingTlsContext,
// checked at most every reload_interval_seconds). Without TLS the bytes go
// from the slot to send() unchanged.
//
// One thread serves every connection with an EpollLoop
// (core/base/epoll_loop.h) and non-blocking sockets:
// sending never blocks an engine worker or a gRPC thread, and a client that
// stops reading only stops its own stream (credits bound what is queued for
// it). Limits: at most 128 connections may be waiting to send their
// request (more are closed at once); a handshake must complete within 5 s of
// the connect (both HandshakeAcceptor's); a stream's client must connect
// within 10 s of Open(), and the bytes still queued when a stream closes
// are kept for at most 10 s (a short stream can end before its client
// connected: the channel outlives the gRPC call). Out of fds, the thread
// pauses accepting (HandshakeAcceptor) instead of spinning.
//
// Thread-safety: every method, and Channel's, may be called from any thread.
// Channels stay valid after Stop() (their Sends are dropped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/unique_fd.h"
#include "server/access/tls_config.h"
#include "server/transport/secret.h"

namespace conveyor::server {

class DataSocketServer {
 public:
  class Core;  // the state shared by the server's thread and the channels

  // One stream's end of the data socket.
  class Channel {
   public:
    ~Channel();  // Close()
    Channel(const Channel&) = delete;
    Channel& operator=(const Channel&) = delete;

    // Queues [data, data + size) to be written to the client after every
    // byte queued before it. `keep_alive` owns the memory and is dropped
    // once the bytes are written (or the connection is gone); the bytes
    // must not change until then.
    void Send(const uint8_t* data, size_t size, std::shared_ptr<const void> keep_alive);

    // The stream is over: what is queued is still written, to a client
    // that may connect only now, for at most 10 s; then the connection
    // closes. Idempotent.
    void Close();

    // The stream is over and its client gone: queued bytes are dropped and
    // the connection closes now. Idempotent; wins over Close().
    void Abort();

   private:
    friend class DataSocketServer;
    Channel(std::shared_ptr<Core> core, uint64_t stream_id)
        : core_(std::move(core)), stream_id_(stream_id) {}
    const std::shared_ptr<Core> core_;
    const uint64_t stream_id_;
  };

  // Listens on `host_port` ("HOST:PORT", "[V6]:PORT"; port 0 picks a free
  // one) and starts the thread. With `tls` (enabled), connections speak TLS
  // with its files (InvalidArgument naming the field when they cannot).
  static absl::StatusOr<std::unique_ptr<DataSocketServer>> Start(const std::string& host_port,
                                                                 const TlsConfig* tls = nullptr);
  ~DataSocketServer();  // Stop()
  DataSocketServer(const DataSocketServer&) = delete;
  DataSocketServer& operator=(const DataSocketServer&) = delete;

  // The bound port.
  int port() const { return port_; }

  // Registers stream `stream_id`: its client may now connect with `secret`.
  // `on_failure` is called once (from the server's thread, no lock held) if
  // the connection fails before Close(): the client closed it, a write
  // failed, or the client did not connect in time.
  std::unique_ptr<Channel> Open(uint64_t stream_id, const Secret& secret,
                                std::function<void(absl::Status)> on_failure);

  // Ends the thread and closes every connection. Idempotent.
  void Stop();

 private:
  DataSocketServer(std::shared_ptr<Core> core, int port) : core_(std::move(core)), port_(port) {}

  const std::shared_ptr<Core> core_;
  const int port_;
  std::thread thread_;
};

}  // namespace conveyor::server
