// The C ABI (include/conveyor_client.h) over the C++ client: each handle
// wraps one C++ object; each function turns an absl::Status into a code and
// the thread's last error message, and catches every exception (bad_alloc)
// so that none crosses into C. Caller-allocated structs are read and written
// through their struct_size (ReadSized, WriteSized), so that a caller built
// from another version of the header gets what both know, or a clear error.
#include "conveyor_client.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "client/cpp/fields.h"
#include "core/base/text_escape.h"

namespace cc = ::conveyor::client;

struct conveyor_client {
  cc::Client client;
};
struct conveyor_stream {
  std::unique_ptr<cc::Stream> stream;
};
struct conveyor_batch {
  cc::BatchLease lease;
};

namespace {

thread_local std::string last_error;

int Fail(const absl::Status& status) {
  last_error = status.ToString();
  return static_cast<int>(status.code());
}

int Fail(absl::StatusCode code, absl::string_view message) {
  return Fail(absl::Status(code, message));
}

// The smallest struct_size accepted for each struct: version 3's, the first
// with the field. Later versions append fields, so their structs are larger.
constexpr size_t kStreamOptionsV3 = sizeof(conveyor_stream_options);
constexpr size_t kStreamInfoV3 = sizeof(conveyor_stream_info);
constexpr size_t kBatchInfoV3 = sizeof(conveyor_batch_info);

absl::Status SizeTooSmall(const char* what, size_t size, size_t min) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": struct_size is ", size, ", this library (ABI version ",
                   CONVEYOR_CLIENT_ABI_VERSION, ") needs at least ", min,
                   ": set it to sizeof the struct (built against an older "
                   "conveyor_client.h? rebuild against this one)"));
}

// Reads a caller's struct of `in->struct_size` bytes into *out (ours,
// zeroed first): the prefix both know. Bytes past ours must be zero: they
// are fields of a newer header that this library would silently ignore.
template <typename T>
absl::Status ReadSized(const T* in, const char* what, size_t min, T* out) {
  const size_t size = in->struct_size;
  if (size < min) return SizeTooSmall(what, size, min);
  *out = T{};
  std::memcpy(out, in, std::min(size, sizeof(T)));
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(in);
  for (size_t i = sizeof(T); i < size; ++i) {
    if (bytes[i] != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": byte ", i, " of ", size, " is set, past the ", sizeof(T),
                       " bytes this library (ABI version ", CONVEYOR_CLIENT_ABI_VERSION,
                       ", conveyor_version() ", CONVEYOR_VERSION_STRING,
                       ") knows: a field of a newer header; use a newer library or leave it 0"));
    }
  }
  return absl::OkStatus();
}

// Writes `ours` over the caller's struct of `out->struct_size` bytes: the
// prefix both know, zeros past ours; struct_size stays the caller's.
template <typename T>
absl::Status WriteSized(const T& ours, const char* what, size_t min, T* out) {
  const size_t size = out->struct_size;
  if (size < min) return SizeTooSmall(what, size, min);
  unsigned char* bytes = reinterpret_cast<unsigned char*>(out);
  std::memcpy(bytes, &ours, std::min(size, sizeof(T)));
  if (size > sizeof(T)) std::memset(bytes + sizeof(T), 0, size - sizeof(T));
  out->struct_size = static_cast<uint32_t>(size);
  return absl::OkStatus();
}

// Runs `body` (returning an int code), turning exceptions into INTERNAL.
template <typename Body>
int Guard(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    return Fail(absl::StatusCode::kInternal, absl::StrCat("conveyor client: ", e.what()));
  } catch (...) {
    return Fail(absl::StatusCode::kInternal, "conveyor client: unknown exception");
  }
}

// Field `index` of `batch`, or the error (a NULL batch, an index past the
// fields) as the caller's code.
absl::StatusOr<const cc::Field*> BatchField(const conveyor_batch* batch, uint32_t index,
                                            const char* what) {
  if (batch == nullptr || !batch->lease.valid()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": NULL batch"));
  }
  const std::span<const cc::Field> fields = batch->lease.fields();
  if (index >= fields.size()) {
    return absl::OutOfRangeError(
        absl::StrCat(what, ": field ", index, " of a batch of ", fields.size(), " fields"));
  }
  return &fields[index];
}

}  // namespace

