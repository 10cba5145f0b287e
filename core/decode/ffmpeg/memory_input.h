// AvMemoryInput: opens an FFmpeg demuxer over a sample's bytes already in
// memory (the Fetch stage read them), through a custom AVIOContext — no
// temporary file, no second copy. The container is probed from the bytes
// (content, never the file name). A time budget (core/decode/ffmpeg/decode_budget.h:
// the thread's CPU time), checked by FFmpeg's interrupt callback and by the
// reader, stops a demuxer that a hostile file keeps busy.
//
// Thread-safety: one thread only (the budget runs on its CPU clock); the
// bytes must outlive it and stay unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "core/decode/ffmpeg/decode_budget.h"
#include "core/decode/ffmpeg/handles.h"

namespace conveyor {

class AvMemoryInput {
 public:
  struct Options {
    // Only this demuxer (FFmpeg's short name, e.g. "image2pipe"'s kin
    // "png_pipe"), or empty to probe.
    absl::string_view format_name;
    // Open and every later demux call fail (DeadlineExceeded, AVERROR_EXIT)
    // once it is spent.
    AvDecodeBudget budget;
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

  // Whether the budget is spent (the decoders check it between packets).
  bool budget_spent() const { return budget_.spent(); }

 private:
  AvMemoryInput(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  static int ReadPacket(void* opaque, uint8_t* buf, int buf_size);
  static int64_t Seek(void* opaque, int64_t offset, int whence);
  static int Interrupt(void* opaque);

  std::span<const uint8_t> bytes_;
  size_t position_ = 0;
  AvDecodeBudget budget_;
  AVIOContext* io_ = nullptr;  // owned; freed in the destructor after format_
  AvFormatInput format_;
};

}  // namespace conveyor
