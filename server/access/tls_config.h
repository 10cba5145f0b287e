// TlsConfig: TLS on the TCP listener and its data socket (the listen.tls
// config section). Owned by the access layer that uses it (the TLS
// contexts and credentials); server/config/ only parses it. The files are
// paths (absolute, lexically normal); they are read when the daemon starts
// and watched for renewal while it runs.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <string>

namespace conveyor::server {

struct TlsConfig {
  std::string cert;       // PEM certificate chain of the server
  std::string key;        // PEM private key of `cert`
  std::string client_ca;  // PEM CAs whose client certificates are verified; "" = none asked
  bool require_client_cert = false;  // refuse clients without a certificate (needs client_ca)
  // How often the files are checked for a renewed certificate, key or CA.
  uint32_t reload_interval_seconds = 60;

  bool enabled() const { return !cert.empty(); }
};

}  // namespace conveyor::server
