// fetch_batches: reads batches from conveyord with the C++ client and prints
// batches/s — an example of client.h and a tool of the integration tests.
//
//   fetch_batches --server unix:///run/conveyor/conveyor.sock --pipeline train
//                 --batch-size 64 [--seed S] [--epoch E] [--epochs N] [--rank R]
//                 [--world-size W] [--credits C] [--transport auto|shared_memory|
//                 data_socket|inline|device_memory] [--gpu-uuid GPU-…] [--pin-memory]
//                 [--batches N] [--out FILE] [--hold N]
//                 [--pause-after N] [--resume-epoch E --resume-offset O] [--quiet]
//                 [--seconds S [--warmup-batches N]]
//                 [--also-server ADDRESS]... [--balanced] [--range-batches N]
//                 [--stall-seconds S]
//
// --out appends every batch's image bytes to FILE (a device batch's copied
// to the host first); --hold keeps the last N batches unreleased;
// --pause-after prints "paused" after N batches and waits for a line on
// stdin. Prints "batch ..." per batch unless --quiet (sequence, epoch, slot,
// samples, dtype, bytes, device=1 for a device batch, labels, indices) and a
// "done ..." line with the rate and the resume state. --seconds stops
// after S seconds counted from the end of the first --warmup-batches
// batches (default 0: from the open); the done line then also gives
// timed_samples, timed_seconds and images_per_s over that span
// (bench/scaling.sh). --also-server (repeatable) reads through a PoolStream
// (client/cpp/pool/pool_stream.h) over --server and these, and prints a
// "pool ..." line per daemon before the done line. Exit 1 on an error (its message on stderr), 2 on
// a usage error; --help prints the usage and exits 0.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "client/cpp/client.h"
#include "client/cpp/pool/pool_stream.h"

namespace {

using conveyor::client::BatchLease;
namespace v1 = conveyor::v1;

struct Args {
  std::string server;
  conveyor::client::StreamOptions stream;
  uint64_t batches = 0;
  std::string out;
  size_t hold = 0;
  uint64_t pause_after = 0;
  bool quiet = false;
  double seconds = 0;                     // 0: no time limit
  uint64_t warmup_batches = 0;            // not counted in the timed span
  bool help = false;                      // --help: print the usage, exit 0
  std::vector<std::string> also_servers;  // a pool: --server and these
  conveyor::client::PoolOptions pool;
};

constexpr char kUsage[] =
    "usage: fetch_batches --server ADDRESS --pipeline NAME --batch-size N [options]\n"
    "       fetch_batches --help\n"
    "Reads batches from conveyord with the C++ client and prints batches/s.\n"
    "  --server ADDRESS       unix:///path.sock, /path.sock or HOST:PORT\n"
    "  --pipeline NAME        a pipeline of the daemon's config\n"
    "  --batch-size N         samples per batch\n"
    "  --seed S               shuffle seed (0)\n"
    "  --epoch E              first epoch (0)\n"
    "  --epochs N             epochs to read (1; 0: endless)\n"
    "  --rank R               this rank (0) ...\n"
    "  --world-size W         ... of W (1)\n"
    "  --credits C            batches held unreleased at most (4)\n"
    "  --transport T          auto|shared_memory|data_socket|inline|device_memory (auto)\n"
    "  --gpu-uuid GPU-...     the GPU of device_memory / --pin-memory\n"
    "  --pin-memory           page-lock the shared-memory slots for CUDA\n"
    "  --batches N            stop after N batches (0: no limit)\n"
    "  --out FILE             write every batch's image bytes to FILE\n"
    "  --hold N               keep the last N batches unreleased\n"
    "  --pause-after N        print \"paused\" after N batches, wait for a line on stdin\n"
    "  --resume-epoch E --resume-offset O   start at a resume point\n"
    "  --seconds S            stop after S seconds (timed from --warmup-batches N)\n"
    "  --quiet                no line per batch, only the \"done\" line\n"
    "  --also-server ADDRESS  another daemon of the same pipeline (repeatable): the\n"
    "                         batches are spread over --server and these\n"
    "  --balanced             every daemon takes ranges (default: local_first)\n"
    "  --range-batches N      batches per range of a pool (8)\n"
    "  --stall-seconds S      a pool daemon silent this long loses its range (30)\n"
    "Exit status: 0 done, 1 an error (its message on stderr), 2 a usage error.\n";

int Usage(const std::string& why) {
  std::cerr << "fetch_batches: " << why << "\n" << kUsage;
  return 2;
}

template <typename T>
bool ParseNumber(const char* text, T* out) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v > std::numeric_limits<T>::max()) return false;
  *out = static_cast<T>(v);
  return true;
}

