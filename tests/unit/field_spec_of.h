// FieldSpecOf: a SampleFieldSpec (core/data/sample_fields.h) in one
// expression, for tests; the members not named keep their defaults.
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <utility>

#include "core/data/sample_fields.h"

namespace conveyor::testing {

inline SampleFieldSpec FieldSpecOf(std::string name, FieldType type, std::string member,
                                   bool required, uint32_t max_bytes, std::string npy_dtype = "") {
  SampleFieldSpec s;
  s.name = std::move(name);
  s.type = type;
  s.member = std::move(member);
  s.required = required;
  s.max_bytes = max_bytes;
  s.npy_dtype = std::move(npy_dtype);
  return s;
}

}  // namespace conveyor::testing
