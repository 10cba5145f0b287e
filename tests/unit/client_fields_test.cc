// Tests of the C++ client's sample fields (client/cpp/fields.h): valid
// columns read back as built; every hostile column (offsets of the wrong
// length, out of bounds, decreasing; lying lengths; bad present flags;
// unknown types; missing, unnamed, repeated or undeclared fields) is a
// protocol error naming the field; and a fuzz loop (fixed seed) over random
// and mutated columns, where every case is a valid result whose every value
// lies inside its data, or such an error. The client against a real daemon
// and a fake one is tests/integration/test_cpp_client_fields.py.
#if defined(CONVEYOR_HAVE_CLIENT)

#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "client/cpp/fields.h"

namespace conveyor::client {
namespace {

using Columns = google::protobuf::RepeatedPtrField<v1::FieldColumn>;
using Declared = google::protobuf::RepeatedPtrField<v1::FieldInfo>;

std::string Le32(const std::vector<uint32_t>& values) {
  std::string out;
  for (uint32_t v : values) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
  }
  return out;
}

// A valid column of `values` (nullopt: absent).
v1::FieldColumn Column(const std::string& name, v1::FieldType type,
                       const std::vector<std::optional<std::string>>& values) {
  v1::FieldColumn c;
  c.set_name(name);
  c.set_type(type);
  std::vector<uint32_t> offsets = {0};
  std::string data, present;
  for (const std::optional<std::string>& v : values) {
    if (v) data += *v;
    offsets.push_back(static_cast<uint32_t>(data.size()));
    present.push_back(v ? 1 : 0);
  }
  c.set_offsets(Le32(offsets));
  c.set_data(data);
  c.set_present(present);
  return c;
}

Declared Declare(const std::vector<std::pair<std::string, v1::FieldType>>& fields) {
  Declared out;
  for (const auto& [name, type] : fields) {
    v1::FieldInfo* f = out.Add();
    f->set_name(name);
    f->set_type(type);
  }
  return out;
}

Columns Of(std::vector<v1::FieldColumn> columns) {
  Columns out;
  for (v1::FieldColumn& c : columns) *out.Add() = std::move(c);
  return out;
}

const Declared kClip =
    Declare({{"caption", v1::FIELD_TEXT}, {"meta", v1::FIELD_JSON}, {"key", v1::FIELD_KEY}});

// The error of one column of a 3-sample batch, declared as itself.
absl::Status ColumnError(const v1::FieldColumn& c, uint32_t n = 3) {
  return ParseFields(Of({c}), n, Declare({{c.name(), c.type()}}), "batch 7").status();
}

// An INTERNAL protocol error of batch 7 naming field "caption" and saying `what`.
void RequireNamedError(const absl::Status& s, const std::string& what) {
  INFO(s.ToString());
  REQUIRE(s.code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(s.message()), Catch::StartsWith("protocol error: batch 7: "));
  CHECK_THAT(std::string(s.message()), Catch::Contains(what));
}

TEST_CASE("client fields: a valid batch reads back as built", "[client_fields]") {
  Columns columns = Of({Column("caption", v1::FIELD_TEXT, {"a caf\xc3\xa9", "", "xyz"}),
                        Column("meta", v1::FIELD_JSON, {"{\"i\": 0}", std::nullopt, "[1]"}),
                        Column("key", v1::FIELD_KEY, {"s0", "s\xff", "s2"})});
  absl::StatusOr<std::vector<Field>> fields = ParseFields(std::move(columns), 3, kClip, "batch 0");
  REQUIRE(fields.ok());
  REQUIRE(fields->size() == 3);
  const Field& caption = (*fields)[0];
  CHECK(caption.name() == "caption");
  CHECK(caption.type() == v1::FIELD_TEXT);
  CHECK(caption.size() == 3);
  CHECK(caption.value(0) == "a caf\xc3\xa9");
  CHECK(caption.value(1).empty());
  CHECK(caption.present(1));  // present and empty
  CHECK(caption.value(2) == "xyz");
  CHECK(std::vector<uint32_t>(caption.offsets().begin(), caption.offsets().end()) ==
        std::vector<uint32_t>{0, 7, 7, 10});
  CHECK(caption.data() == "a caf\xc3\xa9xyz");
  const Field& meta = (*fields)[1];
  CHECK_FALSE(meta.present(1));
  CHECK(meta.value(1).empty());
  CHECK(std::vector<uint8_t>(meta.present_flags().begin(), meta.present_flags().end()) ==
        std::vector<uint8_t>{1, 0, 1});
  CHECK((*fields)[2].value(1) == "s\xff");  // keys are bytes as stored

  // Past the values: "" and false, never a read outside the column.
  CHECK(caption.value(3).empty());
  CHECK_FALSE(caption.present(1000));
  CHECK(FindField(*fields, "key") == &(*fields)[2]);
  CHECK(FindField(*fields, "nope") == nullptr);
  CHECK(FieldTypeName(v1::FIELD_JSON) == "json");
  CHECK(FieldTypeName(static_cast<v1::FieldType>(42)) == "unknown");

  // Offsets are 4-byte aligned host values, and moving the vector (as a
  // BatchLease move does) moves no Field: views stay valid.
  CHECK(reinterpret_cast<uintptr_t>(caption.offsets().data()) % alignof(uint32_t) == 0);
  const char* bytes = caption.data().data();
  std::vector<Field> moved = std::move(*fields);
  CHECK(moved[0].data().data() == bytes);
}

TEST_CASE("client fields: no fields, and an empty batch without columns", "[client_fields]") {
  absl::StatusOr<std::vector<Field>> none = ParseFields(Columns(), 4, Declared(), "batch 1");
  REQUIRE(none.ok());
  CHECK(none->empty());
  // 0 samples, no columns: empty columns of the declared fields.
  absl::StatusOr<std::vector<Field>> empty = ParseFields(Columns(), 0, kClip, "batch 2");
  REQUIRE(empty.ok());
  REQUIRE(empty->size() == 3);
  for (const Field& f : *empty) {
    CHECK(f.size() == 0);
    CHECK(f.offsets().size() == 1);
    CHECK(f.offsets()[0] == 0);
    CHECK(f.data().empty());
  }
  CHECK((*empty)[1].name() == "meta");
  CHECK((*empty)[1].type() == v1::FIELD_JSON);
  // 0 samples with columns: checked like any others.
  CHECK(ParseFields(Of({Column("caption", v1::FIELD_TEXT, {}), Column("meta", v1::FIELD_JSON, {}),
                        Column("key", v1::FIELD_KEY, {})}),
                    0, kClip, "batch 3")
            .ok());
  // Samples but no columns, when the pipeline declares some: refused.
  absl::Status missing = ParseFields(Columns(), 2, kClip, "batch 7").status();
  RequireNamedError(missing,
                    "the batch's fields (none) differ from the pipeline's "
                    "[caption (text), meta (json), key (key)]");
}

TEST_CASE("client fields: bad offsets name the field and what is wrong", "[client_fields]") {
  v1::FieldColumn good = Column("caption", v1::FIELD_TEXT, {"ab", "c", "def"});  // 0 2 3 6
  REQUIRE(ColumnError(good).ok());

  v1::FieldColumn c = good;
  c.set_offsets(Le32({0, 2, 3}));  // one short
  RequireNamedError(ColumnError(c),
                    "field \"caption\": 12 bytes of offsets for 3 samples (16 expected: 4 uint32)");
  c.set_offsets(Le32({0, 2, 3, 6, 6}));  // one too many
  RequireNamedError(ColumnError(c), "20 bytes of offsets for 3 samples");
  c.set_offsets(Le32({0, 2, 3, 6}).substr(0, 15));  // not whole uint32
  RequireNamedError(ColumnError(c), "15 bytes of offsets");
  c.set_offsets("");
  RequireNamedError(ColumnError(c), "0 bytes of offsets");
  c.set_offsets(Le32({1, 2, 3, 6}));
  RequireNamedError(ColumnError(c), "offsets start at 1, not 0");
  c.set_offsets(Le32({0, 4, 3, 6}));
  RequireNamedError(ColumnError(c), "offsets decrease at sample 1 (3 after 4)");
  c.set_offsets(Le32({0, 2, 0xffffffffu, 6}));  // huge, then back down
  RequireNamedError(ColumnError(c), "offsets decrease at sample 2");
  c.set_offsets(Le32({0, 2, 3, 7}));  // past the data
  RequireNamedError(ColumnError(c), "offsets end at 7 but data has 6 bytes");
  c.set_offsets(Le32({0, 2, 3, 5}));  // short of the data
  RequireNamedError(ColumnError(c), "offsets end at 5 but data has 6 bytes");
  c.set_offsets(Le32({0, 2, 3, 0xffffffffu}));
  RequireNamedError(ColumnError(c), "offsets end at 4294967295 but data has 6 bytes");
}

TEST_CASE("client fields: lying lengths, bad flags and types are refused", "[client_fields]") {
  v1::FieldColumn good = Column("caption", v1::FIELD_TEXT, {"ab", std::nullopt, "def"});
  REQUIRE(ColumnError(good).ok());

  v1::FieldColumn c = good;
  c.set_data("abdefX");  // data longer than the offsets say
  RequireNamedError(ColumnError(c), "offsets end at 5 but data has 6 bytes");
  c = good;
  c.set_data("ab");
  RequireNamedError(ColumnError(c), "offsets end at 5 but data has 2 bytes");
  // The column is for 3 samples, the batch says 2 or 4.
  RequireNamedError(ColumnError(good, 2), "16 bytes of offsets for 2 samples");
  RequireNamedError(ColumnError(good, 4), "16 bytes of offsets for 4 samples");
  c = good;
  c.set_present(std::string("\x01\x00", 2));
  RequireNamedError(ColumnError(c), "2 bytes of present for 3 samples");
  c.set_present(std::string("\x01\x00\x01\x01", 4));
  RequireNamedError(ColumnError(c), "4 bytes of present for 3 samples");
  c.set_present(std::string("\x01\x00\x02", 3));
  RequireNamedError(ColumnError(c), "present[2] is 2 (0 or 1 expected)");
  c.set_present(std::string("\x01\x00\xff", 3));
  RequireNamedError(ColumnError(c), "present[2] is 255 (0 or 1 expected)");
  c.set_present(std::string("\x00\x00\x01", 3));  // absent, with bytes
  RequireNamedError(ColumnError(c), "sample 0 is absent but has 2 bytes");
  c = good;
  c.set_type(static_cast<v1::FieldType>(9));
  absl::Status unknown =
      ParseFields(Of({c}), 3, Declare({{"caption", v1::FIELD_TEXT}}), "batch 7").status();
  RequireNamedError(unknown, "field \"caption\": unknown type 9");
  c.set_type(v1::FIELD_TYPE_UNSPECIFIED);
  RequireNamedError(ColumnError(c), "unknown type 0");
}

TEST_CASE("client fields: names must be there, once, and the pipeline's", "[client_fields]") {
  auto caption = Column("caption", v1::FIELD_TEXT, {"a"});
  auto meta = Column("meta", v1::FIELD_JSON, {std::nullopt});
  auto key = Column("key", v1::FIELD_KEY, {"k"});
  REQUIRE(ParseFields(Of({caption, meta, key}), 1, kClip, "batch 7").ok());

  RequireNamedError(ParseFields(Of({caption, caption, key}), 1, kClip, "batch 7").status(),
                    "field \"caption\" comes twice");
  auto unnamed = Column("", v1::FIELD_TEXT, {"a"});
  RequireNamedError(ParseFields(Of({unnamed, meta, key}), 1, kClip, "batch 7").status(),
                    "a field without a name");
  auto nul = Column(std::string("cap\0tion", 8), v1::FIELD_TEXT, {"a"});
  RequireNamedError(ParseFields(Of({nul, meta, key}), 1, kClip, "batch 7").status(),
                    "a NUL byte in the field's name");
  const std::string differ = "the batch's fields ";
  RequireNamedError(ParseFields(Of({meta, caption, key}), 1, kClip, "batch 7").status(),
                    differ +
                        "[meta (json), caption (text), key (key)] differ from the "
                        "pipeline's [caption (text), meta (json), key (key)]");
  RequireNamedError(ParseFields(Of({caption, meta}), 1, kClip, "batch 7").status(),
                    differ + "[caption (text), meta (json)] differ");
  auto extra = Column("extra", v1::FIELD_BYTES, {"x"});
  RequireNamedError(ParseFields(Of({caption, meta, key, extra}), 1, kClip, "batch 7").status(),
                    "extra (bytes)] differ");
  auto wrong_type = Column("meta", v1::FIELD_TEXT, {std::nullopt});
  RequireNamedError(ParseFields(Of({caption, wrong_type, key}), 1, kClip, "batch 7").status(),
                    "meta (text)");
  RequireNamedError(ParseFields(Of({caption}), 1, Declared(), "batch 7").status(),
                    "[caption (text)] differ from the pipeline's (none)");
  // A hostile name is escaped in the message, and a long one capped.
  auto odd = Column("a\nb\x1b[31m" + std::string(1000, 'z'), v1::FIELD_TEXT, {"a"});
  odd.set_offsets("");
  absl::Status escaped = ParseFields(Of({odd}), 1, Declared(), "batch 7").status();
  RequireNamedError(escaped, "field \"a\\nb\\x1b[31m");
  CHECK(escaped.message().size() < 600);
  CHECK(escaped.message().find('\n') == absl::string_view::npos);
}

// One random column of n samples: valid, or valid then mutated.
v1::FieldColumn RandomColumn(std::mt19937_64& rng, uint32_t n, const std::string& name,
                             v1::FieldType type) {
  std::vector<std::optional<std::string>> values;
  for (uint32_t i = 0; i < n; ++i) {
    if (rng() % 4 == 0) {
      values.push_back(std::nullopt);
    } else {
      std::string v(rng() % 9, '\0');
      for (char& ch : v) ch = static_cast<char>(rng());
      values.push_back(v);
    }
  }
  v1::FieldColumn c = Column(name, type, values);
  // One column in four is mutated (1 to 3 times), the others stay valid.
  const int mutations = rng() % 4 == 0 ? static_cast<int>(1 + rng() % 3) : 0;
  for (int m = 0; m < mutations; ++m) {
    std::string* target = nullptr;
    switch (rng() % 3) {
      case 0: target = c.mutable_offsets(); break;
      case 1: target = c.mutable_data(); break;
      default: target = c.mutable_present(); break;
    }
    switch (rng() % 5) {
      case 0:  // flip a byte
        if (!target->empty())
          (*target)[rng() % target->size()] ^= static_cast<char>(1 + rng() % 255);
        break;
      case 1:  // cut
        target->resize(target->empty() ? 0 : rng() % target->size());
        break;
      case 2:  // grow
        target->append(1 + rng() % 6, static_cast<char>(rng()));
        break;
      case 3:  // a random offset word
        if (target == c.mutable_offsets() && target->size() >= 4) {
          const size_t at = 4 * (rng() % (target->size() / 4));
          const uint32_t v =
              rng() % 2 ? static_cast<uint32_t>(rng()) : static_cast<uint32_t>(rng() % 64);
          target->replace(at, 4, Le32({v}));
        }
        break;
      default:  // all random
        for (char& ch : *target) ch = static_cast<char>(rng());
        break;
    }
  }
  if (rng() % 50 == 0) c.set_type(static_cast<v1::FieldType>(rng() % 7));
  return c;
}

TEST_CASE("client fields: fuzz: every random or mutated batch is valid or a clear error",
          "[client_fields]") {
  std::mt19937_64 rng(20240607);
  int valid = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    const uint32_t n = static_cast<uint32_t>(rng() % 6);
    // The batch's columns: the declared ones, now and then shuffled,
    // dropped, repeated or renamed.
    Columns columns;
    for (const v1::FieldInfo& f : kClip) *columns.Add() = RandomColumn(rng, n, f.name(), f.type());
    switch (rng() % 16) {
      case 0: columns.SwapElements(0, 2); break;
      case 1: columns.RemoveLast(); break;
      case 2: *columns.Add() = columns.Get(0); break;
      case 3: columns.Mutable(1)->set_name(rng() % 2 ? "" : "caption"); break;
      case 4: columns.Clear(); break;
      default: break;
    }
    // Claimed sample counts that do not match the columns, now and then.
    const uint32_t claimed = rng() % 8 == 0 ? static_cast<uint32_t>(rng() % 7) : n;
    absl::StatusOr<std::vector<Field>> fields =
        ParseFields(std::move(columns), claimed, kClip, "batch 7");
    if (!fields.ok()) {
      ++refused;
      INFO(fields.status().ToString());
      REQUIRE(fields.status().code() == absl::StatusCode::kInternal);
      REQUIRE_THAT(std::string(fields.status().message()),
                   Catch::StartsWith("protocol error: batch 7: "));
      continue;
    }
    ++valid;
    REQUIRE(fields->size() == 3);
    for (size_t k = 0; k < fields->size(); ++k) {
      const Field& f = (*fields)[k];
      REQUIRE(f.name() == kClip[static_cast<int>(k)].name());
      REQUIRE(f.size() == claimed);
      REQUIRE(f.offsets().size() == claimed + 1);
      REQUIRE(f.present_flags().size() == claimed);
      REQUIRE(f.offsets().back() == f.data().size());
      size_t total = 0;
      for (uint32_t i = 0; i < claimed; ++i) {
        const std::string_view v = f.value(i);
        // Every value is a view inside the column's data.
        REQUIRE(v.data() >= f.data().data());
        REQUIRE(v.data() + v.size() <= f.data().data() + f.data().size());
        if (!f.present(i)) REQUIRE(v.empty());
        total += v.size();
      }
      REQUIRE(total == f.data().size());
    }
  }
  // Both outcomes were exercised, plenty.
  CHECK(valid > 2000);
  CHECK(refused > 2000);
}

}  // namespace
}  // namespace conveyor::client

#endif  // CONVEYOR_HAVE_CLIENT