std::optional<Args> Parse(int argc, char** argv, std::string* error) {
  Args a;
  std::optional<uint64_t> resume_epoch, resume_offset;
  static const std::map<std::string, v1::Transport> kTransports = {
      {"auto", v1::TRANSPORT_AUTO},
      {"shared_memory", v1::SHARED_MEMORY},
      {"data_socket", v1::DATA_SOCKET},
      {"inline", v1::INLINE},
      {"device_memory", v1::DEVICE_MEMORY}};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      a.help = true;
      return a;
    }
    if (flag == "--quiet") {
      a.quiet = true;
      continue;
    }
    if (flag == "--pin-memory") {
      a.stream.pin_memory = true;
      continue;
    }
    if (flag == "--balanced") {
      a.pool.policy = conveyor::client::PoolPolicy::kBalanced;
      continue;
    }
    if (i + 1 >= argc) {
      *error = flag + " needs a value";
      return std::nullopt;
    }
    const char* v = argv[++i];
    bool ok = true;
    uint64_t n = 0;
    if (flag == "--server")
      a.server = v;
    else if (flag == "--pipeline")
      a.stream.pipeline = v;
    else if (flag == "--out")
      a.out = v;
    else if (flag == "--gpu-uuid")
      a.stream.gpu_uuid = v;
    else if (flag == "--also-server")
      a.also_servers.push_back(v);
    else if (flag == "--range-batches")
      ok = ParseNumber(v, &a.pool.range_batches);
    else if (flag == "--stall-seconds") {
      double secs = 0;
      ok = absl::SimpleAtod(v, &secs) && secs > 0 && secs < 1e6;
      a.pool.stall_timeout = absl::Seconds(secs);
    } else if (flag == "--transport") {
      auto it = kTransports.find(v);
      ok = it != kTransports.end();
      if (ok) a.stream.transport = it->second;
    } else if (flag == "--batch-size")
      ok = ParseNumber(v, &a.stream.batch_size);
    else if (flag == "--seed")
      ok = ParseNumber(v, &a.stream.seed);
    else if (flag == "--epoch")
      ok = ParseNumber(v, &a.stream.first_epoch);
    else if (flag == "--epochs")
      ok = ParseNumber(v, &a.stream.num_epochs);
    else if (flag == "--rank")
      ok = ParseNumber(v, &a.stream.rank);
    else if (flag == "--world-size")
      ok = ParseNumber(v, &a.stream.world_size);
    else if (flag == "--credits")
      ok = ParseNumber(v, &a.stream.credits);
    else if (flag == "--batches")
      ok = ParseNumber(v, &a.batches);
    else if (flag == "--hold")
      ok = ParseNumber(v, &a.hold);
    else if (flag == "--pause-after")
      ok = ParseNumber(v, &a.pause_after);
    else if (flag == "--warmup-batches")
      ok = ParseNumber(v, &a.warmup_batches);
    else if (flag == "--seconds")
      ok = absl::SimpleAtod(v, &a.seconds) && a.seconds > 0 && a.seconds < 1e7;
    else if (flag == "--resume-epoch")
      ok = ParseNumber(v, &n), resume_epoch = n;
    else if (flag == "--resume-offset")
      ok = ParseNumber(v, &n), resume_offset = n;
    else {
      *error = "unknown flag " + flag;
      return std::nullopt;
    }
    if (!ok) {
      *error = "bad value for " + flag + ": " + v;
      return std::nullopt;
    }
  }
  if (a.server.empty() || a.stream.pipeline.empty() || a.stream.batch_size == 0) {
    *error = "--server, --pipeline and --batch-size are required";
    return std::nullopt;
  }
  if (resume_epoch.has_value() != resume_offset.has_value()) {
    *error = "give --resume-epoch and --resume-offset together";
    return std::nullopt;
  }
  if (resume_epoch) {
    a.stream.resume =
        conveyor::client::ResumeState{*resume_epoch, *resume_offset, a.stream.world_size};
  }
  return a;
}

