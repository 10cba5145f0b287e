// conveyor_client.hpp: a C++17 face of the C ABI (conveyor_client.h), header
// only: move-only RAII handles for the client, a stream and a batch, and
// errors as values (no exceptions). It needs nothing but the C header and
// the standard library, so a program built with any compiler, standard
// library, gRPC, protobuf or abseil can use it: libconveyor_client.so keeps
// its own private behind the C ABI. (The project's own C++ API,
// client/cpp/client.h, is not installed: it exposes the generated proto and
// abseil types, whose versions would have to match.)
//
//   conveyor::abi::Client client;
//   conveyor::abi::Status s = conveyor::abi::Client::Connect(address, &client);
//   conveyor_stream_options o = conveyor::abi::DefaultStreamOptions();
//   o.pipeline = "imagenet-train"; o.batch_size = 256;
//   conveyor::abi::Stream stream;
//   if (s.ok()) s = client.OpenStream(o, &stream);
//   conveyor::abi::Batch batch;
//   while (s.ok() && (s = stream.Next(&batch)).ok() && batch) {
//     Train(batch.info().images, batch.info().shape);  // the daemon's slot
//   }                                     // the previous batch is released
//   if (!s.ok()) Fail(s.name(), s.message);
//
// Thread-safety: as the C ABI's (conveyor_client.h): a Client may be used
// by several threads at once, a Stream by one at a time; a Batch may be
// released (destroyed) on any thread.
#ifndef CONVEYOR_CLIENT_HPP_
#define CONVEYOR_CLIENT_HPP_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "conveyor_client.h"

namespace conveyor {
namespace abi {

// A conveyor_status with the calling thread's conveyor_last_error() of the
// moment it failed.
struct Status {
  int code = CONVEYOR_OK;
  std::string message;

  bool ok() const { return code == CONVEYOR_OK; }
  const char* name() const { return conveyor_status_name(code); }
  // `code` with the message of the last failed call on this thread.
  static Status FromCode(int code) {
    return code == CONVEYOR_OK ? Status{} : Status{code, conveyor_last_error()};
  }
};

// The options with the library's defaults (conveyor_stream_options_init).
inline conveyor_stream_options DefaultStreamOptions() {
  conveyor_stream_options o{};
  conveyor_stream_options_init(&o, sizeof(o));
  return o;
}

// One sample field of a batch (conveyor_batch_field_*): views of the
// batch's bytes, valid while the batch is held. Sample i's value is
// data[offsets[i], offsets[i + 1]); present[i] is 1 where the sample has it.
struct FieldView {
  const char* name = nullptr;
  int32_t type = 0;  // CONVEYOR_FIELD_TEXT, ...
  uint32_t num_samples = 0;
  const uint32_t* offsets = nullptr;  // num_samples + 1
  const uint8_t* data = nullptr;
  uint64_t data_size = 0;
  const uint8_t* present = nullptr;  // num_samples

  // Sample i's value ("" where absent). REQUIRES i < num_samples.
  std::string_view value(uint32_t i) const {
    return std::string_view(reinterpret_cast<const char*>(data) + offsets[i],
                            offsets[i + 1] - offsets[i]);
  }
  bool has(uint32_t i) const { return present[i] != 0; }
};

// One batch the caller holds: a lease on a slot of the daemon, released by
// the destructor, Release() or the next Stream::Next into it.
class Batch {
 public:
  Batch() { info_.struct_size = sizeof(info_); }
  Batch(Batch&& other) noexcept
      : batch_(std::exchange(other.batch_, nullptr)), info_(other.info_) {}
  Batch& operator=(Batch&& other) noexcept {
    if (this != &other) {
      Release();
      batch_ = std::exchange(other.batch_, nullptr);
      info_ = other.info_;
    }
    return *this;
  }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch() { Release(); }

