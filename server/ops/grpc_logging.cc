#include "server/ops/grpc_logging.h"

#include <grpc/support/log.h>

#include <cstdlib>
#include <memory>
#include <string_view>

#include "core/base/text_escape.h"
#include "google/protobuf/stubs/logging.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {

// gRPC's messages are short; a peer's bytes quoted in one are capped.
constexpr size_t kMessageCap = 4096;

// Set once by RouteGrpcLogs, before gRPC or protobuf may call the hooks;
// never freed (gRPC's threads may log while the process exits).
std::shared_ptr<spdlog::logger>* g_grpc_logger = nullptr;
std::shared_ptr<spdlog::logger>* g_protobuf_logger = nullptr;
bool g_location_in_text = true;  // text formats: "(file:line)" at the end

// A logger named `name` writing to the default logger's sinks (and so in
// its format), at its level, in spdlog's registry (spdlog::set_level
// reaches it too).
std::shared_ptr<spdlog::logger> SiblingLogger(const std::string& name) {
  if (auto existing = spdlog::get(name)) return existing;
  std::shared_ptr<spdlog::logger> base = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>(name, base->sinks().begin(), base->sinks().end());
  logger->set_level(base->level());
  logger->flush_on(spdlog::level::info);
  spdlog::register_logger(logger);
  return logger;
}

void Log(spdlog::logger& logger, spdlog::level::level_enum level, const char* file, int line,
         std::string_view message) {
  if (!logger.should_log(level)) return;
  std::string text = EscapeText(message, kMessageCap);
  if (g_location_in_text && file != nullptr) {
    logger.log(level, "{} ({}:{})", text, EscapeText(file), line);
  } else {
    logger.log(spdlog::source_loc{file, line, nullptr}, level, "{}", text);
  }
}

void GrpcLog(gpr_log_func_args* args) {
  spdlog::level::level_enum level = spdlog::level::err;
  switch (args->severity) {
    case GPR_LOG_SEVERITY_DEBUG: level = spdlog::level::debug; break;
    case GPR_LOG_SEVERITY_INFO: level = spdlog::level::info; break;
    case GPR_LOG_SEVERITY_ERROR: level = spdlog::level::err; break;
  }
  Log(**g_grpc_logger, level, args->file, args->line,
      args->message != nullptr ? args->message : "");
}

void ProtobufLog(google::protobuf::LogLevel severity, const char* file, int line,
                 const std::string& message) {
  spdlog::level::level_enum level = spdlog::level::err;
  switch (severity) {
    case google::protobuf::LOGLEVEL_INFO: level = spdlog::level::info; break;
    case google::protobuf::LOGLEVEL_WARNING: level = spdlog::level::warn; break;
    case google::protobuf::LOGLEVEL_ERROR: level = spdlog::level::err; break;
    case google::protobuf::LOGLEVEL_FATAL: level = spdlog::level::critical; break;
  }
  Log(**g_protobuf_logger, level, file, line, message);
}

}  // namespace

void SetGrpcLogLevel(const std::string& level) {
  const char* env = std::getenv("GRPC_VERBOSITY");
  if (env != nullptr && env[0] != '\0') return;  // the operator's choice, as gRPC reads it
  gpr_set_log_verbosity(level == "trace" || level == "debug" ? GPR_LOG_SEVERITY_DEBUG
                                                             : GPR_LOG_SEVERITY_ERROR);
}

void RouteGrpcLogs(const std::string& format, const std::string& level) {
  g_location_in_text = format != "json";
  if (g_grpc_logger == nullptr) {
    g_grpc_logger = new std::shared_ptr<spdlog::logger>(SiblingLogger("grpc"));
    g_protobuf_logger = new std::shared_ptr<spdlog::logger>(SiblingLogger("protobuf"));
  }
  SetGrpcLogLevel(level);
  gpr_set_log_function(GrpcLog);
  google::protobuf::SetLogHandler(ProtobufLog);
}

}  // namespace conveyor::server
