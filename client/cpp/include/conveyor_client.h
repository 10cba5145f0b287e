/* conveyor_client.h: the C ABI of the conveyor client, for any language
 * with a C FFI (Rust, Go, Julia, Java, ...). Link libconveyor_client.so; it
 * exports only the conveyor_* functions below.
 *
 * Handles are opaque: a conveyor_client (one connection to a daemon), a
 * conveyor_stream (one stream of batches) and a conveyor_batch (one batch
 * the caller holds: a lease on a slot of the daemon). Every function that
 * can fail returns a conveyor_status: CONVEYOR_OK (0), CONVEYOR_END_OF_STREAM
 * from conveyor_stream_next when the stream is over, or the gRPC status code
 * of the failure (the daemon's own, or the client's: UNAVAILABLE when the
 * daemon cannot be reached, INTERNAL for a protocol error, ...). After a
 * failure conveyor_last_error() returns the message, which says what to fix.
 * No C++ exception ever crosses this interface.
 *
 *   conveyor_client* c;
 *   if (conveyor_connect("unix:///run/conveyor/conveyor.sock", NULL, &c) != CONVEYOR_OK)
 *     fail(conveyor_last_error());
 *   conveyor_stream_options o;
 *   conveyor_stream_options_init(&o, sizeof o);
 *   o.pipeline = "imagenet-train"; o.batch_size = 256;
 *   conveyor_stream* s;
 *   if (conveyor_open_stream(c, &o, &s) != CONVEYOR_OK) fail(conveyor_last_error());
 *   conveyor_batch* b;
 *   conveyor_batch_info info = {.struct_size = sizeof info};
 *   int rc;
 *   while ((rc = conveyor_stream_next(s, &b, &info)) == CONVEYOR_OK) {
 *     train(info.images, info.shape, info.labels);  // no copy: the daemon's slot
 *     conveyor_batch_release(b);                    // the slot goes back
 *   }
 *   if (rc != CONVEYOR_END_OF_STREAM) fail(conveyor_last_error());
 *   conveyor_stream_close(s);
 *   conveyor_client_close(c);
 *
 * Sample fields: besides images and labels, each sample of a batch carries
 * the pipeline's fields (a caption, JSON metadata, raw bytes, its key), one
 * column per field, Arrow-style: sample i's value is data[offsets[i],
 * offsets[i + 1]) and present[i] (0 or 1) says whether the sample has it:
 *
 *   uint32_t f, n;
 *   if (conveyor_batch_find_field(b, "caption", &f) == CONVEYOR_OK) {
 *     const uint32_t* offsets; const uint8_t* data; const uint8_t* present;
 *     uint64_t size;
 *     conveyor_batch_field_offsets(b, f, &offsets, &n);   // n: num_samples + 1
 *     conveyor_batch_field_data(b, f, &data, &size);       // size == offsets[n - 1]
 *     conveyor_batch_field_present(b, f, &present, NULL);
 *     for (uint32_t i = 0; i + 1 < n; ++i)
 *       if (present[i]) use(data + offsets[i], offsets[i + 1] - offsets[i]);
 *   }
 *
 * The client checked every column when the batch arrived (lengths,
 * offsets in bounds and non-decreasing, flags 0 or 1, the pipeline's
 * fields in its order): a batch that fails is CONVEYOR_INTERNAL naming the
 * field, from conveyor_stream_next, so reading within these bounds is
 * always safe.
 *
 * Memory: a batch's images, labels, sample indices and fields stay valid until
 * conveyor_batch_release of that batch (even after its stream is closed);
 * after it they belong to the daemon again. The caller may hold at most
 * `credits` batches of a stream unreleased; conveyor_stream_next returns
 * CONVEYOR_FAILED_PRECONDITION rather than block while it holds them all.
 *
 * GPUs: pin_memory page-locks a shared-memory stream's slots for CUDA
 * (asynchronous host-to-device copies from info.images); transport
 * CONVEYOR_DEVICE_MEMORY with gpu_uuid lands batches in the GPU's memory:
 * info.images is then NULL and info.device_pointer is the CUdeviceptr. The
 * daemon sends a batch only once its bytes are on the device, so
 * info.cuda_stream and info.cuda_event are always 0, meaning "ready: nothing
 * to wait on". The CUDA driver is loaded at run time (libcuda.so.1) only by
 * streams that ask for a GPU; without one they fail with
 * CONVEYOR_FAILED_PRECONDITION naming why.
 *
 * Versions: conveyor_version() is the library's release ("0.1.0"),
 * CONVEYOR_CLIENT_ABI_VERSION the ABI version of this header and
 * conveyor_abi_version() the library's; the soname carries the ABI version
 * (libconveyor_client.so.3). Version 3 put a struct_size field first in
 * every struct the caller allocates (conveyor_stream_options,
 * conveyor_stream_info, conveyor_batch_info) and gave
 * conveyor_stream_options_init a size: code built against versions 1 and 2
 * must be rebuilt. Check at start-up that both ABI versions agree.
 * Within an ABI version functions are only ever added, never changed: the
 * sample-field functions (conveyor_batch_field_*) were added to version 3,
 * and a program that calls them needs a library that has them (the dynamic
 * linker refuses to start it with an older libconveyor_client.so.3).
 *
 * Sized structs: set struct_size to sizeof the struct as you compiled it
 * (conveyor_stream_options_init does it for the options,
 * `x = {.struct_size = sizeof x}` for the others), so that a library and
 * a caller built from different headers agree on what is there. Later versions only append fields.
 * A struct the library reads (the options) may be larger than the library's own if every byte past
 * it is zero (fields this library does not know of must be unset), else the call is
 * CONVEYOR_INVALID_ARGUMENT; a struct it writes (the infos) gets the fields the library knows and
 * zeros past them. A struct_size smaller than version 3's struct is CONVEYOR_INVALID_ARGUMENT
 * naming both sizes, never a partial read.
 *
 * Thread-safety: conveyor_last_error() is per thread (the message of the
 * last failed call on the calling thread). A conveyor_client may be used by
 * several threads at once. A conveyor_stream is used by one thread at a
 * time (next, info, resume state, close); conveyor_batch_release may be
 * called from any thread, concurrently with conveyor_stream_next.
 */
