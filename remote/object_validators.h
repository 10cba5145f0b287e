// ObjectValidators: what an HTTP/S3 server says identifies one version of an
// object (its HEAD answer's ETag, Last-Modified and size). The object cache
// (remote/object_cache.h) serves an entry only for the validators it was
// stored with. Beside them, not compared: how long the answer said it stays
// fresh (remote/http_freshness.h). Plain values.
#pragma once

#include <cstdint>
#include <string>

namespace conveyor::remote {

struct ObjectValidators {
  std::string etag;           // "" when the server gave none
  std::string last_modified;  // "" when the server gave none
  uint64_t size = 0;
  uint64_t fresh_seconds = 0;  // not a validator: left out of ==
  bool operator==(const ObjectValidators& o) const {
    return etag == o.etag && last_modified == o.last_modified && size == o.size;
  }
};

}  // namespace conveyor::remote
