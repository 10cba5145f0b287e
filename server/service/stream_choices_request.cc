#include "server/service/stream_choices_request.h"

#include "absl/strings/str_cat.h"

namespace conveyor::server {

absl::StatusOr<StreamChoices> StreamChoicesOf(const v1::OpenStream& req) {
  StreamChoices c;
  c.output_height = req.height();
  c.output_width = req.width();
  switch (req.dtype()) {
    case v1::DTYPE_UNSPECIFIED: break;
    case v1::UINT8: c.dtype = DType::kUint8; break;
    case v1::FLOAT32: c.dtype = DType::kFloat32; break;
    case v1::FLOAT16: c.dtype = DType::kFloat16; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", static_cast<int>(req.dtype()), " is not a DType"));
  }
  if (req.has_fields()) {
    c.fields.emplace(req.fields().names().begin(), req.fields().names().end());
  }
  return c;
}

}  // namespace conveyor::server
