// Where an s3://bucket/key object is fetched from (path-style or
// virtual-hosted addressing on the configured endpoint, the key
// percent-encoded), and the error code an S3 error answer names.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "remote/s3_credentials.h"

namespace conveyor::remote {

// Percent-encodes an S3 key for the URL path (unreserved bytes and '/' kept).
std::string EncodeS3Key(std::string_view key);

struct S3Address {
  std::string url;   // what is fetched
  std::string host;  // host[:port] of `url`: the unit of the per-host limits
};

// endpoint/bucket/key when s3.path_style, else scheme://bucket.endpoint-host/key.
S3Address S3ObjectAddress(const S3Config& s3, const std::string& bucket, const std::string& key);

// S3's error code from an XML error body ("NoSuchKey", escaped, at most 64
// bytes), or "".
std::string S3ErrorCode(const std::vector<uint8_t>& body);

}  // namespace conveyor::remote
