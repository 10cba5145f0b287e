#include "remote/relaid_jpeg_source.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/decode/jpeg_relayout.h"
#include "spdlog/spdlog.h"

namespace conveyor::remote {

namespace {

bool LooksLikeJpeg(const std::vector<uint8_t>& b) {
  return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
}

}  // namespace

std::string RelaidKey(const std::string& id) { return absl::StrCat("relaid-jpeg:", id); }

ObjectValidators RelaidValidators(uint64_t size) {
  ObjectValidators v;
  v.etag = "relaid-jpeg-v1";  // the layout of core/decode/jpeg_relayout.h
  v.size = size;
  return v;
}

Relayer::Relayer(std::shared_ptr<ObjectCache> cache) : cache_(std::move(cache)) {
  thread_ = std::thread([this] { Run(); });
}

Relayer::~Relayer() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_cv_.SignalAll();
  thread_.join();
}

void Relayer::Offer(const std::string& key, std::span<const uint8_t> bytes) {
  {
    MutexLock lock(&mu_);
    if (stop_ || refused_.count(key) != 0 || pending_.count(key) != 0) return;
    if (queued_bytes_ + bytes.size() > kRelayQueueBytes) {
      ++counters_.dropped;
      return;
    }
    queue_.push_back(Job{key, std::vector<uint8_t>(bytes.begin(), bytes.end())});
    pending_.insert(key);
    queued_bytes_ += bytes.size();
    ++counters_.offered;
  }
  work_cv_.Signal();
}

Relayer::Counters Relayer::counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

void Relayer::Drain() {
  MutexLock lock(&mu_);
  while (!queue_.empty() || busy_) idle_cv_.Wait(&mu_);
}

void Relayer::Run() {
  // The lowest priority for this thread alone (Linux: nice is per thread),
  // so copies take only the CPU that the decoders leave.
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19) != 0) {
    spdlog::debug("relay_jpeg: could not lower the relayer thread's priority");
  }
  while (true) {
    Job job;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stop_) work_cv_.Wait(&mu_);
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= job.bytes.size();
      busy_ = true;
    }
    absl::StatusOr<std::vector<uint8_t>> copy = RelayJpeg(job.bytes);
    if (copy.ok()) cache_->Put(job.key, RelaidValidators(copy->size()), *copy);
    {
      MutexLock lock(&mu_);
      busy_ = false;
      pending_.erase(job.key);
      if (copy.ok()) {
        ++counters_.made;
      } else {
        ++counters_.refused;
        if (refused_.size() < kMaxRefusedKeys) refused_.insert(job.key);
      }
      if (queue_.empty()) idle_cv_.SignalAll();
    }
  }
}

RelaidJpegSource::RelaidJpegSource(std::shared_ptr<const SampleSource> inner,
                                   std::shared_ptr<ObjectCache> cache,
                                   std::shared_ptr<Relayer> relayer, uint64_t samples)
    : inner_(std::move(inner)),
      cache_(std::move(cache)),
      relayer_(std::move(relayer)),
      samples_(samples),
      checked_(new std::atomic<uint64_t>[(samples + 63) / 64]()) {}

absl::Status RelaidJpegSource::Read(uint64_t index, std::vector<uint8_t>* out) const {
  std::string id;
  if (!inner_->Identity(index, &id)) return inner_->Read(index, out);
  const std::string key = RelaidKey(id);
  if (std::optional<ObjectValidators> v = cache_->ValidatorsOf(key);
      v.has_value() && v->etag == RelaidValidators(0).etag && cache_->Get(key, *v, out)) {
    std::atomic<uint64_t>* word = index < samples_ ? &checked_[index / 64] : nullptr;
    const uint64_t bit = uint64_t{1} << (index % 64);
    if (word != nullptr && (word->load(std::memory_order_relaxed) & bit) != 0) {
      return absl::OkStatus();
    }
    absl::StatusOr<RelaidLayout> layout = ParseRelaid(*out);
    if (layout.ok()) {
      if (word != nullptr) word->fetch_or(bit, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    // Once per damaged copy: the new one replaces it.
    damaged_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn(
        "re-laid copy of sample {} ({}) is damaged ({}): serving the original and "
        "re-laying it",
        index, id, std::string(layout.status().message()));
  }
  absl::Status st = inner_->Read(index, out);
  if (st.ok() && LooksLikeJpeg(*out)) relayer_->Offer(key, *out);
  return st;
}

}  // namespace conveyor::remote
