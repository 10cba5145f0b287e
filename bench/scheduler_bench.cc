// scheduler_bench: what the engine's scheduler costs per task, apart from the
// work of the tasks. The fetch stage is a SampleSource that hands out a few
// bytes without I/O; the decode stage is a SampleDecoder that does nothing
// (--stage noop) or burns a fixed amount of this thread's CPU time
// (--stage spin --stage-us 1000: a 1 ms decode, exact however often the
// thread is preempted, so threads may exceed cores). Endless streams are
// consumed by one thread each (Next + Release) for --seconds after a warm-up.
//
// Per thread count it prints tasks and samples per second, the process CPU
// per task and per sample, and the scheduler's own accounting
// (Engine::scheduler_stats): time workers waited for and held its lock per
// task, and wakeups. With --stage spin, "overhead/sample" is the CPU a
// sample costs beyond the stage itself (process CPU / samples − stage-us):
// fetch and decode task dispatch, collate, delivery to the consumer, and
// all lock and wakeup costs, and the kernel's cost of switching threads;
// "% of stage" relates it to the stage's cost. Context switches per task
// tell the scheduler's blocking (blocked: waiting for its lock or for work)
// from oversubscription (preempted: more runnable threads than cores).
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/engine/engine.h"

namespace {

struct ProcUsage {
  double cpu_s = 0;
  double voluntary = 0;    // context switches: blocked (lock, condition variable)
  double involuntary = 0;  // preempted (more runnable threads than cores)
};

ProcUsage ProcessUsage() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  ProcUsage u;
  u.cpu_s =
      ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  u.voluntary = static_cast<double>(ru.ru_nvcsw);
  u.involuntary = static_cast<double>(ru.ru_nivcsw);
  return u;
}

uint64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Fetch without I/O: every sample is the same 64 bytes.
class ConstantSource final : public conveyor::SampleSource {
 public:
  absl::Status Read(uint64_t, std::vector<uint8_t>* out) const override {
    out->assign(64, 0xAB);
    return absl::OkStatus();
  }
};

// Decode that writes nothing and costs `cpu_ns` of this thread's CPU time.
class SyntheticDecoder final : public conveyor::SampleDecoder {
 public:
  explicit SyntheticDecoder(uint64_t cpu_ns) : cpu_ns_(cpu_ns) {}
  absl::Status Run(std::span<const uint8_t>, const conveyor::TransformSpec&, conveyor::Rng&,
                   uint8_t*) override {
    if (cpu_ns_ == 0) return absl::OkStatus();
    const uint64_t until = ThreadCpuNanos() + cpu_ns_;
    while (ThreadCpuNanos() < until) {
    }
    return absl::OkStatus();
  }

 private:
  const uint64_t cpu_ns_;
};

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::stoi(item));
  return v;
}

// --help prints this on stdout and exits 0; a bad argument prints it on
// stderr and exits 2.
constexpr const char* kUsage =
    "usage: scheduler_bench [--threads 2,16,64] [--stage noop|spin] [--stage-us 1000]\n"
    "       [--streams 1] [--batch-size 64] [--credits 8] [--seconds 3] [--json]\n";

int Usage() {
  std::cerr << kUsage;
  return 2;
}

struct Result {
  int threads = 0;
  double wall_s = 0, cpu_s = 0, voluntary = 0, involuntary = 0;
  uint64_t tasks = 0, samples = 0;
  conveyor::SchedulerStats sched;
};

}  // namespace

