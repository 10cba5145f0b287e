#include "remote/curl_handles.h"

#include "absl/strings/str_cat.h"

namespace conveyor::remote {

bool AppendCurlSlist(UniqueCurlSlist* list, const char* line) {
  curl_slist* grown = curl_slist_append(list->get(), line);
  if (grown == nullptr) return false;
  (void)list->release();  // (the head stays the same node but for the first append)
  list->reset(grown);
  return true;
}

absl::Status CurlError(absl::string_view what, CURLcode code) {
  if (code == CURLE_OK) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", curl_easy_strerror(code)));
}

absl::Status CurlMultiError(absl::string_view what, CURLMcode code) {
  if (code == CURLM_OK) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", curl_multi_strerror(code)));
}

absl::Status CurlOptions::status() const {
  return CurlError(absl::StrCat("curl_easy_setopt(", failed_, ")"), code_);
}

}  // namespace conveyor::remote
