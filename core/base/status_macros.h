// Early-return helpers for absl::Status / absl::StatusOr, the one copy used by
// core/, server/ and their tools.
//
//   RETURN_IF_ERROR(DoThing());               // returns the Status if not OK
//   ASSIGN_OR_RETURN(auto fd, OpenThing());   // unwraps a StatusOr or returns
//
// Thread-safety: macros over values; nothing shared.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CONVEYOR_STATUS_CONCAT_INNER_(a, b) a##b
#define CONVEYOR_STATUS_CONCAT_(a, b) CONVEYOR_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                                       \
  do {                                                              \
    if (::absl::Status _conveyor_st = (expr); !_conveyor_st.ok()) { \
      return _conveyor_st;                                          \
    }                                                               \
  } while (0)

#define CONVEYOR_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = *std::move(tmp)

#define ASSIGN_OR_RETURN(lhs, expr) \
  CONVEYOR_ASSIGN_OR_RETURN_IMPL_(CONVEYOR_STATUS_CONCAT_(_conveyor_or_, __LINE__), lhs, expr)
