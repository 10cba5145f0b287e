#include "remote/cached_output_store.h"

#include <openssl/sha.h>

#include <array>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace conveyor::remote {

namespace {

// Bump when the entries' layout changes (the bytes are a sample's output as
// the decode stage writes it into a slot).
constexpr char kOutputTag[] = "conveyor-output-v1";

ObjectValidators OutputValidators(uint64_t size) { return ObjectValidators{kOutputTag, "", size}; }

}  // namespace

std::string OutputEntryKey(std::string_view output_key) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> d{};
  SHA256(reinterpret_cast<const unsigned char*>(output_key.data()), output_key.size(), d.data());
  return absl::StrCat("conveyor-output:", absl::BytesToHexString(absl::string_view(
                                              reinterpret_cast<const char*>(d.data()), d.size())));
}

bool CachedOutputStore::Get(std::string_view key, std::vector<uint8_t>* out) {
  const std::string k = OutputEntryKey(key);
  const std::optional<ObjectValidators> v = cache_->ValidatorsOf(k);
  if (!v.has_value() || v->etag != kOutputTag) return false;
  return cache_->Get(k, *v, out);
}

void CachedOutputStore::Put(std::string_view key, std::span<const uint8_t> bytes) {
  cache_->Put(OutputEntryKey(key), OutputValidators(bytes.size()), bytes);
}

}  // namespace conveyor::remote
