// Owners of libcurl's handles and its one error helper: UniqueCurlEasy
// (curl_easy_cleanup), UniqueCurlMulti (curl_multi_cleanup) and
// UniqueCurlSlist (curl_slist_free_all), so no path forgets a handle, and
// CurlError / CurlMultiError, which turn a failed call's code into a status
// naming the call and libcurl's reason; CurlOptions sets options on a
// handle and keeps the first refusal.
//
// Thread-safety: the owners are as thread-safe as the handle they own
// (libcurl: one thread at a time per handle); the helpers are pure.
#pragma once

#include <memory>

#include <curl/curl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace conveyor::remote {

struct CurlEasyCleanup {
  void operator()(CURL* easy) const { curl_easy_cleanup(easy); }
};
struct CurlMultiCleanup {
  void operator()(CURLM* multi) const { curl_multi_cleanup(multi); }
};
struct CurlSlistFree {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

using UniqueCurlEasy = std::unique_ptr<CURL, CurlEasyCleanup>;
using UniqueCurlMulti = std::unique_ptr<CURLM, CurlMultiCleanup>;
using UniqueCurlSlist = std::unique_ptr<curl_slist, CurlSlistFree>;

// Appends `line` to `*list` (curl_slist_append); false when libcurl could
// not allocate (then `*list` is as it was).
bool AppendCurlSlist(UniqueCurlSlist* list, const char* line);

// OK for CURLE_OK; otherwise Internal "WHAT: <curl_easy_strerror>" (the
// caller picks another code where the failure means something else).
absl::Status CurlError(absl::string_view what, CURLcode code);
// OK for CURLM_OK; otherwise Internal "WHAT: <curl_multi_strerror>".
absl::Status CurlMultiError(absl::string_view what, CURLMcode code);

// Sets options on one easy handle and keeps the first one libcurl refused:
//   CurlOptions o(easy);
//   o.Set(CURLOPT_URL, url, "CURLOPT_URL");
//   RETURN_IF_ERROR(o.status());
class CurlOptions {
 public:
  explicit CurlOptions(CURL* easy) : easy_(easy) {}
  template <typename T>
  void Set(CURLoption option, T value, const char* name) {
    if (code_ != CURLE_OK) return;
    code_ = curl_easy_setopt(easy_, option, value);
    if (code_ != CURLE_OK) failed_ = name;
  }
  // OK, or Internal "curl_easy_setopt(NAME): <reason>" of the first refusal.
  absl::Status status() const;

 private:
  CURL* const easy_;
  CURLcode code_ = CURLE_OK;
  const char* failed_ = "";
};

}  // namespace conveyor::remote
