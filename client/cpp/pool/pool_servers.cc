#include "client/cpp/pool/pool_servers.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace conveyor::client {
namespace {

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

absl::StatusOr<std::vector<std::string>> GetAddrInfo(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return absl::UnavailableError(gai_strerror(rc));
  std::vector<std::string> out;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    std::string address;
    if (ai->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr, text,
                sizeof(text));
      address = absl::StrCat(text, ":", port);
    } else if (ai->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr, text,
                sizeof(text));
      address = absl::StrCat("[", text, "]:", port);
    } else {
      continue;
    }
    if (std::find(out.begin(), out.end(), address) == out.end()) out.push_back(address);
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PoolServers>> PoolServers::Create(std::vector<std::string> entries,
                                                                 PoolResolver resolver) {
  if (entries.empty()) return absl::InvalidArgumentError("a pool needs at least one server");
  std::unique_ptr<PoolServers> s(new PoolServers);
  s->resolver_ = resolver ? std::move(resolver) : PoolResolver(GetAddrInfo);
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& e = entries[i];
    if (e.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("server ", i, " is an empty address"));
    }
    if (absl::StartsWith(e, "unix:") || e[0] == '/') continue;
    std::string host, port_text;
    if (e[0] == '[') {
      const size_t close = e.find("]:");
      if (close == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("server \"", e, "\": an IPv6 address is written [address]:port"));
      }
      host = e.substr(1, close - 1);
      port_text = e.substr(close + 2);
    } else {
      const size_t colon = e.rfind(':');
      if (colon == std::string::npos || colon == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "server \"", e, "\" is not \"host:port\", \"unix:///path.sock\" or a socket path"));
      }
      host = e.substr(0, colon);
      port_text = e.substr(colon + 1);
    }
    int port = 0;
    if (!absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("server \"", e, "\": the port must be a number in 1..65535"));
    }
    if (!IsIpLiteral(host)) s->names_[i] = {host, port};
  }
  s->entries_ = std::move(entries);
  return s;
}

void PoolServers::Resolve() {
  for (const auto& [entry, hp] : names_) {
    absl::StatusOr<std::vector<std::string>> answer = resolver_(hp.first, hp.second);
    MutexLock lock(&mu_);
    if (answer.ok() && !answer->empty()) {
      answers_[entry] = *std::move(answer);
      errors_.erase(hp.first);
    } else {
      errors_[hp.first] = answer.ok() ? "no address" : std::string(answer.status().message());
    }
  }
}

std::vector<PoolEndpoint> PoolServers::Current() const {
  std::vector<PoolEndpoint> out;
  std::set<std::string> seen;
  MutexLock lock(&mu_);
  for (size_t i = 0; i < entries_.size(); ++i) {
    auto name = names_.find(i);
    if (name == names_.end()) {
      if (seen.insert(entries_[i]).second) out.push_back({entries_[i], "", i});
      continue;
    }
    auto answer = answers_.find(i);
    if (answer == answers_.end()) continue;
    for (const std::string& a : answer->second) {
      if (seen.insert(a).second) out.push_back({a, name->second.first, i});
    }
  }
  return out;
}

std::map<std::string, std::string> PoolServers::Errors() const {
  MutexLock lock(&mu_);
  return errors_;
}

}  // namespace conveyor::client
