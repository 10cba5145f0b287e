// RouteGrpcLogs: gRPC core's own messages ("Handshake failed with fatal
// error SSL_ERROR_SSL ..." when a plaintext client reaches the TLS port,
// "Failed to ... socket", ...) and protobuf's go through the daemon's log
// (server/ops/logging.h) instead of being written raw to stderr, so a
// log_format: json daemon writes nothing but JSON lines. They come from the
// logger named "grpc" (or "protobuf"), at their own severity (gRPC's DEBUG,
// INFO and ERROR become debug, info and error), escaped (gRPC may quote
// what a peer sent); the source file and line of gRPC's call are the json
// format's "file" and "line" keys, and end a text line as "(file:line)".
//
// How much gRPC says: GRPC_VERBOSITY in the environment when set (as gRPC
// documents it); otherwise errors only (gRPC's default), and everything at
// log_level debug or trace.
//
// Thread-safety: RouteGrpcLogs runs once at start, after SetUpLogging and
// before any gRPC object exists; the functions it installs may run on any
// thread at once (spdlog's loggers are thread-safe). SetGrpcLogLevel may be
// called at any time (a log_level reload).
#pragma once

#include <string>

namespace conveyor::server {

// `format`: the log_format ("text" or "json"); `level`: the log_level.
void RouteGrpcLogs(const std::string& format, const std::string& level);

// gRPC's verbosity for the daemon's log_level `level` (unless GRPC_VERBOSITY
// is set).
void SetGrpcLogLevel(const std::string& level);

}  // namespace conveyor::server
