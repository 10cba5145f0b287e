#include "server/ops/logging.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/base/text_escape.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {

void Append(spdlog::memory_buf_t& dest, std::string_view s) {
  dest.append(s.data(), s.data() + s.size());
}

// syslog priorities (sd-daemon(3)): the journal reads "<N>" at a line's start.
int SyslogPriority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug: return 7;
    case spdlog::level::info: return 6;
    case spdlog::level::warn: return 4;
    case spdlog::level::err: return 3;
    case spdlog::level::critical: return 2;
    default: return 6;
  }
}

std::string_view Payload(const spdlog::details::log_msg& msg) {
  return std::string_view(msg.payload.data(), msg.payload.size());
}

}  // namespace

std::string JsonEscape(std::string_view text) {
  // Make it UTF-8 first (JSON strings are), keeping valid text untouched.
  const std::string valid = IsValidUtf8(text) ? std::string(text) : EscapeText(text);
  std::string out;
  out.reserve(valid.size() + 8);
  for (const char ch : valid) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(ch);
        }
    }
  }
  return out;
}

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const auto since_epoch = msg.time.time_since_epoch();
  const time_t seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count() % 1000000;
  struct tm utc;
  gmtime_r(&seconds, &utc);
  char ts[64];
  std::snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(micros));
  const auto level = spdlog::level::to_string_view(msg.level);
  Append(dest, absl::StrFormat(
                   R"({"ts":"%s","level":"%s","logger":"%s","thread":%d,"msg":"%s")", ts,
                   JsonEscape(std::string_view(level.data(), level.size())),
                   JsonEscape(std::string_view(msg.logger_name.data(), msg.logger_name.size())),
                   msg.thread_id, JsonEscape(Payload(msg))));
  // Where a library's message came from (gRPC's: server/ops/grpc_logging.h).
  if (msg.source.filename != nullptr) {
    Append(dest, absl::StrFormat(R"(,"file":"%s","line":%d)", JsonEscape(msg.source.filename),
                                 msg.source.line));
  }
  Append(dest, "}\n");
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const {
  return std::make_unique<JsonLogFormatter>();
}

void JournalLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const auto letter = spdlog::level::to_short_c_str(msg.level);
  Append(dest, absl::StrFormat("<%d>%s ", SyslogPriority(msg.level), letter));
  Append(dest, Payload(msg));
  Append(dest, "\n");
}

std::unique_ptr<spdlog::formatter> JournalLogFormatter::clone() const {
  return std::make_unique<JournalLogFormatter>();
}

bool IsJournalStream(const char* journal_stream, int fd) {
  if (journal_stream == nullptr) return false;
  const std::vector<std::string> parts = absl::StrSplit(journal_stream, ':');
  uint64_t dev = 0, ino = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &dev) || !absl::SimpleAtoi(parts[1], &ino))
    return false;
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  return static_cast<uint64_t>(st.st_dev) == dev && static_cast<uint64_t>(st.st_ino) == ino;
}

void SetUpLogging(const std::string& level, const std::string& format) {
  auto logger = spdlog::get("conveyord");
  if (logger == nullptr) logger = spdlog::stderr_color_mt("conveyord");
  spdlog::set_default_logger(logger);
  if (format == "json") {
    logger->set_formatter(std::make_unique<JsonLogFormatter>());
  } else if (IsJournalStream(std::getenv("JOURNAL_STREAM"), STDERR_FILENO)) {
    logger->set_formatter(std::make_unique<JournalLogFormatter>());
  } else {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ %v");
  }
  SetLogLevel(level);
  spdlog::flush_on(spdlog::level::info);
}

void SetLogLevel(const std::string& level) {
  spdlog::set_level(spdlog::level::from_str(level == "warning" ? "warn" : level));
}

}  // namespace conveyor::server
