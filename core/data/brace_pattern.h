// Brace patterns of shard lists, as WebDataset writes them:
// "/data/train-{000000..000099}.tar" names 100 shards. A pattern holds any
// number of groups, each either a decimal range `{A..B}` (A <= B; when A is
// written with leading zeros, every number is zero-padded to A's width) or a
// list `{x,y,z}` (literal alternatives); the expansion is the product of the
// groups, leftmost varying slowest. Groups do not nest; '{' and '}' have no
// escape. A pattern without braces expands to itself.
//
// Thread-safety: pure function.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace conveyor {

// InvalidArgument naming the problem (unbalanced or nested brace, empty
// group, bad range, reversed range, more than `max_results` names).
absl::StatusOr<std::vector<std::string>> ExpandBraces(std::string_view pattern, size_t max_results);

}  // namespace conveyor
