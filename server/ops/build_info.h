// What build of conveyord this is: the project's version (CMake's
// PROJECT_VERSION) and the git commit it was configured from ("unknown"
// when the source is not a git checkout, or git is missing), as the
// conveyor_build_info{version,revision} metric shows them. The revision is
// taken when CMake configures the build, which it does again by itself when
// HEAD or its branch moves (server/CMakeLists.txt).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace conveyor::server {

std::string_view BuildVersion();
std::string_view BuildRevision();

// The conveyor_build_info family (a gauge that is always 1) in the text
// exposition format.
std::string RenderBuildInfo(std::string_view version, std::string_view revision);

}  // namespace conveyor::server