#ifndef CONVEYOR_CLIENT_H_
#define CONVEYOR_CLIENT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version of this header (see above). */
#define CONVEYOR_CLIENT_ABI_VERSION 3

#if defined(__GNUC__)
#define CONVEYOR_API __attribute__((visibility("default")))
#else
#define CONVEYOR_API
#endif

typedef struct conveyor_client conveyor_client;
typedef struct conveyor_stream conveyor_stream;
typedef struct conveyor_batch conveyor_batch;

/* Return codes: 0, the gRPC status codes 1..16, and the end of a stream. */
typedef enum conveyor_status {
  CONVEYOR_OK = 0,
  CONVEYOR_CANCELLED = 1,
  CONVEYOR_UNKNOWN = 2,
  CONVEYOR_INVALID_ARGUMENT = 3, /* a field is wrong: fix it, do not retry */
  CONVEYOR_DEADLINE_EXCEEDED = 4,
  CONVEYOR_NOT_FOUND = 5, /* unknown pipeline */
  CONVEYOR_ALREADY_EXISTS = 6,
  CONVEYOR_PERMISSION_DENIED = 7,
  CONVEYOR_RESOURCE_EXHAUSTED = 8, /* daemon limits: retry later */
  CONVEYOR_FAILED_PRECONDITION = 9,
  CONVEYOR_ABORTED = 10,
  CONVEYOR_OUT_OF_RANGE = 11,
  CONVEYOR_UNIMPLEMENTED = 12,
  CONVEYOR_INTERNAL = 13,    /* protocol error, or a bug */
  CONVEYOR_UNAVAILABLE = 14, /* daemon unreachable or gone: retry */
  CONVEYOR_DATA_LOSS = 15,   /* the stream failed on bad samples */
  CONVEYOR_UNAUTHENTICATED = 16,
  CONVEYOR_END_OF_STREAM = 100 /* conveyor_stream_next: no more batches */
} conveyor_status;

/* DType and Layout of the proto (conveyor.v1). */
enum { CONVEYOR_UINT8 = 1, CONVEYOR_FLOAT32 = 2, CONVEYOR_FLOAT16 = 3, CONVEYOR_BFLOAT16 = 4 };
enum { CONVEYOR_NCHW = 1, CONVEYOR_NHWC = 2 };
/* Transport of the proto. */
enum {
  CONVEYOR_TRANSPORT_AUTO = 0,
  CONVEYOR_SHARED_MEMORY = 1,
  CONVEYOR_INLINE = 2,
  CONVEYOR_DATA_SOCKET = 3,
  CONVEYOR_DEVICE_MEMORY = 4 /* unix socket, a GPU on the daemon's host: set gpu_uuid */
};

#define CONVEYOR_MAX_DIMS 8

/* The library's ABI version: CONVEYOR_CLIENT_ABI_VERSION of the header it
 * was built with. */
CONVEYOR_API int conveyor_abi_version(void);

/* The library's release, "MAJOR.MINOR.PATCH" (the project's version). Never
 * NULL; static storage. */
CONVEYOR_API const char* conveyor_version(void);

