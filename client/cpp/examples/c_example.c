/* c_example: reads batches from conveyord through the C ABI only
 * (conveyor_client.h), compiled as C: what a binding in another language
 * does through its FFI.
 *
 *   c_example --server ADDRESS --pipeline NAME --batch-size N [--seed S]
 *             [--epoch E] [--rank R] [--world-size W] [--credits C]
 *             [--transport auto|shared_memory|data_socket|inline|device_memory]
 *             [--gpu-uuid GPU-...] [--pin-memory 0|1] [--batches N] [--out FILE]
 *   c_example --help | --version
 *
 * Prints "opened ...", one "batch ..." line per batch and "done ..." with
 * the rate and the resume state; --out appends the image bytes of every
 * batch to FILE. Exit 1 on an error (the library's message on stderr), 2
 * on a usage error; --help prints the usage and exits 0, --version the
 * library's version and ABI versions.
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

static const char kUsage[] =
    "usage: c_example --server ADDRESS --pipeline NAME --batch-size N [options]\n"
    "       c_example --help | --version\n"
    "Reads batches from conveyord through the C ABI (libconveyor_client.so) and prints\n"
    "one line per batch.\n"
    "  --server ADDRESS     unix:///path.sock, /path.sock or HOST:PORT\n"
    "  --pipeline NAME      a pipeline of the daemon's config\n"
    "  --batch-size N       samples per batch\n"
    "  --seed S             shuffle seed (0)\n"
    "  --epoch E            first epoch (0)\n"
    "  --rank R             this rank (0) ...\n"
    "  --world-size W       ... of W (1)\n"
    "  --credits C          batches held unreleased at most (4)\n"
    "  --transport T        auto|shared_memory|data_socket|inline|device_memory (auto)\n"
    "  --gpu-uuid GPU-...   the GPU of device_memory / pin-memory\n"
    "  --pin-memory 0|1     page-lock the shared-memory slots for CUDA (0)\n"
    "  --batches N          stop after N batches (0: the whole epoch)\n"
    "  --out FILE           write every batch's image bytes to FILE\n"
    "Exit status: 0 done, 1 an error (the library's message on stderr), 2 a usage error.\n";

static int usage(const char* why) {
  fprintf(stderr, "c_example: %s\n%s", why, kUsage);
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
  if (conveyor_stream_options_init(&o, sizeof o) != CONVEYOR_OK) {
    fprintf(stderr, "c_example: %s\n", conveyor_last_error());
    return 1;
  }
  for (int i = 1; i < argc; i += 2) {
    const char* flag = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    unsigned long long n = 0;
    if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
      fputs(kUsage, stdout);
      return 0;
    }
    if (strcmp(flag, "--version") == 0) {
      printf("c_example: libconveyor_client %s, ABI version %d (header %d)\n", conveyor_version(),
             conveyor_abi_version(), CONVEYOR_CLIENT_ABI_VERSION);
      return 0;
    }
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
  conveyor_stream_info si = {.struct_size = sizeof si};
  rc = conveyor_stream_get_info(stream, &si);
  if (rc != CONVEYOR_OK) {
    rc = fail("conveyor_stream_get_info", rc);
    conveyor_stream_close(stream);
    conveyor_client_close(client);
    return rc;
  }
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
    conveyor_batch_info info = {.struct_size = sizeof info};
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
