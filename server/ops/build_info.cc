#include "server/ops/build_info.h"

#include "absl/strings/str_cat.h"
#include "conveyor_build_info.h"  // generated: CONVEYOR_BUILD_VERSION, CONVEYOR_BUILD_REVISION
#include "server/ops/metrics_exposition.h"

namespace conveyor::server {

std::string_view BuildVersion() { return CONVEYOR_BUILD_VERSION; }
std::string_view BuildRevision() { return CONVEYOR_BUILD_REVISION; }

std::string RenderBuildInfo(std::string_view version, std::string_view revision) {
  return absl::StrCat(
      "# HELP conveyor_build_info The conveyord build: its version and the git revision it was "
      "built from; always 1.\n# TYPE conveyor_build_info gauge\nconveyor_build_info{version=\"",
      PrometheusLabelValue(version), "\",revision=\"", PrometheusLabelValue(revision), "\"} 1\n");
}

}  // namespace conveyor::server
