#include "client/cpp/address.h"

#include "absl/status/status.h"

namespace conveyor::client {

absl::StatusOr<std::string> GrpcTarget(std::string_view address) {
  if (address.empty()) return absl::InvalidArgumentError("empty server address");
  if (address.front() == '/') return "unix://" + std::string(address);
  return std::string(address);
}

std::optional<std::string> TcpHost(std::string_view address) {
  if (address.empty() || address.front() == '/' || address.starts_with("unix:") ||
      address.starts_with("unix-abstract:")) {
    return std::nullopt;
  }
  for (std::string_view prefix : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (address.starts_with(prefix)) {
      address.remove_prefix(prefix.size());
      break;
    }
  }
  address = address.substr(0, address.find(','));  // "ipv4:a:p,b:p": the first one
  const size_t colon = address.rfind(':');
  std::string_view host = colon == std::string_view::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) return std::nullopt;
  return std::string(host);
}

}  // namespace conveyor::client
