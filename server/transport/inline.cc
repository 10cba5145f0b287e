#include "server/transport/inline.h"

#include "absl/strings/str_format.h"

namespace conveyor::server {

namespace {

std::string Bytes(uint64_t b) {
  if (b >= (1ull << 20)) return absl::StrFormat("%.1f MiB", b / double(1ull << 20));
  return absl::StrFormat("%d B", b);
}

class InlineStream final : public StreamTransport {
 public:
  explicit InlineStream(Stream* stream) : stream_(stream) {}

  void DescribeIn(v1::StreamOpened* opened) const override { opened->mutable_inline_message(); }

  void Deliver(const BatchInfo& batch, v1::Batch* message) override {
    const uint8_t* images = stream_->arena().slot(batch.slot) + stream_->layout().images_offset;
    message->set_images(reinterpret_cast<const char*>(images), message->images_bytes());
  }

 private:
  Stream* const stream_;  // not owned; the session keeps it alive
};

}  // namespace

absl::Status InlineTransport::CheckLayout(const BatchLayout& layout) const {
  // Room for the rest of the message (labels, indices, failure texts).
  if (layout.slot_bytes + (1u << 20) > max_message_bytes_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "an INLINE batch of %s does not fit in one message (limit %s); lower batch_size or use "
        "SHARED_MEMORY over the unix socket",
        Bytes(layout.slot_bytes), Bytes(max_message_bytes_)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StreamTransport>> InlineTransport::Open(
    const std::shared_ptr<Stream>& stream, std::function<void()> /*wake*/) {
  return std::make_unique<InlineStream>(stream.get());
}

}  // namespace conveyor::server