extern "C" {

int conveyor_abi_version(void) { return CONVEYOR_CLIENT_ABI_VERSION; }

const char* conveyor_version(void) { return CONVEYOR_VERSION_STRING; }

const char* conveyor_last_error(void) { return last_error.c_str(); }

const char* conveyor_status_name(int status) {
  if (status == CONVEYOR_END_OF_STREAM) return "END_OF_STREAM";
  if (status < 0 || status > 16) return "UNKNOWN_STATUS";
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  return kNames[status];
}

int conveyor_connect(const char* address, const char* token, conveyor_client** out) {
  return Guard([&] {
    if (address == nullptr || out == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "conveyor_connect: address and out are required");
    }
    cc::ClientOptions options;
    if (token != nullptr) options.token = token;
    absl::StatusOr<cc::Client> client = cc::Client::Create(address, std::move(options));
    if (!client.ok()) return Fail(client.status());
    *out = new conveyor_client{std::move(*client)};
    return 0;
  });
}

void conveyor_client_close(conveyor_client* client) { delete client; }

int conveyor_stream_options_init(conveyor_stream_options* options, size_t struct_size) {
  return Guard([&] {
    if (options == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument, "conveyor_stream_options_init: NULL options");
    }
    if (struct_size < kStreamOptionsV3) {
      return Fail(SizeTooSmall("conveyor_stream_options_init", struct_size, kStreamOptionsV3));
    }
    if (struct_size > UINT32_MAX) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("conveyor_stream_options_init: struct_size ", struct_size,
                               " is not the size of a struct"));
    }
    conveyor_stream_options o{};
    o.struct_size = static_cast<uint32_t>(struct_size);
    o.num_epochs = 1;
    o.world_size = 1;
    o.credits = 4;
    o.shuffle = 1;
    std::memset(options, 0, struct_size);  // the caller's fields past ours too
    std::memcpy(options, &o, sizeof(o));
    return 0;
  });
}

int conveyor_open_stream(conveyor_client* client, const conveyor_stream_options* given,
                         conveyor_stream** out) {
  return Guard([&] {
    if (client == nullptr || given == nullptr || out == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "conveyor_open_stream: client, options and out are required");
    }
    conveyor_stream_options known;
    absl::Status read = ReadSized(given, "conveyor_open_stream", kStreamOptionsV3, &known);
    if (!read.ok()) return Fail(read);
    const conveyor_stream_options* options = &known;
    if (options->pipeline == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "conveyor_open_stream: options->pipeline is required");
    }
    cc::StreamOptions o;
    o.pipeline = options->pipeline;
    o.batch_size = options->batch_size;
    o.seed = options->seed;
    o.first_epoch = options->first_epoch;
    o.num_epochs = options->num_epochs;
    o.rank = options->rank;
    o.world_size = options->world_size;
    o.credits = options->credits;
    o.shuffle = options->shuffle != 0;
    o.drop_last = options->drop_last != 0;
    if (!conveyor::v1::Transport_IsValid(options->transport)) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("conveyor_open_stream: unknown transport ", options->transport));
    }
    o.transport = static_cast<conveyor::v1::Transport>(options->transport);
    if (options->has_resume) {
      o.resume = cc::ResumeState{options->resume_epoch, options->resume_offset,
                                 options->resume_world_size};
    }
    if (options->timeout_ms > 0) o.side_timeout = absl::Milliseconds(options->timeout_ms);
    o.pin_memory = options->pin_memory != 0;
    if (options->gpu_uuid != nullptr) o.gpu_uuid = options->gpu_uuid;
    absl::StatusOr<std::unique_ptr<cc::Stream>> stream = client->client.OpenStream(o);
    if (!stream.ok()) return Fail(stream.status());
    *out = new conveyor_stream{std::move(*stream)};
    return 0;
  });
}

int conveyor_stream_get_info(const conveyor_stream* stream, conveyor_stream_info* out) {
  return Guard([&] {
    if (stream == nullptr || out == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument, "conveyor_stream_get_info: NULL argument");
    }
    const conveyor::v1::StreamOpened& op = stream->stream->opened();
    conveyor_stream_info known{};
    conveyor_stream_info* info = &known;
    info->stream_id = op.stream_id();
    info->transport = op.transport();
    info->credits = stream->stream->credits();
    info->num_slots = op.has_shared_memory()   ? op.shared_memory().num_slots()
                      : op.has_device_memory() ? op.device_memory().num_slots()
                                               : stream->stream->credits();
    info->samples_per_epoch = op.samples_per_epoch();
    info->batches_per_epoch = op.batches_per_epoch();
    absl::Status written = WriteSized(known, "conveyor_stream_get_info", kStreamInfoV3, out);
    return written.ok() ? 0 : Fail(written);
  });
}