/* The message of the last failed call on this thread ("" if none). Valid
 * until the next call of this library on the same thread. */
CONVEYOR_API const char* conveyor_last_error(void);

/* "OK", "NOT_FOUND", ..., "END_OF_STREAM". Never NULL. */
CONVEYOR_API const char* conveyor_status_name(int status);

/* A client for `address` ("unix:///path.sock", "/path.sock" or
 * "host:port"); `token`: bearer token, or NULL. The connection is made by
 * the first call that needs it. *out is set on success only. */
CONVEYOR_API int conveyor_connect(const char* address, const char* token, conveyor_client** out);
/* Frees the client (NULL is ignored). Open streams stay usable. */
CONVEYOR_API void conveyor_client_close(conveyor_client* client);

typedef struct conveyor_stream_options {
  uint32_t struct_size; /* sizeof(conveyor_stream_options): set by _init */
  const char* pipeline; /* required */
  uint32_t batch_size;  /* required: 1 .. the pipeline's max_batch_size */
  uint64_t seed;
  uint64_t first_epoch;
  uint64_t num_epochs; /* 0: endless */
  uint32_t rank;
  uint32_t world_size;
  uint32_t credits;   /* batches the caller may hold unreleased, 1 .. 64 */
  int32_t shuffle;    /* 0 or 1 */
  int32_t drop_last;  /* 0 or 1 */
  int32_t transport;  /* CONVEYOR_TRANSPORT_AUTO, ... */
  int32_t has_resume; /* 1: start at the resume_* position */
  uint64_t resume_epoch;
  uint64_t resume_offset;
  uint32_t resume_world_size;
  uint32_t timeout_ms; /* fd hand-over / data socket connect; 0: 10 s */
  /* ABI version 2: */
  int32_t pin_memory;   /* 1: page-lock the shared-memory slots for CUDA */
  const char* gpu_uuid; /* "GPU-..." (nvidia-smi -L): required for
                           CONVEYOR_DEVICE_MEMORY; pin_memory's device
                           (NULL or "": device 0) */
} conveyor_stream_options;

/* Fills the caller's `struct_size` bytes at `options` with the defaults
 * (num_epochs 1, world_size 1, credits 4, shuffle 1, the rest 0 or NULL)
 * and sets options->struct_size = struct_size. Pass sizeof(*options).
 * CONVEYOR_INVALID_ARGUMENT (nothing written) for NULL or a size below
 * version 3's. */
CONVEYOR_API int conveyor_stream_options_init(conveyor_stream_options* options, size_t struct_size);

/* Opens a stream. *out is set on success only. */
CONVEYOR_API int conveyor_open_stream(conveyor_client* client,
                                      const conveyor_stream_options* options,
                                      conveyor_stream** out);

typedef struct conveyor_stream_info {
  uint32_t struct_size; /* set by the caller: sizeof(conveyor_stream_info) */
  uint64_t stream_id;
  int32_t transport; /* the one the daemon chose */
  uint32_t credits;
  uint32_t num_slots;
  uint64_t samples_per_epoch; /* this rank's */
  uint64_t batches_per_epoch;
} conveyor_stream_info;

/* Fills *info (set info->struct_size first). */
CONVEYOR_API int conveyor_stream_get_info(const conveyor_stream* stream,
                                          conveyor_stream_info* info);

typedef struct conveyor_batch_info {
  uint32_t struct_size; /* set by the caller: sizeof(conveyor_batch_info) */
  const void* images;   /* images_bytes bytes, shaped `shape` */
  uint64_t images_bytes;
  int32_t dtype;  /* CONVEYOR_UINT8, ... */
  int32_t layout; /* CONVEYOR_NCHW or CONVEYOR_NHWC */
  uint32_t ndim;
  int64_t shape[CONVEYOR_MAX_DIMS];
  uint32_t num_samples;
  const int64_t* labels; /* num_samples of them */
  const int64_t* sample_indices;
  uint64_t sequence; /* 0, 1, 2, ... over the stream */
  uint64_t epoch;
  uint64_t batch_in_epoch;
  uint64_t position; /* this rank's samples of the epoch through this batch */
  uint64_t offset;   /* the epoch's global order consumed: the resume point */
  int32_t end_of_epoch;
  uint32_t slot;
  uint32_t num_failures; /* samples of this batch that failed (skipped) */
  /* ABI version 2: */
  int32_t on_device;       /* 1: a CONVEYOR_DEVICE_MEMORY batch */
  uint64_t device_pointer; /* on_device: the CUdeviceptr of the images (images
                              is then NULL); 0 otherwise */
  uint64_t cuda_stream;    /* always 0: the bytes are on the device when the */
  uint64_t cuda_event;     /* batch arrives (nothing to wait on) */
} conveyor_batch_info;

