// ObjectValidators: what an HTTP/S3 server says identifies one version of an
// object (its HEAD answer's ETag, Last-Modified and size). The object cache
// (remote/object_cache.h) serves an entry only for the validators it was
// stored with. Plain values.
#pragma once

#include <cstdint>
#include <string>

namespace conveyor::remote {

struct ObjectValidators {
  std::string etag;           // "" when the server gave none
  std::string last_modified;  // "" when the server gave none
  uint64_t size = 0;
  bool operator==(const ObjectValidators&) const = default;
};

}  // namespace conveyor::remote
