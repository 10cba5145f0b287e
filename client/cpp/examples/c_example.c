/* c_example: reads batches from conveyord through the C ABI only
 * (conveyor_client.h), compiled as C: what a binding in another language
 * does through its FFI.
 *
 *   c_example --server ADDRESS --pipeline NAME --batch-size N [--seed S]
 *             [--epoch E] [--rank R] [--world-size W] [--credits C]
 *             [--transport auto|shared_memory|data_socket|inline|device_memory]
 *             [--gpu-uuid GPU-...] [--pin-memory 0|1] [--batches N] [--out FILE]
 *
 * Prints "opened ...", one "batch ..." line per batch and "done ..." with
 * the rate and the resume state; --out appends the image bytes of every
 * batch to FILE. Exit 1 on an error (the library's message on stderr).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conveyor_client.h"

static int fail(const char* what, int status) {
  fflush(stdout);
  fprintf(stderr, "c_example: %s failed: %s: %s\n", what, conveyor_status_name(status),
          conveyor_last_error());
  return 1;
}

static int usage(const char* why) {
  fprintf(stderr, "c_example: %s\nusage: c_example --server ADDRESS --pipeline NAME "
                  "--batch-size N [options]\n", why);
  return 2;
}

static const char* transport_name(int t) {
  switch (t) {
    case CONVEYOR_SHARED_MEMORY: return "shared_memory";
    case CONVEYOR_DATA_SOCKET: return "data_socket";
    case CONVEYOR_INLINE: return "inline";
    case CONVEYOR_DEVICE_MEMORY: return "device_memory";
    default: return "auto";
  }
}

static int parse_u64(const char* s, unsigned long long* out) {
  char* end = NULL;
  if (*s == '\0' || *s == '-') return 0;
  *out = strtoull(s, &end, 10);
  return *end == '\0';
}

int main(int argc, char** argv) {
  const char* server = NULL;
  const char* out_path = NULL;
  unsigned long long max_batches = 0;
  conveyor_stream_options o;
  conveyor_stream_options_init(&o);
  for (int i = 1; i < argc; i += 2) {
    const char* flag = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    unsigned long long n = 0;
    if (v == NULL) return usage("a flag needs a value");
    if (strcmp(flag, "--server") == 0) { server = v; continue; }
    if (strcmp(flag, "--pipeline") == 0) { o.pipeline = v; continue; }
    if (strcmp(flag, "--out") == 0) { out_path = v; continue; }
    if (strcmp(flag, "--transport") == 0) {
      if (strcmp(v, "auto") == 0) o.transport = CONVEYOR_TRANSPORT_AUTO;
      else if (strcmp(v, "shared_memory") == 0) o.transport = CONVEYOR_SHARED_MEMORY;
      else if (strcmp(v, "data_socket") == 0) o.transport = CONVEYOR_DATA_SOCKET;
      else if (strcmp(v, "inline") == 0) o.transport = CONVEYOR_INLINE;
      else if (strcmp(v, "device_memory") == 0) o.transport = CONVEYOR_DEVICE_MEMORY;
      else return usage("unknown --transport");
      continue;
    }
    if (strcmp(flag, "--gpu-uuid") == 0) { o.gpu_uuid = v; continue; }
    if (!parse_u64(v, &n)) return usage("a number is expected");
    if (strcmp(flag, "--pin-memory") == 0) { o.pin_memory = n != 0; continue; }
    if (strcmp(flag, "--batch-size") == 0) o.batch_size = (uint32_t)n;
    else if (strcmp(flag, "--seed") == 0) o.seed = n;
    else if (strcmp(flag, "--epoch") == 0) o.first_epoch = n;
    else if (strcmp(flag, "--rank") == 0) o.rank = (uint32_t)n;
    else if (strcmp(flag, "--world-size") == 0) o.world_size = (uint32_t)n;
    else if (strcmp(flag, "--credits") == 0) o.credits = (uint32_t)n;
    else if (strcmp(flag, "--batches") == 0) max_batches = n;
    else return usage("unknown flag");
  }
  if (server == NULL || o.pipeline == NULL || o.batch_size == 0) {
    return usage("--server, --pipeline and --batch-size are required");
  }

  if (conveyor_abi_version() != CONVEYOR_CLIENT_ABI_VERSION) {
    fprintf(stderr, "c_example: libconveyor_client has ABI version %d, the header %d\n",
            conveyor_abi_version(), CONVEYOR_CLIENT_ABI_VERSION);
    return 1;
  }
  conveyor_client* client = NULL;
  int rc = conveyor_connect(server, NULL, &client);
  if (rc != CONVEYOR_OK) return fail("conveyor_connect", rc);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  conveyor_stream* stream = NULL;
  rc = conveyor_open_stream(client, &o, &stream);
  if (rc != CONVEYOR_OK) {
    rc = fail("conveyor_open_stream", rc);
    conveyor_client_close(client);
    return rc;
  }
  conveyor_stream_info si;
  conveyor_stream_get_info(stream, &si);
  printf("opened stream=%llu transport=%s batches_per_epoch=%llu\n",
         (unsigned long long)si.stream_id, transport_name(si.transport),
         (unsigned long long)si.batches_per_epoch);

  FILE* out = out_path != NULL ? fopen(out_path, "wb") : NULL;
  if (out_path != NULL && out == NULL) {
    perror(out_path);
    conveyor_stream_close(stream);
    conveyor_client_close(client);
    return 1;
  }
  unsigned long long batches = 0, samples = 0;
  int status = 0;
  while (max_batches == 0 || batches < max_batches) {
    conveyor_batch* batch = NULL;
    conveyor_batch_info info;
    rc = conveyor_stream_next(stream, &batch, &info);
    if (rc == CONVEYOR_END_OF_STREAM) break;
    if (rc != CONVEYOR_OK) {
      status = fail("conveyor_stream_next", rc);
      break;
    }
    ++batches;
    samples += info.num_samples;
    printf("batch seq=%llu epoch=%llu slot=%u n=%u dtype=%d bytes=%llu device=%d labels=",
           (unsigned long long)info.sequence, (unsigned long long)info.epoch, info.slot,
           info.num_samples, info.dtype, (unsigned long long)info.images_bytes, info.on_device);
    for (uint32_t i = 0; i < info.num_samples; ++i) {
      printf(i ? ",%lld" : "%lld", (long long)info.labels[i]);
    }
    printf(" indices=");
    for (uint32_t i = 0; i < info.num_samples; ++i) {
      printf(i ? ",%lld" : "%lld", (long long)info.sample_indices[i]);
    }
    printf("\n");
    if (out != NULL) {
      /* A device batch on a GPU has no host bytes: copy them to the host. */
      void* copy = NULL;
      const void* bytes = info.images;
      if (bytes == NULL && info.images_bytes > 0) {
        copy = malloc(info.images_bytes);
        if (copy == NULL) {
          perror("malloc");
          status = 1;
        } else if ((rc = conveyor_batch_copy_images(batch, copy, info.images_bytes)) != 0) {
          status = fail("conveyor_batch_copy_images", rc);
        }
        bytes = copy;
      }
      if (status == 0 && fwrite(bytes, 1, info.images_bytes, out) != info.images_bytes) {
        perror(out_path);
        status = 1;
      }
      free(copy);
    }
    conveyor_batch_release(batch);
    if (status != 0) break;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (out != NULL && fclose(out) != 0 && status == 0) {
    perror(out_path);
    status = 1;
  }
  if (status == 0) {
    uint64_t epoch = 0, offset = 0;
    conveyor_stream_resume_state(stream, &epoch, &offset, NULL);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("done batches=%llu samples=%llu seconds=%.3f batches_per_s=%.1f resume_epoch=%llu "
           "resume_offset=%llu\n", batches, samples, seconds,
           seconds > 0 ? (double)batches / seconds : 0.0, (unsigned long long)epoch,
           (unsigned long long)offset);
  }
  conveyor_stream_close(stream);
  conveyor_client_close(client);
  return status;
}
