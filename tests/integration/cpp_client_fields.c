/* The sample fields of the C ABI (conveyor_batch_field_*, include/
 * conveyor_client.h) against a daemon: compiled as C by
 * test_cpp_client_fields.py against the built library and run with the
 * daemon's address, a pipeline, a batch size and a transport ("auto",
 * "shared_memory", "data_socket", "inline"). Reads one epoch (seed 11)
 * and prints
 *
 *   fields N NAME:TYPE ...                     once, from the first batch
 *   batch SEQUENCE NUM_SAMPLES                 per batch
 *   value NAME SAMPLE_INDEX PRESENT HEX        per field and sample ("-" for
 *                                              an empty value)
 *   ok CHECK / FAILED CHECK: why               the ABI's own rules
 *   done batches=N samples=M
 *
 * Every offset is checked against the data before a byte is read (the
 * library promises it; this program does not trust it). The first batch
 * is held until the stream is closed, then its fields are read again: they
 * must not have changed. A failure of the stream is printed on stderr as
 * "cpp_client_fields: STATUS: message" and exits 1; a failed check exits 3.
 *
 *   cpp_client_fields ADDRESS PIPELINE BATCH_SIZE TRANSPORT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conveyor_client.h"

static int failures = 0;

static void check(int ok, const char* name, const char* why) {
  if (ok) {
    printf("ok %s\n", name);
  } else {
    printf("FAILED %s: %s (last error: %s)\n", name, why, conveyor_last_error());
    ++failures;
  }
}

static const char* type_name(int32_t type) {
  switch (type) {
    case CONVEYOR_FIELD_TEXT: return "text";
    case CONVEYOR_FIELD_BYTES: return "bytes";
    case CONVEYOR_FIELD_JSON: return "json";
    case CONVEYOR_FIELD_KEY: return "key";
    default: return "unknown";
  }
}

/* FNV-1a over every field's name, offsets, data and flags of a batch. */
static uint64_t fields_digest(const conveyor_batch* b) {
  uint64_t h = 1469598103934665603ull;
  uint32_t count = 0;
  if (conveyor_batch_field_count(b, &count) != CONVEYOR_OK) return 0;
  for (uint32_t f = 0; f < count; ++f) {
    const char* name;
    const uint32_t* offsets;
    const uint8_t* data;
    const uint8_t* present;
    uint32_t n_off = 0, n_present = 0;
    uint64_t size = 0;
    if (conveyor_batch_field_info(b, f, &name, NULL) != CONVEYOR_OK ||
        conveyor_batch_field_offsets(b, f, &offsets, &n_off) != CONVEYOR_OK ||
        conveyor_batch_field_data(b, f, &data, &size) != CONVEYOR_OK ||
        conveyor_batch_field_present(b, f, &present, &n_present) != CONVEYOR_OK) {
      return 0;
    }
    for (const char* c = name; *c; ++c) h = (h ^ (uint8_t)*c) * 1099511628211ull;
    for (uint32_t i = 0; i < n_off; ++i) h = (h ^ offsets[i]) * 1099511628211ull;
    for (uint64_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
    for (uint32_t i = 0; i < n_present; ++i) h = (h ^ present[i]) * 1099511628211ull;
  }
  return h;
}

/* Prints (and checks) every field of a batch; 0 when a rule is broken. */
static int print_fields(const conveyor_batch* b, const conveyor_batch_info* info, int first) {
  uint32_t count = 0;
  if (conveyor_batch_field_count(b, &count) != CONVEYOR_OK) {
    check(0, "field_count", "conveyor_batch_field_count failed");
    return 0;
  }
  if (first) {
    printf("fields %u", count);
    for (uint32_t f = 0; f < count; ++f) {
      const char* name = NULL;
      int32_t type = 0;
      conveyor_batch_field_info(b, f, &name, &type);
      printf(" %s:%s", name, type_name(type));
    }
    printf("\n");
  }
  for (uint32_t f = 0; f < count; ++f) {
    const char* name = NULL;
    int32_t type = 0;
    const uint32_t* offsets = NULL;
    const uint8_t* data = NULL;
    const uint8_t* present = NULL;
    uint32_t n_off = 0, n_present = 0;
    uint64_t size = 0;
    if (conveyor_batch_field_info(b, f, &name, &type) != CONVEYOR_OK ||
        conveyor_batch_field_offsets(b, f, &offsets, &n_off) != CONVEYOR_OK ||
        conveyor_batch_field_data(b, f, &data, &size) != CONVEYOR_OK ||
        conveyor_batch_field_present(b, f, &present, &n_present) != CONVEYOR_OK) {
      check(0, "field_accessors", "an accessor failed on a valid index");
      return 0;
    }
    const uint32_t n = info->num_samples;
    if (name == NULL || name[0] == '\0' || offsets == NULL || data == NULL || present == NULL ||
        n_off != n + 1 || n_present != n || offsets[0] != 0 || offsets[n] != size) {
      check(0, "field_shape", "a column that does not fit its batch");
      return 0;
    }
    for (uint32_t i = 0; i < n; ++i) {
      if (offsets[i + 1] < offsets[i] || offsets[i + 1] > size || present[i] > 1 ||
          (!present[i] && offsets[i + 1] != offsets[i])) {
        check(0, "field_values", "offsets or flags out of their bounds");
        return 0;
      }
      printf("value %s %lld %u ", name, (long long)info->sample_indices[i], (unsigned)present[i]);
      if (offsets[i + 1] == offsets[i]) printf("-");
      for (uint32_t k = offsets[i]; k < offsets[i + 1]; ++k) printf("%02x", data[k]);
      printf("\n");
    }
  }
  return 1;
}

/* The ABI's errors, on a batch of `count` fields. */
static void check_errors(const conveyor_batch* b, uint32_t count) {
  const char* name = NULL;
  const uint32_t* offsets = NULL;
  const uint8_t* bytes = NULL;
  uint64_t size = 0;
  uint32_t index = 0;
  int rc = conveyor_batch_field_info(b, count, &name, NULL);
  check(rc == CONVEYOR_OUT_OF_RANGE && name == NULL, "index_past_the_fields_is_out_of_range",
        conveyor_status_name(rc));
  rc = conveyor_batch_field_offsets(b, count + 7, &offsets, NULL);
  check(rc == CONVEYOR_OUT_OF_RANGE && offsets == NULL, "offsets_past_the_fields_is_out_of_range",
        conveyor_status_name(rc));
  rc = conveyor_batch_field_data(NULL, 0, &bytes, &size);
  check(rc == CONVEYOR_INVALID_ARGUMENT && bytes == NULL, "null_batch_is_invalid_argument",
        conveyor_status_name(rc));
  rc = conveyor_batch_field_present(b, 0, NULL, NULL);
  check(rc == CONVEYOR_INVALID_ARGUMENT, "null_out_is_invalid_argument", conveyor_status_name(rc));
  rc = conveyor_batch_find_field(b, "no_such_field", &index);
  check(rc == CONVEYOR_NOT_FOUND && strstr(conveyor_last_error(), "no_such_field") != NULL,
        "unknown_name_is_not_found", conveyor_status_name(rc));
  for (uint32_t f = 0; f < count; ++f) {
    conveyor_batch_field_info(b, f, &name, NULL);
    rc = conveyor_batch_find_field(b, name, &index);
    check(rc == CONVEYOR_OK && index == f, "find_field_gives_its_index", conveyor_status_name(rc));
  }
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: cpp_client_fields ADDRESS PIPELINE BATCH_SIZE TRANSPORT\n");
    return 2;
  }
  conveyor_stream_options o;
  conveyor_stream_options_init(&o, sizeof o);
  o.pipeline = argv[2];
  o.batch_size = (uint32_t)atoi(argv[3]);
  o.seed = 11;
  if (strcmp(argv[4], "shared_memory") == 0) o.transport = CONVEYOR_SHARED_MEMORY;
  if (strcmp(argv[4], "data_socket") == 0) o.transport = CONVEYOR_DATA_SOCKET;
  if (strcmp(argv[4], "inline") == 0) o.transport = CONVEYOR_INLINE;
  conveyor_client* client = NULL;
  conveyor_stream* stream = NULL;
  int rc = conveyor_connect(argv[1], NULL, &client);
  if (rc == CONVEYOR_OK) rc = conveyor_open_stream(client, &o, &stream);
  conveyor_batch* held = NULL; /* the first batch, read again after close */
  uint64_t held_digest = 0;
  unsigned long long batches = 0, samples = 0;
  conveyor_batch_info info = {.struct_size = sizeof info};
  conveyor_batch* b = NULL;
  while (rc == CONVEYOR_OK && (rc = conveyor_stream_next(stream, &b, &info)) == CONVEYOR_OK) {
    printf("batch %llu %u\n", (unsigned long long)info.sequence, info.num_samples);
    fflush(stdout);
    if (!print_fields(b, &info, batches == 0)) {
      conveyor_batch_release(b);
      break;
    }
    ++batches;
    samples += info.num_samples;
    if (held == NULL) {
      uint32_t count = 0;
      conveyor_batch_field_count(b, &count);
      check_errors(b, count);
      held = b;
      held_digest = fields_digest(b);
    } else {
      conveyor_batch_release(b);
    }
  }
  if (rc != CONVEYOR_END_OF_STREAM && rc != CONVEYOR_OK) {
    fprintf(stderr, "cpp_client_fields: %s: %s\n", conveyor_status_name(rc), conveyor_last_error());
    fflush(stdout);
    conveyor_batch_release(held);
    conveyor_stream_close(stream);
    conveyor_client_close(client);
    return 1;
  }
  conveyor_stream_close(stream);
  conveyor_client_close(client);
  if (held != NULL) {
    check(fields_digest(held) == held_digest, "held_batch_fields_unchanged_after_close",
          "the fields of the held batch changed");
    conveyor_batch_release(held);
  }
  printf("done batches=%llu samples=%llu\n", batches, samples);
  return failures == 0 ? 0 : 3;
}
