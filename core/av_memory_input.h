// AvMemoryInput: opens an FFmpeg demuxer over a sample's bytes already in
// memory (the Fetch stage read them), through a custom AVIOContext — no
// temporary file, no second copy. The container is probed from the bytes
// (content, never the file name). A deadline, checked by FFmpeg's interrupt
// callback, stops a demuxer that a hostile file keeps busy.
//
// Thread-safety: one instance per thread at a time; the bytes must outlive
// it and stay unchanged.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "core/av_handles.h"

namespace conveyor {

class AvMemoryInput {
 public:
  struct Options {
    // Only this demuxer (FFmpeg's short name, e.g. "image2pipe"'s kin
    // "png_pipe"), or empty to probe.
    absl::string_view format_name;
    // Open and every later demux call fail with DeadlineExceeded after it.
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  };

  // InvalidArgument (an error of the sample) when no demuxer recognises the
  // bytes or the header is corrupt; each message starts with `what`.
  static absl::StatusOr<std::unique_ptr<AvMemoryInput>> Open(std::span<const uint8_t> bytes,
                                                             absl::string_view what,
                                                             const Options& options);
  ~AvMemoryInput();
  AvMemoryInput(const AvMemoryInput&) = delete;
  AvMemoryInput& operator=(const AvMemoryInput&) = delete;

  AVFormatContext* format() const { return format_.get(); }

  // Moves the deadline (e.g. per clip).
  void set_deadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }
  bool past_deadline() const { return std::chrono::steady_clock::now() > deadline_; }

 private:
  AvMemoryInput(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  static int ReadPacket(void* opaque, uint8_t* buf, int buf_size);
  static int64_t Seek(void* opaque, int64_t offset, int whence);
  static int Interrupt(void* opaque);

  std::span<const uint8_t> bytes_;
  size_t position_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  AVIOContext* io_ = nullptr;  // owned; freed in the destructor after format_
  AvFormatInput format_;
};

}  // namespace conveyor
