#include "server/transport/secret.h"

#include <openssl/crypto.h>
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
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace conveyor::server
