// A pipeline's `fields`: what each sample delivers beside its media
// (core/data/sample_fields.h), one map per field, in order.
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/data/list_columns.h"
#include "server/config/sections.h"

namespace conveyor::server {

namespace {

// The largest list-file column a field may read.
constexpr uint32_t kMaxListColumn = 64;

const Section<SampleFieldSpec>& FieldSection() {
  using schema::Bool;
  using schema::Enum;
  using schema::String;
  static const Section<SampleFieldSpec> kSection({
      String<SampleFieldSpec>("name", &SampleFieldSpec::name,
                              "how clients find it (`batch.fields[name]`)")
          .WithDefault("required"),
      Enum<SampleFieldSpec>(
          "type", &SampleFieldSpec::type,
          std::vector<std::pair<std::string, FieldType>>{{"text", FieldType::kText},
                                                         {"bytes", FieldType::kBytes},
                                                         {"json", FieldType::kJson},
                                                         {"key", FieldType::kKey},
                                                         {"npy", FieldType::kNpy},
                                                         {"mask", FieldType::kMask},
                                                         {"augment", FieldType::kAugment}},
          "UTF-8 text, raw bytes, JSON text (checked), the sample's key, a NumPy `.npy` "
          "array, a segmentation mask moved with the image, or what the sample's "
          "augmentation drew (JSON)"),
      String<SampleFieldSpec>("member", &SampleFieldSpec::member,
                              "tar shards: the extension of the member holding the value "
                              "(`txt`, `json`); none for `key` and `augment`")
          .WithDefault("none"),
      schema::Custom<SampleFieldSpec>(
          "column", absl::StrCat("integer 2–", kMaxListColumn), "none",
          "list and URL files: the tab-separated column holding the value (0 is the path, 1 "
          "the label)",
          [](const YamlFields& y, const YAML::Node& n, const std::string& field,
             SampleFieldSpec* f) -> absl::Status {
            uint32_t column = 0;
            RETURN_IF_ERROR(y.ReadUintAs(n, field, 2, kMaxListColumn, &column));
            f->member = ColumnMember(column);
            return absl::OkStatus();
          }),
      Bool<SampleFieldSpec>("required", &SampleFieldSpec::required,
                            "a sample without the member fails; `false`: the value is absent"),
      schema::Custom<SampleFieldSpec>(
          "max_bytes", absl::StrCat("size 1B–", FormatSizeBound(kMaxFieldValueBytes)),
          Quoted(FormatSizeBound(SampleFieldSpec{}.max_bytes)),
          "largest value of one sample; larger ones fail the sample (a batch reserves "
          "`batch_size` × this)",
          [](const YamlFields& y, const YAML::Node& n, const std::string& field,
             SampleFieldSpec* f) -> absl::Status {
            uint64_t v = 0;
            RETURN_IF_ERROR(y.ReadSize(n, field, 1, 0, &v));
            if (v > kMaxFieldValueBytes) {
              return y.Error(field, n,
                             absl::StrCat("at most ", FormatSizeBound(kMaxFieldValueBytes)));
            }
            f->max_bytes = static_cast<uint32_t>(v);
            return absl::OkStatus();
          }),
      Enum<SampleFieldSpec>("dtype", &SampleFieldSpec::npy_dtype,
                            std::vector<std::pair<std::string, std::string>>{{"any", ""},
                                                                             {"float32", "float32"},
                                                                             {"float64", "float64"},
                                                                             {"int8", "int8"},
                                                                             {"int16", "int16"},
                                                                             {"int32", "int32"},
                                                                             {"int64", "int64"},
                                                                             {"uint8", "uint8"},
                                                                             {"uint16", "uint16"},
                                                                             {"uint32", "uint32"},
                                                                             {"uint64", "uint64"},
                                                                             {"bool", "bool"}},
                            "`npy`: the element type every value must have"),
      Enum<SampleFieldSpec>(
          "geometry", &SampleFieldSpec::geometry,
          std::vector<std::pair<std::string, FieldGeometry>>{
              {"none", FieldGeometry::kNone},
              {"boxes_xyxy", FieldGeometry::kBoxesXyxy},
              {"boxes_xywh", FieldGeometry::kBoxesXywh},
              {"keypoints", FieldGeometry::kKeypoints}},
          "`npy` boxes `[N, 4 + k]` or keypoints `[N, 2 + k]` moved with the image's crop, "
          "resize, padding and flips"),
      Bool<SampleFieldSpec>("normalized", &SampleFieldSpec::normalized,
                            "the boxes or keypoints are fractions of the image's width and height, "
                            "not pixels"),
  });
  return kSection;
}

}  // namespace

absl::Status ParseFields(const YamlFields& y, const std::string& field, const YAML::Node& n,
                         PipelineSpec* p) {
  if (!n.IsSequence()) {
    return y.Error(field, n, "expected a list of fields, e.g. [{name: caption, member: txt}]");
  }
  std::vector<SampleFieldSpec>& fields = p->config.fields;
  fields.clear();
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string at = absl::StrCat(field, "[", i, "]");
    const YAML::Node f = n[i];
    RETURN_IF_ERROR(FieldSection().CheckKeys(y, f, at));
    if (!f["name"]) return y.Error(at, f, "missing `name`");
    SampleFieldSpec spec;
    if (f["member"] && f["column"]) {
      return y.Error(at + ".column", f["column"], "give either `member` or `column`, not both");
    }
    RETURN_IF_ERROR(FieldSection().ReadFields(y, f, at, &spec));
    if (f["member"]) spec.member = absl::AsciiStrToLower(spec.member);
    if (ReadsNoMember(spec.type) && (f["member"] || f["column"])) {
      return y.Error(at + (f["member"] ? ".member" : ".column"),
                     f["member"] ? f["member"] : f["column"],
                     absl::StrCat("a `", ToString(spec.type), "` field has no member"));
    }
    const DatasetSpec::Kind kind = p->dataset.kind;
    const bool lists = kind == DatasetSpec::Kind::kListFile || kind == DatasetSpec::Kind::kUrlList;
    if (!ReadsNoMember(spec.type)) {
      if (kind == DatasetSpec::Kind::kTarShards) {
        if (f["column"]) {
          return y.Error(at + ".column", f["column"],
                         "is for list and URL files; tar shards "
                         "name a `member`");
        }
        if (!f["member"]) {
          return y.Error(at, f, "missing `member` (the extension of the tar member)");
        }
      } else if (lists) {
        if (!f["column"]) {
          return y.Error(at, f, "missing `column` (the list file's column holding the value)");
        }
        if (spec.type != FieldType::kText && spec.type != FieldType::kJson) {
          return y.Error(at + ".type", f["type"] ? f["type"] : f,
                         "a list file's column is `text` or `json`");
        }
      } else {
        return y.Error(at, f,
                       "fields read from members are for tar shards (dataset.shards) and "
                       "columns for list and URL files; folders deliver `type: key` and "
                       "`type: augment` fields only");
      }
    }
    fields.push_back(std::move(spec));
    if (absl::Status st = ValidateFieldSpecs(fields); !st.ok()) {
      return y.Error(at, f, std::string(st.message()));
    }
  }
  // The members are read with the image: part of what the dataset indexes.
  p->dataset.field_members.clear();
  for (const SampleFieldSpec& spec : fields) p->dataset.field_members.push_back(spec.member);
  return absl::OkStatus();
}

std::vector<FieldDoc> FieldsDocs() { return FieldSection().Docs(); }

}  // namespace conveyor::server