  // False when empty (released, moved from, or the stream's end).
  explicit operator bool() const { return batch_ != nullptr; }
  // Valid while the batch is held.
  const conveyor_batch_info& info() const { return info_; }
  // Copies the images (host or device) into `out` of `capacity` bytes.
  Status CopyImages(void* out, uint64_t capacity) const {
    return Status::FromCode(conveyor_batch_copy_images(batch_, out, capacity));
  }
  // The sample fields: how many (0 for an empty batch), and field `index`
  // (0 .. NumFields() - 1) or the one called `name` (NOT_FOUND if none).
  uint32_t NumFields() const {
    uint32_t n = 0;
    return batch_ != nullptr && conveyor_batch_field_count(batch_, &n) == CONVEYOR_OK ? n : 0;
  }
  Status GetField(uint32_t index, FieldView* out) const {
    FieldView f;
    uint32_t count = 0;
    int rc = conveyor_batch_field_info(batch_, index, &f.name, &f.type);
    if (rc == CONVEYOR_OK) rc = conveyor_batch_field_offsets(batch_, index, &f.offsets, &count);
    if (rc == CONVEYOR_OK) rc = conveyor_batch_field_data(batch_, index, &f.data, &f.data_size);
    if (rc == CONVEYOR_OK) rc = conveyor_batch_field_present(batch_, index, &f.present, nullptr);
    if (rc != CONVEYOR_OK) return Status::FromCode(rc);
    f.num_samples = count - 1;
    *out = f;
    return Status{};
  }
  Status GetField(const char* name, FieldView* out) const {
    uint32_t index = 0;
    int rc = conveyor_batch_find_field(batch_, name, &index);
    return rc == CONVEYOR_OK ? GetField(index, out) : Status::FromCode(rc);
  }
  // Gives the slot back to the daemon; the batch is empty after it.
  void Release() { conveyor_batch_release(std::exchange(batch_, nullptr)); }

 private:
  friend class Stream;
  conveyor_batch* batch_ = nullptr;
  conveyor_batch_info info_{};
};

// One stream of batches; closed (cancelled if it still runs) by the
// destructor. Batches still held stay readable until released.
class Stream {
 public:
  Stream() = default;
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      conveyor_stream_close(stream_);
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { conveyor_stream_close(stream_); }

  explicit operator bool() const { return stream_ != nullptr; }

  // Releases what *batch holds, then takes the next batch into it. OK with
  // an empty *batch: the stream ended. An error ends the stream.
  Status Next(Batch* batch) {
    batch->Release();
    int rc = conveyor_stream_next(stream_, &batch->batch_, &batch->info_);
    if (rc == CONVEYOR_END_OF_STREAM) return Status{};
    return Status::FromCode(rc);
  }
  Status Info(conveyor_stream_info* info) const {
    *info = conveyor_stream_info{};
    info->struct_size = sizeof(*info);
    return Status::FromCode(conveyor_stream_get_info(stream_, info));
  }
  // Where to resume after the last batch taken (resume_* of new options).
  Status ResumeState(uint64_t* epoch, uint64_t* offset, uint32_t* world_size) const {
    return Status::FromCode(conveyor_stream_resume_state(stream_, epoch, offset, world_size));
  }

 private:
  friend class Client;
  conveyor_stream* stream_ = nullptr;
};

// A client of one daemon; closed by the destructor (open streams stay
// usable).
class Client {
 public:
  Client() = default;
  Client(Client&& other) noexcept : client_(std::exchange(other.client_, nullptr)) {}
  Client& operator=(Client&& other) noexcept {
    if (this != &other) {
      conveyor_client_close(client_);
      client_ = std::exchange(other.client_, nullptr);
    }
    return *this;
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client() { conveyor_client_close(client_); }

  // `address` as conveyor_connect's; `token` may be empty (none).
  static Status Connect(const std::string& address, Client* out, const std::string& token = "") {
    conveyor_client* c = nullptr;
    int rc = conveyor_connect(address.c_str(), token.empty() ? nullptr : token.c_str(), &c);
    if (rc != CONVEYOR_OK) return Status::FromCode(rc);
    *out = Client();
    out->client_ = c;
    return Status{};
  }

  Status OpenStream(const conveyor_stream_options& options, Stream* out) {
    conveyor_stream* s = nullptr;
    int rc = conveyor_open_stream(client_, &options, &s);
    if (rc != CONVEYOR_OK) return Status::FromCode(rc);
    *out = Stream();
    out->stream_ = s;
    return Status{};
  }

 private:
  conveyor_client* client_ = nullptr;
};

}  // namespace abi
}  // namespace conveyor

#endif  // CONVEYOR_CLIENT_HPP_
