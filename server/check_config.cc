#include "server/check_config.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/config/loader.h"

namespace conveyor::server {

std::string SchemaOnlyCheckReport(const std::string& file, const DaemonConfig& config) {
  std::set<std::string> datasets;
  std::vector<std::string> names;
  for (const PipelineSpec& spec : config.pipelines) {
    datasets.insert(DatasetLoadKey(spec));
    names.push_back(spec.config.name);
  }
  return absl::StrCat(file, ": OK: ", config.pipelines.size(), " pipeline(s) on ", datasets.size(),
                      " dataset(s): ", absl::StrJoin(names, ", "),
                      " (--no-data: fields only; no dataset, token or TLS file was read)\n");
}

}  // namespace conveyor::server
