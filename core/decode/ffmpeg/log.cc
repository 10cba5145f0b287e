#include "core/decode/ffmpeg/log.h"

#include <cstdarg>
#include <cstdio>
#include <string_view>

#include "core/base/text_escape.h"
#include "spdlog/spdlog.h"

extern "C" {
#include <libavutil/log.h>
}

namespace conveyor {
namespace {

void LogLine(void* avcl, int level, const char* format, va_list args) {
  if (level > AV_LOG_VERBOSE || !spdlog::should_log(spdlog::level::debug)) return;
  char line[1024];
  int print_prefix = 1;
  va_list copy;
  va_copy(copy, args);
  av_log_format_line2(avcl, level, format, copy, line, sizeof line, &print_prefix);
  va_end(copy);
  std::string_view text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  if (text.empty()) return;
  spdlog::debug("ffmpeg: {}", EscapeText(text));
}

}  // namespace

void RouteFfmpegLogs() { av_log_set_callback(&LogLine); }

}  // namespace conveyor
