#include "server/ops/metrics_http_server.h"

#include <civetweb.h>

#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/base/text_escape.h"
#include "server/ops/metrics_exposition.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {

// civetweb's own messages (a client that timed out, a bad request) go to
// our log, escaped: they may quote what a client sent.
int LogMessage(const mg_connection*, const char* message) {
  spdlog::debug("metrics endpoint: {}", EscapeText(message, kClientStringCap));
  return 1;  // handled: civetweb prints nothing itself
}

// Answers a method other than GET and HEAD with 405 (true), or says the
// request is a HEAD one.
bool RefuseMethod(mg_connection* conn, bool* head) {
  const mg_request_info* request = mg_get_request_info(conn);
  *head = std::strcmp(request->request_method, "HEAD") == 0;
  if (std::strcmp(request->request_method, "GET") == 0 || *head) return false;
  mg_printf(conn,
            "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\n"
            "Content-Type: text/plain\r\nContent-Length: 19\r\nConnection: close\r\n\r\n"
            "method not allowed\n");
  return true;
}

int Reply(mg_connection* conn, bool head, int code, const char* reason, const char* content_type,
          const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            code, reason, content_type, body.size());
  if (!head) mg_write(conn, body.data(), body.size());
  return code;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, Render render, Readiness ready) {
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(std::move(render), std::move(ready)));
  // Two threads answer scrapes (Prometheus scrapes one at a time); a
  // client gets 5 s to send its request and read the answer; no files.
  const char* options[] = {"listening_ports",
                           address.c_str(),
                           "num_threads",
                           "2",
                           "request_timeout_ms",
                           "5000",
                           "enable_keep_alive",
                           "no",
                           nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.log_message = LogMessage;
  mg_init_data init_data{&callbacks, server.get(), options};
  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error{&error_code, error_text, sizeof(error_text)};
  server->context_ = mg_start2(&init_data, &error);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ",
                     error_text[0] != '\0' ? EscapeText(error_text) : "civetweb failed to start",
                     " (is the port in use, or the address not one of this machine's?)"));
  }
  mg_server_port ports[4];
  std::memset(ports, 0, sizeof(ports));
  if (mg_get_server_ports(server->context_, 4, ports) < 1) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": no port bound"));
  }
  server->port_ = ports[0].port;
  mg_set_request_handler(server->context_, "/metrics$", &MetricsHttpServer::HandleMetrics,
                         server.get());
  mg_set_request_handler(server->context_, "/healthz$", &MetricsHttpServer::HandleHealth,
                         server.get());
  mg_set_request_handler(server->context_, "/readyz$", &MetricsHttpServer::HandleReady,
                         server.get());
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (context_ != nullptr) mg_stop(context_);
}

int MetricsHttpServer::HandleMetrics(mg_connection* conn, void* self) {
  bool head = false;
  if (RefuseMethod(conn, &head)) return 405;
  return Reply(conn, head, 200, "OK", kPrometheusContentType,
               static_cast<MetricsHttpServer*>(self)->render_());
}

int MetricsHttpServer::HandleHealth(mg_connection* conn, void* /*self*/) {
  bool head = false;
  if (RefuseMethod(conn, &head)) return 405;
  return Reply(conn, head, 200, "OK", "text/plain; charset=utf-8", "ok\n");
}

int MetricsHttpServer::HandleReady(mg_connection* conn, void* self) {
  bool head = false;
  if (RefuseMethod(conn, &head)) return 405;
  const Readiness& ready = static_cast<MetricsHttpServer*>(self)->ready_;
  const std::string why = ready ? ready() : std::string();
  if (why.empty()) return Reply(conn, head, 200, "OK", "text/plain; charset=utf-8", "ready\n");
  return Reply(conn, head, 503, "Service Unavailable", "text/plain; charset=utf-8",
               absl::StrCat("not ready: ", why, "\n"));
}

}  // namespace conveyor::server