/* The next batch: *batch is the lease (release it), *info describes it
 * (set info->struct_size first; it is kept from call to call).
 * Returns CONVEYOR_END_OF_STREAM (and sets nothing) when the stream ended;
 * an error ends the stream. */
CONVEYOR_API int conveyor_stream_next(conveyor_stream* stream, conveyor_batch** batch,
                                      conveyor_batch_info* info);

/* The device pointer of a batch (0 for a host batch), as info.device_pointer.
 * Valid until the batch is released. */
CONVEYOR_API int conveyor_batch_device_pointer(const conveyor_batch* batch, uint64_t* ptr);

/* Copies the batch's images_bytes into `out` (`capacity` bytes; too small is
 * CONVEYOR_INVALID_ARGUMENT): a memcpy for host batches, a device-to-host
 * copy for device batches. */
CONVEYOR_API int conveyor_batch_copy_images(const conveyor_batch* batch, void* out,
                                            uint64_t capacity);

/* Sample fields (FieldType of the proto): what a field's values hold. */
enum {
  CONVEYOR_FIELD_TEXT = 1,  /* UTF-8 text (checked by the daemon) */
  CONVEYOR_FIELD_BYTES = 2, /* any bytes */
  CONVEYOR_FIELD_JSON = 3,  /* JSON text, UTF-8 (checked by the daemon; parse it) */
  CONVEYOR_FIELD_KEY = 4,   /* the sample's key: its tar key or dataset path, bytes as stored */
  CONVEYOR_FIELD_NPY = 5,   /* a NumPy .npy file (checked by the daemon; boxes rewritten float32) */
  CONVEYOR_FIELD_MASK = 6   /* a segmentation mask: output height x width uint8 per sample */
};

/* The number of sample fields of the batch: the pipeline's declared fields
 * (0 for a pipeline without any), the same for every batch of a stream.
 * Fields are numbered 0 .. *count - 1, in the pipeline's order. */
CONVEYOR_API int conveyor_batch_field_count(const conveyor_batch* batch, uint32_t* count);

/* Field `index`'s name (NUL-terminated, non-empty, unique in the batch) and
 * type (CONVEYOR_FIELD_*). Either out pointer may be NULL. An index past
 * the fields is CONVEYOR_OUT_OF_RANGE. */
CONVEYOR_API int conveyor_batch_field_info(const conveyor_batch* batch, uint32_t index,
                                           const char** name, int32_t* type);

/* The index of the field called `name`; CONVEYOR_NOT_FOUND (naming the
 * batch's fields) when it has none of that name. */
CONVEYOR_API int conveyor_batch_find_field(const conveyor_batch* batch, const char* name,
                                           uint32_t* index);

/* Field `index`'s offsets: *count = num_samples + 1 uint32 values in host
 * byte order, 4-byte aligned; offsets[0] == 0, never decreasing, the last
 * is the size of its data. Sample i's value is data[offsets[i],
 * offsets[i + 1]). `count` may be NULL. */
CONVEYOR_API int conveyor_batch_field_offsets(const conveyor_batch* batch, uint32_t index,
                                              const uint32_t** offsets, uint32_t* count);

/* Field `index`'s values, concatenated: *size bytes (not NUL-terminated;
 * the pointer is never NULL, even for 0 bytes). `size` may be NULL. */
CONVEYOR_API int conveyor_batch_field_data(const conveyor_batch* batch, uint32_t index,
                                           const uint8_t** data, uint64_t* size);

/* Field `index`'s present flags: *count = num_samples bytes, 1 where the
 * sample has the field, 0 where not (its value is then empty). `count` may
 * be NULL. */
CONVEYOR_API int conveyor_batch_field_present(const conveyor_batch* batch, uint32_t index,
                                              const uint8_t** present, uint32_t* count);

/* Gives the batch's slot back to the daemon and frees the handle (NULL is
 * ignored). Any thread. */
CONVEYOR_API void conveyor_batch_release(conveyor_batch* batch);

/* Where to resume after the last batch taken: pass it as resume_* of a new
 * stream's options. Any pointer may be NULL. */
CONVEYOR_API int conveyor_stream_resume_state(const conveyor_stream* stream, uint64_t* epoch,
                                              uint64_t* offset, uint32_t* world_size);

/* Cancels the stream if it still runs and frees the handle (NULL is
 * ignored). Batches still held stay readable until released. */
CONVEYOR_API void conveyor_stream_close(conveyor_stream* stream);

#ifdef __cplusplus
}
#endif

#endif /* CONVEYOR_CLIENT_H_ */
