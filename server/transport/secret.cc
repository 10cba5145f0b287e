#include "server/transport/secret.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "core/base/posix_error.h"

namespace conveyor::server {

absl::Status NewSecret(Secret* secret) {
  size_t got = 0;
  while (got < secret->size()) {
    const ssize_t r = getrandom(secret->data() + got, secret->size() - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return PosixError("getrandom", errno);
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

bool ConstantTimeEqual(const Secret& a, const Secret& b) {
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | (a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace conveyor::server
