#include "core/gpu/device_api.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/gpu/none_device_api.h"

#ifdef CONVEYOR_HAVE_CUDA
#include "core/gpu/cuda_device_api.h"
#endif

namespace conveyor::gpu {
namespace {

// The UUID without "GPU-", lower case: how two spellings are compared.
// (Debian's abseil has a string_view of its own: converted here.)
std::string Canonical(std::string_view uuid) {
  absl::string_view u = absl::StripAsciiWhitespace(absl::string_view(uuid.data(), uuid.size()));
  if (absl::StartsWithIgnoreCase(u, "GPU-")) u.remove_prefix(4);
  return absl::AsciiStrToLower(u);
}

}  // namespace

absl::StatusOr<DeviceInfo> DeviceApi::Find(std::string_view uuid) {
  ASSIGN_OR_RETURN(std::vector<DeviceInfo> devices, Devices());
  const std::string want = Canonical(uuid);
  if (!want.empty()) {
    for (const DeviceInfo& d : devices) {
      if (Canonical(d.uuid) == want) return d;
    }
  }
  std::vector<std::string> known;
  for (const DeviceInfo& d : devices) known.push_back(absl::StrCat(d.uuid, " (", d.name, ")"));
  return absl::FailedPreconditionError(
      absl::StrCat(want.empty() ? std::string("no GPU UUID given")
                                : absl::StrCat("no GPU with UUID \"", std::string(uuid), "\""),
                   " on this host (", name(), "); its GPUs: ", absl::StrJoin(known, ", ")));
}

std::unique_ptr<DeviceApi> MakeDeviceApi() {
#ifdef CONVEYOR_HAVE_CUDA
  return NewCudaDeviceApi();
#else
  return std::make_unique<NoneDeviceApi>(
      "conveyord was built without CUDA (CONVEYOR_CUDA=OFF or no toolkit)");
#endif
}

}  // namespace conveyor::gpu
