// Tests of the data socket under TLS (server/transport/data_socket_server.h with a
// TlsConfig, server/access/tls_context.h) with real TCP connections on 127.0.0.1
// and certificates made here with OpenSSL: batches larger than the socket
// buffer arrive byte-identical through SSL_write's partial writes; a
// plaintext client is closed without holding up a TLS stream; a client
// trusting another certificate fails its handshake; a renewed certificate
// serves new connections, and unusable renewed files keep the old one.
// Compiled only with the server library.
#ifdef CONVEYOR_HAVE_SERVER

#include <netinet/in.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/base/unique_fd.h"
#include "server/access/tls_context.h"
#include "server/transport/data_socket_server.h"
#include "tests/unit/eventually.h"
#include "tests/unit/socket_test_util.h"
#include "tests/unit/temp_dir.h"

namespace conveyor::server {
namespace {

using testing::Eventually;
using testing::TempDir;

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct FileClose {
  void operator()(FILE* f) const { std::fclose(f); }
};

// Writes a self-signed P-256 certificate for 127.0.0.1 named `cn` to
// `cert_path` and its key to `key_path` (the certificate is its own CA).
void MakeSelfSigned(const std::string& cn, const std::string& cert_path,
                    const std::string& key_path) {
  std::unique_ptr<EVP_PKEY, KeyFree> key(EVP_EC_gen("P-256"));
  REQUIRE(key != nullptr);
  std::unique_ptr<X509, X509Free> cert(X509_new());
  REQUIRE(cert != nullptr);
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  for (auto [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1"},
                            std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, nullptr, nid, value);
    REQUIRE(ext != nullptr);
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  REQUIRE(X509_sign(cert.get(), key.get(), EVP_sha256()) > 0);
  // Renamed into place, as certificate managers do.
  {
    std::unique_ptr<FILE, FileClose> f(std::fopen((cert_path + ".new").c_str(), "w"));
    REQUIRE(f != nullptr);
    REQUIRE(PEM_write_X509(f.get(), cert.get()) == 1);
  }
  {
    std::unique_ptr<FILE, FileClose> f(std::fopen((key_path + ".new").c_str(), "w"));
    REQUIRE(f != nullptr);
    REQUIRE(PEM_write_PrivateKey(f.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) == 1);
  }
  REQUIRE(std::rename((cert_path + ".new").c_str(), cert_path.c_str()) == 0);
  REQUIRE(std::rename((key_path + ".new").c_str(), key_path.c_str()) == 0);
}

Secret MakeSecret(uint8_t seed) {
  Secret s;
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed + 5 * i);
  return s;
}

std::shared_ptr<std::vector<uint8_t>> Pattern(size_t n, uint8_t seed) {
  auto v = std::make_shared<std::vector<uint8_t>>(n);
  for (size_t i = 0; i < n; ++i) v->at(i) = static_cast<uint8_t>(seed + i * 13 + (i >> 12));
  return v;
}

UniqueFd Connect(int port) {
  UniqueFd fd = testing::ConnectLoopbackTcp(port);
  REQUIRE(fd.valid());
  return fd;
}

void Request(uint8_t out[40], uint64_t stream_id, const Secret& secret) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(stream_id >> (8 * i));
  std::memcpy(out + 8, secret.data(), secret.size());
}

// A blocking TLS client trusting only `ca_path`.
struct TlsClient {
  TlsClient(int port, const std::string& ca_path) : fd(Connect(port)) {
    ctx.reset(SSL_CTX_new(TLS_client_method()));
    REQUIRE(ctx != nullptr);
    REQUIRE(SSL_CTX_load_verify_locations(ctx.get(), ca_path.c_str(), nullptr) == 1);
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    ssl.reset(SSL_new(ctx.get()));
    REQUIRE(ssl != nullptr);
    SSL_set_fd(ssl.get(), fd.get());
  }
  // The TLS handshake then the stream's: the status byte, or -1 when either
  // failed.
  int Handshake(uint64_t stream_id, const Secret& secret) {
    if (SSL_connect(ssl.get()) != 1) {
      TakeOpenSslErrors();
      return -1;
    }
    uint8_t req[40];
    Request(req, stream_id, secret);
    if (SSL_write(ssl.get(), req, sizeof(req)) != static_cast<int>(sizeof(req))) return -1;
    uint8_t status = 0;
    return SSL_read(ssl.get(), &status, 1) == 1 ? status : -1;
  }
  std::vector<uint8_t> ReadExactly(size_t n) {
    std::vector<uint8_t> out(n);
    size_t got = 0;
    while (got < n) {
      const int r = SSL_read(ssl.get(), out.data() + got, static_cast<int>(n - got));
      REQUIRE(r > 0);
      got += static_cast<size_t>(r);
    }
    return out;
  }
  bool AtEnd() {
    uint8_t b;
    return SSL_read(ssl.get(), &b, 1) <= 0;
  }
  UniqueFd fd;
  SslCtxPtr ctx;
  SslPtr ssl;  // after fd: freed first
};

struct Pki {
  Pki() {
    MakeSelfSigned("first", cert, key);
    MakeSelfSigned("stranger", other_cert, other_key);
    tls.cert = cert;
    tls.key = key;
  }
  TempDir dir;
  std::string cert = dir.Sub("server.pem"), key = dir.Sub("server.key");
  std::string other_cert = dir.Sub("other.pem"), other_key = dir.Sub("other.key");
  TlsConfig tls;
};

TEST_CASE("TLS data socket: batches larger than the socket buffer arrive intact",
          "[data_socket][tls]") {
  Pki pki;
  auto server = DataSocketServer::Start("127.0.0.1:0", &pki.tls);
  REQUIRE(server.ok());
  std::atomic<int> failures{0};
  auto channel = (*server)->Open(7, MakeSecret(3), [&](absl::Status) { ++failures; });
  auto a = Pattern(6 << 20, 1);  // several times a socket buffer: partial writes
  auto b = Pattern(1234, 2);
  channel->Send(a->data(), a->size(), a);
  channel->Send(b->data(), b->size(), b);
  TlsClient client((*server)->port(), pki.cert);
  REQUIRE(client.Handshake(7, MakeSecret(3)) == 0);
  CHECK(client.ReadExactly(a->size()) == *a);
  CHECK(client.ReadExactly(b->size()) == *b);
  std::weak_ptr<std::vector<uint8_t>> weak_a = a;
  a.reset();
  CHECK(Eventually([&] { return weak_a.expired(); }));
  // A wrong secret is refused inside TLS.
  TlsClient wrong((*server)->port(), pki.cert);
  CHECK(wrong.Handshake(7, MakeSecret(4)) == 1);
  // Close(): the rest still arrives, then the connection ends.
  auto c = Pattern(3 << 20, 5);
  channel->Send(c->data(), c->size(), c);
  channel->Close();
  CHECK(client.ReadExactly(c->size()) == *c);
  // The end follows the last byte at once, not at the drain deadline (10 s):
  // a queue emptied by the server's own pass used to wait for that deadline.
  const auto last_byte = std::chrono::steady_clock::now();
  CHECK(client.AtEnd());
  CHECK(std::chrono::steady_clock::now() - last_byte < std::chrono::seconds(5));
  CHECK(failures == 0);
}

TEST_CASE("TLS data socket: plaintext and untrusting clients fail without holding up others",
          "[data_socket][tls]") {
  Pki pki;
  auto server = DataSocketServer::Start("127.0.0.1:0", &pki.tls);
  REQUIRE(server.ok());
  auto channel = (*server)->Open(9, MakeSecret(1), [](absl::Status) {});
  // A plaintext client's request is not a TLS hello: closed, no status byte.
  UniqueFd plain = Connect((*server)->port());
  uint8_t req[40];
  Request(req, 9, MakeSecret(1));
  REQUIRE(::send(plain.get(), req, sizeof(req), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(req)));
  uint8_t first = 0xff;
  const ssize_t r = ::recv(plain.get(), &first, 1, 0);
  CHECK((r <= 0 || first != 0));
  // A silent one and one that trusts another certificate.
  UniqueFd silent = Connect((*server)->port());
  TlsClient stranger((*server)->port(), pki.other_cert);
  CHECK(stranger.Handshake(9, MakeSecret(1)) == -1);
  // The stream's own client is served meanwhile.
  TlsClient client((*server)->port(), pki.cert);
  REQUIRE(client.Handshake(9, MakeSecret(1)) == 0);
  auto v = Pattern(100000, 7);
  channel->Send(v->data(), v->size(), v);
  CHECK(client.ReadExactly(v->size()) == *v);
}

TEST_CASE("TLS data socket: renewed files serve new connections, unusable ones keep the old",
          "[data_socket][tls]") {
  Pki pki;
  pki.tls.reload_interval_seconds = 0;  // look at the files on every accept
  auto server = DataSocketServer::Start("127.0.0.1:0", &pki.tls);
  REQUIRE(server.ok());
  uint64_t next_id = 1;
  // Whether a client trusting only `ca` completes a stream handshake now.
  auto served_with = [&](const std::string& ca) {
    const uint64_t id = next_id++;
    auto channel = (*server)->Open(id, MakeSecret(2), [](absl::Status) {});
    TlsClient client((*server)->port(), ca);
    return client.Handshake(id, MakeSecret(2)) == 0;
  };
  CHECK(served_with(pki.cert));
  const std::string first_cert = pki.dir.Write("first.pem", "");
  REQUIRE(std::rename(pki.cert.c_str(), first_cert.c_str()) == 0);
  MakeSelfSigned("second", pki.cert, pki.key);
  CHECK(Eventually([&] { return served_with(pki.cert); }));
  CHECK_FALSE(served_with(first_cert));
  // A half-written key: the second certificate stays in use.
  const std::string second_cert = pki.dir.Sub("second.pem");
  {
    std::unique_ptr<FILE, FileClose> in(std::fopen(pki.cert.c_str(), "r"));
    std::unique_ptr<FILE, FileClose> out(std::fopen(second_cert.c_str(), "w"));
    REQUIRE((in && out));
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), in.get())) > 0) std::fwrite(buf, 1, n, out.get());
  }
  {
    std::unique_ptr<FILE, FileClose> f(std::fopen(pki.key.c_str(), "w"));
    REQUIRE(f != nullptr);
    std::fputs("-----BEGIN PRIVATE KEY-----\ntrunc", f.get());
  }
  CHECK(served_with(second_cert));
  CHECK(served_with(second_cert));
}

TEST_CASE("TLS data socket: unusable files at start are refused naming the field",
          "[data_socket][tls]") {
  Pki pki;
  TlsConfig bad = pki.tls;
  bad.key = pki.other_key;  // another certificate's key
  auto server = DataSocketServer::Start("127.0.0.1:0", &bad);
  REQUIRE_FALSE(server.ok());
  CHECK(std::string(server.status().message()).find("listen.tls.key") != std::string::npos);
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