const char* TransportName(v1::Transport t) {
  switch (t) {
    case v1::SHARED_MEMORY: return "shared_memory";
    case v1::DATA_SOCKET: return "data_socket";
    case v1::INLINE: return "inline";
    case v1::DEVICE_MEMORY: return "device_memory";
    default: return "auto";
  }
}

void PrintBatch(const BatchLease& b) {
  const v1::Batch& h = b.header();
  std::printf("batch seq=%llu epoch=%llu slot=%u n=%u dtype=%d bytes=%llu device=%d labels=",
              static_cast<unsigned long long>(h.sequence()),
              static_cast<unsigned long long>(h.epoch()), h.slot(), h.num_samples(),
              static_cast<int>(h.dtype()), static_cast<unsigned long long>(b.images_bytes()),
              b.on_device() ? 1 : 0);
  for (int i = 0; i < h.labels_size(); ++i)
    std::printf(i ? ",%lld" : "%lld", static_cast<long long>(h.labels(i)));
  std::printf(" indices=");
  for (int i = 0; i < h.sample_indices_size(); ++i) {
    std::printf(i ? ",%lld" : "%lld", static_cast<long long>(h.sample_indices(i)));
  }
  std::printf("\n");
}

int Fail(const absl::Status& status) {
  std::fflush(stdout);
  std::fprintf(stderr, "fetch_batches: error: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string error;
  std::optional<Args> args = Parse(argc, argv, &error);
  if (!args) return Usage(error);
  if (args->help) {
    std::cout << kUsage;
    return 0;
  }

  const auto start = std::chrono::steady_clock::now();
  // One daemon's Stream, or a PoolStream over several: Next() and
  // resume_state() of either.
  std::unique_ptr<conveyor::client::Stream> stream;
  std::unique_ptr<conveyor::client::PoolStream> pool;
  if (args->also_servers.empty()) {
    absl::StatusOr<conveyor::client::Client> client =
        conveyor::client::Client::Create(args->server);
    if (!client.ok()) return Fail(client.status());
    absl::StatusOr<std::unique_ptr<conveyor::client::Stream>> opened =
        client->OpenStream(args->stream);
    if (!opened.ok()) return Fail(opened.status());
    stream = std::move(*opened);
    const v1::StreamOpened& op = stream->opened();
    std::printf("opened stream=%llu transport=%s batches_per_epoch=%llu pinned=%d\n",
                static_cast<unsigned long long>(op.stream_id()), TransportName(op.transport()),
                static_cast<unsigned long long>(op.batches_per_epoch()),
                args->stream.pin_memory ? 1 : 0);
  } else {
    std::vector<std::string> servers = {args->server};
    servers.insert(servers.end(), args->also_servers.begin(), args->also_servers.end());
    absl::StatusOr<std::unique_ptr<conveyor::client::PoolStream>> opened =
        conveyor::client::PoolStream::Open(servers, args->stream, args->pool);
    if (!opened.ok()) return Fail(opened.status());
    pool = std::move(*opened);
    std::printf("opened pool daemons=%zu\n", servers.size());
  }
  auto next_batch = [&]() { return pool != nullptr ? pool->Next() : stream->Next(); };

  FILE* out = nullptr;
  if (!args->out.empty() && (out = std::fopen(args->out.c_str(), "wb")) == nullptr) {
    return Fail(
        absl::InvalidArgumentError("cannot open --out " + args->out + ": " + std::strerror(errno)));
  }
  std::deque<BatchLease> held;  // the last --hold batches
  std::vector<uint8_t> copy;    // --out of device batches
  uint64_t batches = 0, samples = 0;
  uint64_t timed_samples = 0;
  std::optional<std::chrono::steady_clock::time_point> timed_from;
  if (args->seconds > 0 && args->warmup_batches == 0) timed_from = start;
  double timed_seconds = 0;
  absl::Status status;
  while (args->batches == 0 || batches < args->batches) {
    if (timed_from) {
      timed_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - *timed_from).count();
      if (timed_seconds >= args->seconds) break;
    }
    absl::StatusOr<std::optional<BatchLease>> next = next_batch();
    if (!next.ok()) {
      status = next.status();
      break;
    }
    if (!next->has_value()) break;
    BatchLease& batch = **next;
    ++batches;
    samples += batch.header().num_samples();
    if (timed_from) {
      timed_samples += batch.header().num_samples();
    } else if (args->seconds > 0 && batches == args->warmup_batches) {
      timed_from = std::chrono::steady_clock::now();
    }
    if (!args->quiet) PrintBatch(batch);
    if (out != nullptr) {
      const uint8_t* bytes = batch.images();
      if (bytes == nullptr && batch.images_bytes() > 0) {  // a device batch on a GPU
        copy.resize(batch.images_bytes());
        status = batch.CopyImages(copy.data());
        if (!status.ok()) break;
        bytes = copy.data();
      }
      if (std::fwrite(bytes, 1, batch.images_bytes(), out) != batch.images_bytes()) {
        status = absl::DataLossError("writing --out " + args->out + " failed");
        break;
      }
    }
    held.push_back(std::move(batch));
    while (held.size() > args->hold) held.pop_front();  // releases the oldest
    if (args->pause_after != 0 && batches == args->pause_after) {
      std::printf("paused held=%zu\n", stream != nullptr ? stream->held() : held.size());
      std::fflush(stdout);
      std::string line;
      std::getline(std::cin, line);
    }
  }
  const auto end = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(end - start).count();
  if (timed_from) timed_seconds = std::chrono::duration<double>(end - *timed_from).count();
  held.clear();
  if (out != nullptr && std::fclose(out) != 0 && status.ok()) {
    status = absl::DataLossError("closing --out " + args->out + " failed");
  }
  if (pool != nullptr) {
    for (const conveyor::client::PoolDaemonStats& d : pool->stats().daemons) {
      std::printf("pool address=%s local=%d state=%s ranges=%llu batches=%llu error=%s\n",
                  d.address.c_str(), d.local ? 1 : 0, d.state.c_str(),
                  static_cast<unsigned long long>(d.ranges),
                  static_cast<unsigned long long>(d.batches), d.last_error.empty() ? "-" : "yes");
    }
  }
  if (!status.ok()) return Fail(status);
  const conveyor::client::ResumeState& r =
      pool != nullptr ? pool->resume_state() : stream->resume_state();
  std::printf(
      "done batches=%llu samples=%llu seconds=%.3f batches_per_s=%.1f "
      "resume_epoch=%llu resume_offset=%llu",
      static_cast<unsigned long long>(batches), static_cast<unsigned long long>(samples), seconds,
      seconds > 0 ? batches / seconds : 0.0, static_cast<unsigned long long>(r.epoch),
      static_cast<unsigned long long>(r.offset));
  if (args->seconds > 0) {
    std::printf(" timed_samples=%llu timed_seconds=%.3f images_per_s=%.1f",
                static_cast<unsigned long long>(timed_samples), timed_seconds,
                timed_seconds > 0 ? timed_samples / timed_seconds : 0.0);
  }
  std::printf("\n");
  return 0;
}
