// Pure parts of remote reads: object URL parsing, redaction for messages,
// the retry policy (which failures, how long between tries), where S3
// settings and credentials come from (never shown in text) and where an S3
// object is fetched from.
#ifdef CONVEYOR_HAVE_SERVER
#include <curl/curl.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "catch2/catch.hpp"
#include "remote/backoff.h"
#include "remote/curl_handles.h"
#include "remote/s3_credentials.h"
#include "remote/s3_url.h"
#include "remote/url.h"
#include "temp_dir.h"

namespace conveyor::remote {
namespace {

TEST_CASE("ParseObjectUrl splits http, https and s3 URLs", "[remote]") {
  auto h = ParseObjectUrl("http://127.0.0.1:8080/a/b.jpg?x=1");
  REQUIRE(h.ok());
  CHECK(h->scheme == ObjectUrl::Scheme::kHttp);
  CHECK(h->authority == "127.0.0.1:8080");
  CHECK(h->path == "/a/b.jpg?x=1");
  auto s = ParseObjectUrl("HTTPS://user:pw@example.com");
  REQUIRE(s.ok());
  CHECK(s->scheme == ObjectUrl::Scheme::kHttps);
  CHECK(s->authority == "example.com");
  CHECK(s->path == "/");
  auto b = ParseObjectUrl("s3://my-bucket/train/0001.jpg");
  REQUIRE(b.ok());
  CHECK(b->scheme == ObjectUrl::Scheme::kS3);
  CHECK(b->authority == "my-bucket");
  CHECK(b->path == "train/0001.jpg");
  CHECK(HostOf("[::1]:9000") == "::1");
  CHECK(HostOf("example.com:80") == "example.com");
}

TEST_CASE("ParseObjectUrl refuses bad URLs with a reason naming them", "[remote]") {
  const std::map<std::string, std::string> bad = {
      {"relative/path.jpg", "not scheme://"},
      {"ftp://host/x", "unknown scheme 'ftp'"},
      {"http:///x", "no host"},
      {"s3://bucket", "no key"},
      {"s3://bucket/", "no key"},
      {"s3:///key", "no bucket"},
      {"http://host/a b", "space or a control byte"},
  };
  for (const auto& [url, why] : bad) {
    INFO(url);
    auto u = ParseObjectUrl(url);
    REQUIRE_FALSE(u.ok());
    CHECK(u.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(u.status().message()), Catch::Contains(why));
  }
}

TEST_CASE("RedactUrl drops user:password and the query string", "[remote]") {
  CHECK(RedactUrl("https://bob:hunter2@host:443/a.jpg") == "https://host:443/a.jpg");
  CHECK(RedactUrl("https://host/a.jpg?X-Amz-Signature=abcdef&X-Amz-Credential=AKIA") ==
        "https://host/a.jpg?…");
  CHECK(RedactUrl("s3://bucket/key.jpg") == "s3://bucket/key.jpg");
  CHECK(RedactUrl("http://host/bad\xff") == "http://host/bad\\xff");
  auto u = ParseObjectUrl("gopher://bob:hunter2@host/x?sig=SECRET");
  REQUIRE_FALSE(u.ok());
  CHECK(std::string(u.status().message()).find("hunter2") == std::string::npos);
  CHECK(std::string(u.status().message()).find("SECRET") == std::string::npos);
}

TEST_CASE("RedactUrlsIn drops the secrets of every URL quoted in a message", "[remote]") {
  CHECK(StripUrlSecrets("https://bob:hunter2@host/a\xff.jpg?sig=S") == "https://host/a\xff.jpg?…");
  CHECK(RedactUrlsIn("urls.tsv:3: path 'http://bob:hunter2@h:8080/a/../b.jpg?X-Amz-Signature=S' "
                     "has a '..' component") ==
        "urls.tsv:3: path 'http://h:8080/a/../b.jpg?…' has a '..' component");
  // Several, at the start, at the end, with nothing to drop.
  CHECK(RedactUrlsIn("s3://b/k?x=1 and http://h/p and https://u:p@h2/q") ==
        "s3://b/k?… and http://h/p and https://h2/q");
  CHECK(RedactUrlsIn("no URL here: a://") == "no URL here: a://");
  CHECK(RedactUrlsIn("://x?y") == "://x?y");
  // Quoted and truncated before the '@': not host[:port], so hidden.
  CHECK(RedactUrlsIn("path 'http://bob:hunter2verylong...'") == "path 'http://…'");
  CHECK(RedactUrlsIn("'http://[::1]:80/x' 'http://h:80/x'") ==
        "'http://[::1]:80/x' 'http://h:80/x'");
}

TEST_CASE("Backoff doubles up to its cap, jittered within [base/2, base]", "[remote]") {
  BackoffPolicy p;
  p.initial_ns = 100;
  p.max_ns = 1000;
  const uint64_t bases[] = {100, 200, 400, 800, 1000, 1000};
  for (uint32_t retry = 1; retry <= 6; ++retry) {
    const uint64_t base = bases[retry - 1];
    INFO("retry " << retry);
    CHECK(p.DelayNs(retry, 0) == base / 2);
    CHECK(p.DelayNs(retry, base - base / 2) == base);
    for (uint64_t r : {1ull, 7ull, 12345ull, ~0ull}) {
      const uint64_t d = p.DelayNs(retry, r);
      CHECK(d >= base / 2);
      CHECK(d <= base);
    }
  }
  // Large retry counts neither overflow nor pass the cap.
  CHECK(p.DelayNs(1000, ~0ull) <= 1000);
  // Jitter spreads the retries of many readers.
  std::set<uint64_t> seen;
  for (uint64_t r = 0; r < 50; ++r) seen.insert(p.DelayNs(3, r * 2654435761u));
  CHECK(seen.size() > 10);
}

TEST_CASE("Retryable failures: 5xx, 429, 408, resets, timeouts; not 4xx", "[remote]") {
  for (long s : {500L, 502L, 503L, 504L, 429L, 408L}) CHECK(IsRetryableHttpStatus(s));
  for (long s : {200L, 206L, 400L, 401L, 403L, 404L, 416L}) CHECK_FALSE(IsRetryableHttpStatus(s));
  for (CURLcode c :
       {CURLE_COULDNT_CONNECT, CURLE_OPERATION_TIMEDOUT, CURLE_RECV_ERROR, CURLE_SEND_ERROR,
        CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE, CURLE_COULDNT_RESOLVE_HOST}) {
    CHECK(IsRetryableCurlCode(c));
  }
  for (CURLcode c : {CURLE_OK, CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL,
                     CURLE_PEER_FAILED_VERIFICATION, CURLE_WRITE_ERROR}) {
    CHECK_FALSE(IsRetryableCurlCode(c));
  }
}

struct FakeEnv {
  std::map<std::string, std::string> vars;
  std::function<const char*(const char*)> fn() const {
    return [this](const char* n) -> const char* {
      auto it = vars.find(n);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

TEST_CASE("S3 settings: options, then environment, then defaults", "[remote]") {
  FakeEnv env;
  env.vars = {{"AWS_ACCESS_KEY_ID", "AKIAEXAMPLE1234"},
              {"AWS_SECRET_ACCESS_KEY", "very/secret+key"},
              {"AWS_SESSION_TOKEN", "tok"},
              {"AWS_DEFAULT_REGION", "eu-west-1"},
              {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"}};
  RemoteOptions o;
  auto c = ResolveS3Config(o, env.fn());
  REQUIRE(c.ok());
  CHECK(c->endpoint == "http://127.0.0.1:9000");
  CHECK(c->path_style);
  CHECK(c->region == "eu-west-1");
  CHECK(c->access_key_id == "AKIAEXAMPLE1234");
  CHECK(c->secret_access_key == "very/secret+key");
  CHECK(c->session_token == "tok");
  const std::string d = c->Describe();
  CHECK_THAT(d, Catch::Contains("environment"));
  CHECK_THAT(d, Catch::Contains("…1234"));
  CHECK(d.find("very/secret") == std::string::npos);
  CHECK(d.find("AKIAEXAMPLE") == std::string::npos);

  o.s3_region = "ap-south-1";
  o.s3_endpoint = "https://minio.local:9000";
  c = ResolveS3Config(o, env.fn());
  REQUIRE(c.ok());
  CHECK(c->region == "ap-south-1");
  CHECK(c->endpoint == "https://minio.local:9000");

  FakeEnv empty;
  c = ResolveS3Config(RemoteOptions{}, empty.fn());
  REQUIRE(c.ok());
  CHECK(c->endpoint == "https://s3.us-east-1.amazonaws.com");
  CHECK_FALSE(c->path_style);
  CHECK(c->access_key_id.empty());

  o.s3_endpoint = "minio.local:9000";
  c = ResolveS3Config(o, env.fn());
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(std::string(c.status().message()), Catch::Contains("minio.local:9000"));
}

TEST_CASE("S3 credentials from the shared credentials file, by profile", "[remote]") {
  testing::TempDir dir;
  const std::string file = dir.path() + "/credentials";
  std::ofstream(file) << "[default]\naws_access_key_id = AKIADEFAULT0000\n"
                         "aws_secret_access_key = defaultsecret\n\n"
                         "# comment\n[train]\naws_access_key_id=AKIATRAIN9999\n"
                         "aws_secret_access_key=trainsecret\naws_session_token = t0k\n"
                         "[broken]\naws_access_key_id=AKIABROKEN\n";
  FakeEnv env;
  env.vars = {{"AWS_SHARED_CREDENTIALS_FILE", file}};
  RemoteOptions o;
  auto c = ResolveS3Config(o, env.fn());
  REQUIRE(c.ok());
  CHECK(c->access_key_id == "AKIADEFAULT0000");
  CHECK(c->secret_access_key == "defaultsecret");
  o.s3_profile = "train";
  c = ResolveS3Config(o, env.fn());
  REQUIRE(c.ok());
  CHECK(c->access_key_id == "AKIATRAIN9999");
  CHECK(c->session_token == "t0k");
  CHECK_THAT(c->Describe(), Catch::Contains("[train]"));
  CHECK(c->Describe().find("trainsecret") == std::string::npos);
  o.s3_profile = "nope";
  c = ResolveS3Config(o, env.fn());
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(std::string(c.status().message()), Catch::Contains("no profile 'nope'"));
  o.s3_profile = "broken";
  c = ResolveS3Config(o, env.fn());
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(std::string(c.status().message()), Catch::Contains("aws_secret_access_key"));
  // HOME's file is used when nothing else is set.
  std::filesystem::create_directories(dir.path() + "/home/.aws");
  std::filesystem::copy_file(file, dir.path() + "/home/.aws/credentials");
  FakeEnv home;
  home.vars = {{"HOME", dir.path() + "/home"}};
  c = ResolveS3Config(RemoteOptions{}, home.fn());
  REQUIRE(c.ok());
  CHECK(c->access_key_id == "AKIADEFAULT0000");
}

TEST_CASE("CurlError and CurlMultiError: OK stays OK, a failure names the call and the reason",
          "[remote]") {
  CHECK(CurlError("curl_easy_setopt(CURLOPT_URL)", CURLE_OK).ok());
  CHECK(CurlMultiError("curl_multi_add_handle", CURLM_OK).ok());
  const absl::Status e = CurlError("curl_easy_setopt(CURLOPT_URL)", CURLE_OUT_OF_MEMORY);
  CHECK(e.code() == absl::StatusCode::kInternal);
  CHECK(std::string(e.message()) ==
        std::string("curl_easy_setopt(CURLOPT_URL): ") + curl_easy_strerror(CURLE_OUT_OF_MEMORY));
  const absl::Status m = CurlMultiError("curl_multi_add_handle", CURLM_BAD_EASY_HANDLE);
  CHECK(m.code() == absl::StatusCode::kInternal);
  CHECK(std::string(m.message()) ==
        std::string("curl_multi_add_handle: ") + curl_multi_strerror(CURLM_BAD_EASY_HANDLE));
}

TEST_CASE("libcurl's owners: handles freed by their owners, options checked one by one",
          "[remote]") {
  UniqueCurlMulti multi(curl_multi_init());
  REQUIRE(multi != nullptr);
  UniqueCurlEasy easy(curl_easy_init());
  REQUIRE(easy != nullptr);
  UniqueCurlSlist headers;
  REQUIRE(AppendCurlSlist(&headers, "a: 1"));
  REQUIRE(AppendCurlSlist(&headers, "b: 2"));
  int n = 0;
  for (const curl_slist* l = headers.get(); l != nullptr; l = l->next) ++n;
  CHECK(n == 2);
  CHECK(std::string(headers->data) == "a: 1");
  CurlOptions ok(easy.get());
  ok.Set(CURLOPT_URL, "http://127.0.0.1:9/x", "CURLOPT_URL");
  ok.Set(CURLOPT_HTTPHEADER, headers.get(), "CURLOPT_HTTPHEADER");
  CHECK(ok.status().ok());
  // The first refusal is kept (and named); later options are not tried.
  CurlOptions bad(easy.get());
  bad.Set(CURLOPT_PROTOCOLS_STR, "no-such-protocol", "CURLOPT_PROTOCOLS_STR");
  bad.Set(CURLOPT_URL, "http://127.0.0.1:9/y", "CURLOPT_URL");
  REQUIRE_FALSE(bad.status().ok());
  CHECK_THAT(std::string(bad.status().message()),
             Catch::StartsWith("curl_easy_setopt(CURLOPT_PROTOCOLS_STR): "));
  CHECK(curl_multi_add_handle(multi.get(), easy.get()) == CURLM_OK);
  CHECK(CurlMultiError("curl_multi_add_handle", curl_multi_add_handle(multi.get(), easy.get()))
            .code() == absl::StatusCode::kInternal);  // (already added)
  CHECK(curl_multi_remove_handle(multi.get(), easy.get()) == CURLM_OK);
}

TEST_CASE("AuthorityOf: the host[:port] of an endpoint or URL", "[remote]") {
  CHECK(AuthorityOf("http://h:9000/b/k?x#y") == "h:9000");
  CHECK(AuthorityOf("https://[::1]:8443") == "[::1]:8443");
  CHECK(AuthorityOf("h.example/k") == "h.example");
}

TEST_CASE("S3 addressing: path-style and virtual-hosted URLs, the key percent-encoded",
          "[remote]") {
  S3Config s3;
  s3.endpoint = "http://127.0.0.1:9000";
  s3.path_style = true;
  S3Address a = S3ObjectAddress(s3, "bkt", "dir/a b+c~.jpg");
  CHECK(a.url == "http://127.0.0.1:9000/bkt/dir/a%20b%2Bc~.jpg");
  CHECK(a.host == "127.0.0.1:9000");
  s3.endpoint = "https://s3.eu-west-1.amazonaws.com";
  s3.path_style = false;
  a = S3ObjectAddress(s3, "bkt", "k/\xc3\xa9");
  CHECK(a.url == "https://bkt.s3.eu-west-1.amazonaws.com/k/%C3%A9");
  CHECK(a.host == "bkt.s3.eu-west-1.amazonaws.com");
}

TEST_CASE("S3ErrorCode reads <Code> of an error body, escaped and bounded", "[remote]") {
  auto bytes = [](std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  CHECK(S3ErrorCode(bytes("<Error><Code>NoSuchKey</Code><Message>m</Message></Error>")) ==
        "NoSuchKey");
  CHECK(S3ErrorCode(bytes("<html>not s3</html>")).empty());
  CHECK(S3ErrorCode(bytes("<Code>unterminated")).empty());
  CHECK(S3ErrorCode(bytes("<Code>" + std::string(500, 'x') + "</Code>")).size() == 64);
}

}  // namespace
}  // namespace conveyor::remote
#endif  // CONVEYOR_HAVE_SERVER
