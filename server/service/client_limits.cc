#include "server/service/client_limits.h"

#include "absl/strings/str_format.h"
#include "core/base/text_escape.h"

namespace conveyor::server {

absl::Status ClientUsage::Reserve(const std::string& key, uint32_t credits, uint64_t bytes,
                                  const ClientLimits& limits) {
  const Usage now = Of(key);
  const std::string who = EscapeText(key, kClientStringCap);
  if (limits.max_streams != 0 && now.streams + 1 > limits.max_streams) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "client %s has %d streams open, per_client.max_streams is %d; close one first", who,
        now.streams, limits.max_streams));
  }
  if (limits.max_credits != 0 && now.credits + credits > limits.max_credits) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("client %s holds %d credits over its %d open streams and asks %d more; "
                        "per_client.max_credits is %d: lower credits or close a stream",
                        who, now.credits, now.streams, credits, limits.max_credits));
  }
  if (limits.max_bytes != 0 && now.bytes + bytes > limits.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "client %s holds %d bytes of slot memory over its %d open streams and this stream "
        "needs %d more; per_client.max_memory is %d bytes: lower credits or batch_size, or "
        "close a stream",
        who, now.bytes, now.streams, bytes, limits.max_bytes));
  }
  Usage& u = usage_[key];
  ++u.streams;
  u.credits += credits;
  u.bytes += bytes;
  return absl::OkStatus();
}

void ClientUsage::Release(const std::string& key, uint32_t credits, uint64_t bytes) {
  auto it = usage_.find(key);
  if (it == usage_.end()) return;
  Usage& u = it->second;
  u.streams -= 1;
  u.credits -= credits;
  u.bytes -= bytes;
  if (u.streams == 0) usage_.erase(it);
}

ClientUsage::Usage ClientUsage::Of(const std::string& key) const {
  auto it = usage_.find(key);
  return it == usage_.end() ? Usage{} : it->second;
}

}  // namespace conveyor::server
