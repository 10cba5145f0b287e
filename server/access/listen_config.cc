#include "server/access/listen_config.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace conveyor::server {

bool IsLoopbackAddress(const std::string& host_port) {
  std::string host = host_port.substr(0, host_port.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  host = absl::AsciiStrToLower(host);
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8, written as a dotted quad.
  int parts = 0;
  for (absl::string_view part : absl::StrSplit(host, '.')) {
    uint32_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v > 255 || (parts == 0 && v != 127)) return false;
    ++parts;
  }
  return parts == 4;
}

std::string DataSocketAddress(const ListenConfig& listen) {
  if (listen.tcp.empty() || listen.data_tcp == "none") return "";
  if (!listen.data_tcp.empty()) return listen.data_tcp;
  return listen.tcp.substr(0, listen.tcp.rfind(':')) + ":0";
}

}  // namespace conveyor::server