int main(int argc, char** argv) {
  std::string threads_arg = "2,16,64", stage = "noop";
  int stage_us = 1000, streams = 1;
  uint32_t batch = 64, credits = 8;
  double seconds = 3;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    }
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : "0"; };
    if (a == "--threads")
      threads_arg = next();
    else if (a == "--stage")
      stage = next();
    else if (a == "--stage-us")
      stage_us = std::stoi(next());
    else if (a == "--streams")
      streams = std::stoi(next());
    else if (a == "--batch-size")
      batch = std::stoul(next());
    else if (a == "--credits")
      credits = std::stoul(next());
    else if (a == "--seconds")
      seconds = std::stod(next());
    else if (a == "--json")
      json = true;
    else
      return Usage();
  }
  if (stage != "noop" && stage != "spin") return Usage();
  const uint64_t stage_ns = stage == "spin" ? static_cast<uint64_t>(stage_us) * 1000 : 0;

  // A dataset of 4096 names that are never opened.
  std::vector<conveyor::DatasetIndex::Entry> entries(4096);
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i].relative_path = absl::StrFormat("c/%05d.jpg", i);
    entries[i].label = static_cast<int64_t>(i % 10);
  }
  auto index = conveyor::DatasetIndex::FromEntries("/synthetic", entries);
  if (!index.ok()) {
    std::cerr << index.status() << "\n";
    return 1;
  }
  auto pipeline = std::make_shared<conveyor::PipelineConfig>();
  pipeline->name = "synthetic";
  pipeline->dataset = *index;
  pipeline->transform.output_height = pipeline->transform.output_width = 8;
  pipeline->source = std::make_shared<ConstantSource>();
  if (auto st = conveyor::ValidatePipelineConfig(*pipeline); !st.ok()) {
    std::cerr << st << "\n";
    return 1;
  }

  std::vector<Result> results;
  for (int threads : ParseList(threads_arg)) {
    conveyor::EngineOptions eo;
    eo.num_threads = threads;
    eo.decoder_factory = [stage_ns] { return std::make_unique<SyntheticDecoder>(stage_ns); };
    auto engine = conveyor::Engine::Create(eo);
    if (!engine.ok()) {
      std::cerr << engine.status() << "\n";
      return 1;
    }
    std::atomic<bool> stop{false};
    std::vector<std::unique_ptr<conveyor::Stream>> open;
    std::vector<std::thread> consumers;
    for (int s = 0; s < streams; ++s) {
      conveyor::StreamOptions so;
      so.batch_size = batch;
      so.num_slots = credits;
      so.num_epochs = 0;  // endless
      so.seed = static_cast<uint64_t>(s);
      auto stream = (*engine)->OpenStream(pipeline, so);
      if (!stream.ok()) {
        std::cerr << stream.status() << "\n";
        return 1;
      }
      open.push_back(std::move(*stream));
      conveyor::Stream* st = open.back().get();
      consumers.emplace_back([st, &stop] {
        while (!stop.load(std::memory_order_relaxed)) {
          auto b = st->Next(absl::Seconds(10));
          if (!b.ok() || !b->has_value()) return;
          (void)st->Release((*b)->slot);
        }
      });
    }
    auto decoded = [&] {
      return (*engine)->Stats().stages[static_cast<int>(conveyor::Stage::kDecode)].items_out;
    };
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // warm-up
    const conveyor::SchedulerStats s0 = (*engine)->scheduler_stats();
    const uint64_t d0 = decoded();
    const ProcUsage c0 = ProcessUsage();
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    const conveyor::SchedulerStats s1 = (*engine)->scheduler_stats();
    const uint64_t d1 = decoded();
    const ProcUsage c1 = ProcessUsage();
    const auto t1 = std::chrono::steady_clock::now();
    stop = true;
    for (auto& s : open) s->Cancel();
    for (auto& t : consumers) t.join();
    open.clear();
    (*engine)->Shutdown();

    Result r;
    r.threads = threads;
    r.wall_s = std::chrono::duration<double>(t1 - t0).count();
    r.cpu_s = c1.cpu_s - c0.cpu_s;
    r.voluntary = c1.voluntary - c0.voluntary;
    r.involuntary = c1.involuntary - c0.involuntary;
    r.samples = d1 - d0;
    r.sched.tasks_run = s1.tasks_run - s0.tasks_run;
    r.sched.lock_acquisitions = s1.lock_acquisitions - s0.lock_acquisitions;
    r.sched.lock_wait_ns = s1.lock_wait_ns - s0.lock_wait_ns;
    r.sched.lock_hold_ns = s1.lock_hold_ns - s0.lock_hold_ns;
    r.sched.wakeups = s1.wakeups - s0.wakeups;
    r.sched.idle_wakeups = s1.idle_wakeups - s0.idle_wakeups;
    r.tasks = r.sched.tasks_run;
    results.push_back(r);
  }

  const unsigned cores = std::thread::hardware_concurrency();
  if (json) std::printf("[\n");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const double tasks = std::max<double>(1, r.tasks), samples = std::max<double>(1, r.samples);
    const double cpu_task_us = 1e6 * r.cpu_s / tasks;
    const double cpu_sample_us = 1e6 * r.cpu_s / samples;
    const double overhead_us = cpu_sample_us - stage_ns / 1e3;
    const double wait_us = r.sched.lock_wait_ns / 1e3 / tasks;
    const double hold_us = r.sched.lock_hold_ns / 1e3 / tasks;
    if (json) {
      std::printf(
          "  {\"threads\": %d, \"cores\": %u, \"stage\": \"%s\", \"stage_us\": %d, \"streams\": "
          "%d, "
          "\"tasks_per_s\": %.0f, \"samples_per_s\": %.0f, \"cpu_us_per_task\": %.2f, "
          "\"cpu_us_per_sample\": %.2f, \"overhead_us_per_sample\": %.2f, "
          "\"lock_wait_us_per_task\": %.3f, \"lock_hold_us_per_task\": %.3f, "
          "\"wakeups_per_task\": %.3f, \"idle_wakeups_per_task\": %.3f, "
          "\"voluntary_switches_per_task\": %.3f, \"involuntary_switches_per_task\": %.3f}%s\n",
          r.threads, cores, stage.c_str(), stage_ns ? stage_us : 0, streams, tasks / r.wall_s,
          samples / r.wall_s, cpu_task_us, cpu_sample_us, overhead_us, wait_us, hold_us,
          r.sched.wakeups / tasks, r.sched.idle_wakeups / tasks, r.voluntary / tasks,
          r.involuntary / tasks, i + 1 < results.size() ? "," : "");
    } else {
      std::printf(
          "threads %3d (%u cores), stage %s%s, %d stream(s): %9.0f tasks/s %8.0f samples/s | "
          "CPU %6.2f us/task %8.2f us/sample",
          r.threads, cores, stage.c_str(),
          stage_ns ? absl::StrFormat(" %d us", stage_us).c_str() : "", streams, tasks / r.wall_s,
          samples / r.wall_s, cpu_task_us, cpu_sample_us);
      if (stage_ns) {
        std::printf(" (overhead %.2f us/sample = %.2f%% of stage)", overhead_us,
                    100 * overhead_us / (stage_ns / 1e3));
      }
      std::printf(
          " | lock wait %.3f us/task, hold %.3f us/task | wakeups %.3f/task (%.3f idle) | "
          "switches %.3f blocked + %.3f preempted /task\n",
          wait_us, hold_us, r.sched.wakeups / tasks, r.sched.idle_wakeups / tasks,
          r.voluntary / tasks, r.involuntary / tasks);
    }
  }
  if (json) std::printf("]\n");
  return 0;
}