int conveyor_stream_next(conveyor_stream* stream, conveyor_batch** batch,
                         conveyor_batch_info* out) {
  return Guard([&] {
    if (stream == nullptr || batch == nullptr || out == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument, "conveyor_stream_next: NULL argument");
    }
    // Checked before a batch is taken, so that a bad size loses none.
    if (out->struct_size < kBatchInfoV3) {
      return Fail(SizeTooSmall("conveyor_stream_next", out->struct_size, kBatchInfoV3));
    }
    absl::StatusOr<std::optional<cc::BatchLease>> next = stream->stream->Next();
    if (!next.ok()) return Fail(next.status());
    if (!next->has_value()) return static_cast<int>(CONVEYOR_END_OF_STREAM);
    cc::BatchLease& lease = **next;
    const conveyor::v1::Batch& h = lease.header();
    if (h.shape_size() > CONVEYOR_MAX_DIMS) {
      return Fail(absl::StatusCode::kInternal,
                  absl::StrCat("batch ", h.sequence(), " has ", h.shape_size(),
                               " dimensions; the C ABI carries at most ", CONVEYOR_MAX_DIMS));
    }
    auto handle = std::make_unique<conveyor_batch>(conveyor_batch{std::move(lease)});
    const conveyor::v1::Batch& hdr = handle->lease.header();
    conveyor_batch_info known{};
    conveyor_batch_info* info = &known;
    info->images = handle->lease.images();
    info->images_bytes = handle->lease.images_bytes();
    info->dtype = hdr.dtype();
    info->layout = hdr.layout();
    info->ndim = static_cast<uint32_t>(hdr.shape_size());
    for (int i = 0; i < hdr.shape_size(); ++i) info->shape[i] = hdr.shape(i);
    info->num_samples = hdr.num_samples();
    info->labels = hdr.labels().data();
    info->sample_indices = hdr.sample_indices().data();
    info->sequence = hdr.sequence();
    info->epoch = hdr.epoch();
    info->batch_in_epoch = hdr.batch_in_epoch();
    info->position = hdr.position();
    info->offset = hdr.offset();
    info->end_of_epoch = hdr.end_of_epoch() ? 1 : 0;
    info->slot = hdr.slot();
    info->num_failures = static_cast<uint32_t>(hdr.failures_size());
    info->on_device = handle->lease.on_device() ? 1 : 0;
    info->device_pointer = handle->lease.device_pointer();
    info->cuda_stream = 0;  // ready on arrival (see the header)
    info->cuda_event = 0;
    absl::Status written = WriteSized(known, "conveyor_stream_next", kBatchInfoV3, out);
    if (!written.ok()) return Fail(written);
    *batch = handle.release();
    return 0;
  });
}

int conveyor_batch_device_pointer(const conveyor_batch* batch, uint64_t* ptr) {
  return Guard([&] {
    if (batch == nullptr || ptr == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "conveyor_batch_device_pointer: NULL argument");
    }
    *ptr = batch->lease.device_pointer();
    return 0;
  });
}

int conveyor_batch_copy_images(const conveyor_batch* batch, void* out, uint64_t capacity) {
  return Guard([&] {
    if (batch == nullptr || (out == nullptr && batch->lease.images_bytes() > 0)) {
      return Fail(absl::StatusCode::kInvalidArgument, "conveyor_batch_copy_images: NULL argument");
    }
    if (capacity < batch->lease.images_bytes()) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("conveyor_batch_copy_images: the batch has ",
                               batch->lease.images_bytes(), " bytes, out holds ", capacity));
    }
    absl::Status s = batch->lease.CopyImages(static_cast<uint8_t*>(out));
    return s.ok() ? 0 : Fail(s);
  });
}

int conveyor_batch_field_count(const conveyor_batch* batch, uint32_t* count) {
  return Guard([&] {
    if (batch == nullptr || count == nullptr || !batch->lease.valid()) {
      return Fail(absl::StatusCode::kInvalidArgument, "conveyor_batch_field_count: NULL argument");
    }
    *count = static_cast<uint32_t>(batch->lease.fields().size());
    return 0;
  });
}

