// How long an HTTP answer says it stays fresh (RFC 9111, section 4.2.1), as
// a shared cache reads it: Cache-Control's s-maxage, else its max-age, less
// the answer's Age; nothing (0) when the answer says no-cache or no-store,
// has neither directive, or has a malformed one. Expires is not read: an
// object without Cache-Control is revalidated at every read. The object
// cache (remote/cached_object_reader.h) serves an entry without asking the
// server again while the HEAD that named its version is this fresh.
//
// A pure function; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace conveyor::remote {

// `cache_control`: the Cache-Control field's value ("" when absent; several
// fields joined with ", "); `age`: the Age field's value ("" when absent).
// Seconds of freshness left, capped at a year.
uint64_t FreshSeconds(std::string_view cache_control, std::string_view age);

}  // namespace conveyor::remote
