#include "core/decode/ffmpeg/memory_input.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/decode/ffmpeg/error.h"

extern "C" {
#include <libavutil/mem.h>
}

namespace conveyor {
namespace {
constexpr int kIoBufferBytes = 64 * 1024;
}  // namespace

int AvMemoryInput::ReadPacket(void* opaque, uint8_t* buf, int buf_size) {
  auto* self = static_cast<AvMemoryInput*>(opaque);
  // Custom I/O is not covered by FFmpeg's interrupt checks: check here too.
  if (self->budget_spent()) return AVERROR_EXIT;
  if (self->position_ >= self->bytes_.size()) return AVERROR_EOF;
  const size_t n = std::min(static_cast<size_t>(buf_size), self->bytes_.size() - self->position_);
  std::memcpy(buf, self->bytes_.data() + self->position_, n);
  self->position_ += n;
  return static_cast<int>(n);
}

int64_t AvMemoryInput::Seek(void* opaque, int64_t offset, int whence) {
  auto* self = static_cast<AvMemoryInput*>(opaque);
  const auto size = static_cast<int64_t>(self->bytes_.size());
  if (whence & AVSEEK_SIZE) return size;
  int64_t target = 0;
  switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET: target = offset; break;
    case SEEK_CUR: target = static_cast<int64_t>(self->position_) + offset; break;
    case SEEK_END: target = size + offset; break;
    default: return AVERROR(EINVAL);
  }
  if (target < 0 || target > size) return AVERROR(EINVAL);
  self->position_ = static_cast<size_t>(target);
  return target;
}

int AvMemoryInput::Interrupt(void* opaque) {
  return static_cast<const AvMemoryInput*>(opaque)->budget_spent() ? 1 : 0;
}

absl::StatusOr<std::unique_ptr<AvMemoryInput>> AvMemoryInput::Open(std::span<const uint8_t> bytes,
                                                                   absl::string_view what,
                                                                   const Options& options) {
  std::unique_ptr<AvMemoryInput> input(new AvMemoryInput(bytes));
  input->budget_ = options.budget;
  auto* buffer = static_cast<uint8_t*>(av_malloc(kIoBufferBytes));
  if (buffer == nullptr) return AvError(AVERROR(ENOMEM), what);
  input->io_ = avio_alloc_context(buffer, kIoBufferBytes, /*write_flag=*/0, input.get(),
                                  &AvMemoryInput::ReadPacket, nullptr, &AvMemoryInput::Seek);
  if (input->io_ == nullptr) {
    av_free(buffer);
    return AvError(AVERROR(ENOMEM), what);
  }
  AVFormatContext* format = avformat_alloc_context();
  if (format == nullptr) return AvError(AVERROR(ENOMEM), what);
  format->pb = input->io_;
  format->flags |= AVFMT_FLAG_CUSTOM_IO;
  format->interrupt_callback.callback = &AvMemoryInput::Interrupt;
  format->interrupt_callback.opaque = input.get();
  const AVInputFormat* forced = nullptr;
  if (!options.format_name.empty()) {
    forced = av_find_input_format(std::string(options.format_name).c_str());
    if (forced == nullptr) {
      avformat_free_context(format);
      return absl::InternalError(
          absl::StrCat(what, ": FFmpeg has no demuxer named ", options.format_name));
    }
  }
  // On failure avformat_open_input frees `format` and sets it to null.
  const int rc = avformat_open_input(&format, nullptr, forced, nullptr);
  if (rc < 0) return AvError(rc, absl::StrCat(what, ": not a recognised media file"));
  input->format_.reset(format);
  return input;
}

AvMemoryInput::~AvMemoryInput() {
  format_.reset();  // does not free pb (AVFMT_FLAG_CUSTOM_IO)
  if (io_ != nullptr) {
    av_freep(&io_->buffer);
    avio_context_free(&io_);
  }
}

}  // namespace conveyor
