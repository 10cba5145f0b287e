#include "core/decode/decoder_versions.h"

#include <cstdio>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>
}

#include "absl/strings/str_format.h"

namespace conveyor {

std::string DecoderVersions() {
  return absl::StrFormat(
      "libjpeg-turbo=%d;libavcodec=%u;libavformat=%u;libavutil=%u;libswscale=%u;libswresample=%u",
      LIBJPEG_TURBO_VERSION_NUMBER, avcodec_version(), avformat_version(), avutil_version(),
      swscale_version(), swresample_version());
}

}  // namespace conveyor
