/* The struct_size rules of the C ABI (include/conveyor_client.h, "Sized
 * structs") against a real daemon: compiled by test_cpp_client.py against
 * the installed package and run with the daemon's address, pipeline and
 * batch size. Prints "ok NAME" or "FAILED NAME: why" per check; exits with
 * the number of failures.
 *
 *   cpp_client_struct_sizes ADDRESS PIPELINE BATCH_SIZE
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

static int all_zero(const void* p, size_t n) {
  const unsigned char* b = (const unsigned char*)p;
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return 0;
  }
  return 1;
}

/* A caller built against a newer header: the struct has fields after ours. */
struct newer_options {
  conveyor_stream_options known;
  uint64_t future[3];
};
struct newer_stream_info {
  conveyor_stream_info known;
  uint64_t future[3];
};
struct newer_batch_info {
  conveyor_batch_info known;
  uint64_t future[3];
};

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: cpp_client_struct_sizes ADDRESS PIPELINE BATCH_SIZE\n");
    return 100;
  }
  conveyor_client* client = NULL;
  if (conveyor_connect(argv[1], NULL, &client) != CONVEYOR_OK) {
    fprintf(stderr, "connect: %s\n", conveyor_last_error());
    return 100;
  }

  /* Options: too small for init and for open; larger with a zero tail is
   * fine, with a set tail refused. */
  conveyor_stream_options small;
  memset(&small, 0xab, sizeof small);
  int rc = conveyor_stream_options_init(&small, sizeof small - 8);
  check(rc == CONVEYOR_INVALID_ARGUMENT && strstr(conveyor_last_error(), "struct_size") != NULL,
        "init_too_small_is_invalid_argument", "init accepted a short struct");
  check(small.struct_size == 0xabababab, "init_too_small_writes_nothing", "init wrote");

  struct newer_options big;
  memset(&big, 0xcd, sizeof big);
  rc = conveyor_stream_options_init(&big.known, sizeof big);
  check(rc == CONVEYOR_OK && big.known.struct_size == sizeof big && big.known.credits == 4 &&
            all_zero(big.future, sizeof big.future),
        "init_larger_struct_sets_defaults_and_zeroes_the_tail", "wrong init");
  big.known.pipeline = argv[2];
  big.known.batch_size = (uint32_t)atoi(argv[3]);
  big.known.credits = 2;
  conveyor_stream* stream = NULL;
  rc = conveyor_open_stream(client, &big.known, &stream);
  check(rc == CONVEYOR_OK, "open_with_larger_zero_tailed_options", conveyor_status_name(rc));

  big.future[1] = 7;
  conveyor_stream* refused = NULL;
  rc = conveyor_open_stream(client, &big.known, &refused);
  check(rc == CONVEYOR_INVALID_ARGUMENT && refused == NULL &&
            strstr(conveyor_last_error(), "newer header") != NULL,
        "open_with_an_unknown_field_set_is_invalid_argument", conveyor_status_name(rc));
  big.future[1] = 0;

  conveyor_stream_options short_opts = big.known;
  short_opts.struct_size = sizeof short_opts - 4;
  rc = conveyor_open_stream(client, &short_opts, &refused);
  check(rc == CONVEYOR_INVALID_ARGUMENT && refused == NULL, "open_with_short_options_is_refused",
        conveyor_status_name(rc));
  if (stream == NULL) {
    conveyor_client_close(client);
    return failures;
  }

  /* Stream info: a larger struct gets our fields and a zeroed tail. */
  struct newer_stream_info si;
  memset(&si, 0xee, sizeof si);
  si.known.struct_size = sizeof si;
  rc = conveyor_stream_get_info(stream, &si.known);
  check(rc == CONVEYOR_OK && si.known.struct_size == sizeof si && si.known.credits == 2 &&
            si.known.batches_per_epoch > 0 && all_zero(si.future, sizeof si.future),
        "stream_info_into_a_larger_struct", conveyor_status_name(rc));
  conveyor_stream_info tiny = {.struct_size = 4};
  rc = conveyor_stream_get_info(stream, &tiny);
  check(rc == CONVEYOR_INVALID_ARGUMENT, "stream_info_too_small_is_refused",
        conveyor_status_name(rc));

  /* Batch info: too small is refused before a batch is taken (none lost);
   * a larger struct gets our fields and a zeroed tail. */
  conveyor_batch* batch = NULL;
  conveyor_batch_info bad;
  memset(&bad, 0, sizeof bad);
  bad.struct_size = offsetof(conveyor_batch_info, on_device);  /* an ABI 2 caller */
  rc = conveyor_stream_next(stream, &batch, &bad);
  check(rc == CONVEYOR_INVALID_ARGUMENT && batch == NULL && bad.images == NULL,
        "batch_info_too_small_is_refused", conveyor_status_name(rc));

  struct newer_batch_info bi;
  memset(&bi, 0x5a, sizeof bi);
  bi.known.struct_size = sizeof bi;
  rc = conveyor_stream_next(stream, &batch, &bi.known);
  check(rc == CONVEYOR_OK && batch != NULL && bi.known.sequence == 0 &&
            bi.known.struct_size == sizeof bi && bi.known.num_samples > 0 &&
            all_zero(bi.future, sizeof bi.future),
        "next_after_a_refused_call_is_the_first_batch_into_a_larger_struct",
        conveyor_status_name(rc));
  conveyor_batch_release(batch);

  conveyor_stream_close(stream);
  conveyor_client_close(client);
  return failures;
}
