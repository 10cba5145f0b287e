// How conveyord writes its log: spdlog's default logger on stderr, at the
// configured level (log_level / --log-level), in one of two formats
// (log_format):
//
//   text  "2026-11-30 20:15:08.123 I message" — or, when stderr is the
//         journal's stream (systemd's JOURNAL_STREAM names stderr's device
//         and inode), "<6>I message": journald stamps the time itself, and
//         the "<N>" syslog priority prefix gives each line its level there.
//   json  one JSON object per line with stable keys, in this order:
//         {"ts":"2026-11-30T20:15:08.123456Z","level":"info",
//          "logger":"conveyord","thread":1234,"msg":"..."}
//         and, on the lines of a library that says where it logged from
//         (logger "grpc": server/ops/grpc_logging.h), "file" and "line"
//         after "msg".
//         ts is UTC (RFC 3339, microseconds); level is spdlog's name (trace,
//         debug, info, warning, error, critical). The line is valid JSON
//         whatever the message holds: quotes, backslashes and control
//         characters are escaped, and bytes that are not UTF-8 are first
//         escaped as core/base/text_escape.h does.
//
// Thread-safety: SetUpLogging runs once at start, before other threads
// log; the formatters are used by spdlog under its sink's lock (each sink
// clones its own).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "spdlog/formatter.h"

namespace conveyor::server {

// `level`: a name ValidateLogLevel accepts; `format`: "text" or "json".
void SetUpLogging(const std::string& level, const std::string& format);

// Changes the least severe level logged (a config reload), from now on and
// for every logger; `level` as for SetUpLogging. Safe while other threads
// log (spdlog's levels are atomics).
void SetLogLevel(const std::string& level);

// Whether `journal_stream` (the value of $JOURNAL_STREAM, "DEV:INODE")
// names the file `fd` is open on.
bool IsJournalStream(const char* journal_stream, int fd);

// `text` as the contents of a JSON string (without the quotes).
std::string JsonEscape(std::string_view text);

// The json format above.
class JsonLogFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

// The text format for the journal: "<PRIORITY>L message".
class JournalLogFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

}  // namespace conveyor::server