int conveyor_batch_field_info(const conveyor_batch* batch, uint32_t index, const char** name,
                              int32_t* type) {
  return Guard([&] {
    absl::StatusOr<const cc::Field*> field = BatchField(batch, index, "conveyor_batch_field_info");
    if (!field.ok()) return Fail(field.status());
    if (name != nullptr) *name = (*field)->name().c_str();
    if (type != nullptr) *type = static_cast<int32_t>((*field)->type());
    return 0;
  });
}

int conveyor_batch_find_field(const conveyor_batch* batch, const char* name, uint32_t* index) {
  return Guard([&] {
    if (batch == nullptr || name == nullptr || index == nullptr || !batch->lease.valid()) {
      return Fail(absl::StatusCode::kInvalidArgument, "conveyor_batch_find_field: NULL argument");
    }
    const std::span<const cc::Field> fields = batch->lease.fields();
    std::string names;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i].name() == name) {
        *index = static_cast<uint32_t>(i);
        return 0;
      }
      absl::StrAppend(&names, i == 0 ? "" : ", ",
                      ::conveyor::EscapeText(fields[i].name(), ::conveyor::kClientStringCap));
    }
    return Fail(
        absl::StatusCode::kNotFound,
        absl::StrCat("conveyor_batch_find_field: no field \"",
                     ::conveyor::EscapeText(name, ::conveyor::kClientStringCap),
                     "\" in this batch (its fields: ", fields.empty() ? "none" : names, ")"));
  });
}

int conveyor_batch_field_offsets(const conveyor_batch* batch, uint32_t index,
                                 const uint32_t** offsets, uint32_t* count) {
  return Guard([&] {
    if (offsets == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "conveyor_batch_field_offsets: NULL argument");
    }
    absl::StatusOr<const cc::Field*> field =
        BatchField(batch, index, "conveyor_batch_field_offsets");
    if (!field.ok()) return Fail(field.status());
    const std::span<const uint32_t> o = (*field)->offsets();
    *offsets = o.data();
    if (count != nullptr) *count = static_cast<uint32_t>(o.size());
    return 0;
  });
}

int conveyor_batch_field_data(const conveyor_batch* batch, uint32_t index, const uint8_t** data,
                              uint64_t* size) {
  return Guard([&] {
    if (data == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument, "conveyor_batch_field_data: NULL argument");
    }
    absl::StatusOr<const cc::Field*> field = BatchField(batch, index, "conveyor_batch_field_data");
    if (!field.ok()) return Fail(field.status());
    const std::string_view d = (*field)->data();
    *data = reinterpret_cast<const uint8_t*>(d.data());
    if (size != nullptr) *size = d.size();
    return 0;
  });
}

int conveyor_batch_field_present(const conveyor_batch* batch, uint32_t index,
                                 const uint8_t** present, uint32_t* count) {
  return Guard([&] {
    if (present == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument,
                  "conveyor_batch_field_present: NULL argument");
    }
    absl::StatusOr<const cc::Field*> field =
        BatchField(batch, index, "conveyor_batch_field_present");
    if (!field.ok()) return Fail(field.status());
    const std::span<const uint8_t> p = (*field)->present_flags();
    *present = p.data();
    if (count != nullptr) *count = static_cast<uint32_t>(p.size());
    return 0;
  });
}

void conveyor_batch_release(conveyor_batch* batch) {
  Guard([&] {
    delete batch;  // the lease's destructor sends the Release
    return 0;
  });
}

int conveyor_stream_resume_state(const conveyor_stream* stream, uint64_t* epoch, uint64_t* offset,
                                 uint32_t* world_size) {
  return Guard([&] {
    if (stream == nullptr) {
      return Fail(absl::StatusCode::kInvalidArgument, "conveyor_stream_resume_state: NULL stream");
    }
    const cc::ResumeState& r = stream->stream->resume_state();
    if (epoch != nullptr) *epoch = r.epoch;
    if (offset != nullptr) *offset = r.offset;
    if (world_size != nullptr) *world_size = r.world_size;
    return 0;
  });
}

void conveyor_stream_close(conveyor_stream* stream) {
  Guard([&] {
    delete stream;
    return 0;
  });
}

}  // extern "C"
