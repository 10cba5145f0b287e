// The field tables of config/README.md, rendered from the schema's
// declarations (server/config/schema.h): one row per field — its dotted
// path, type and bounds, default and one line of doc. A unit test compares
// them with the README's tables, so the reference cannot drift from the
// parser; ConfigSchemaMarkdown prints them for a README edit.
//
// Thread-safety: pure functions over immutable tables.
#pragma once

#include <string>
#include <vector>

#include "server/config/schema.h"

namespace conveyor::server {

// The README's headings of the two tables.
inline constexpr char kDaemonFieldsHeading[] = "## Daemon fields";
inline constexpr char kPipelineFieldsHeading[] = "## Pipeline fields (`pipelines.<name>.…`)";

// Top-level fields (listen.*, access.*, threads, …, pipelines), in the
// README's order.
std::vector<FieldDoc> DaemonFieldDocs();
// The fields of one pipeline (kind, dataset.*, …, audio.*), relative to
// `pipelines.<name>`.
std::vector<FieldDoc> PipelineFieldDocs();

// A Markdown table "| field | type | default | meaning |" of `rows`.
std::string FieldTableMarkdown(const std::vector<FieldDoc>& rows);
// Both tables under their headings.
std::string ConfigSchemaMarkdown();

// The rows of the first field table after the line `heading` in
// `markdown` (cells split at '|' not escaped as "\|"; the field's backticks
// dropped). Empty when there is no such heading or table.
std::vector<FieldDoc> ParseFieldTable(const std::string& markdown, const std::string& heading);

}  // namespace conveyor::server
