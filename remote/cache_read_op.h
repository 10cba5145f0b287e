// CacheReadOp: one asynchronous read through the object cache
// (CachedObjectReader, CachedShardReader): where its bytes go and its
// completion, run exactly once (Finish) whichever of the answer or a Cancel
// comes first; bytes reach the reader's buffer only inside Finish, so a
// cancelled read's buffer is never written after its `done` ran. Internal
// to remote/.
//
// Thread-safety: Finish, SetInner and the handle's methods may be called
// concurrently from any thread.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/mutex.h"
#include "core/data/pending_read.h"
#include "remote/object_validators.h"

namespace conveyor::remote {

// One read through the cache: where its bytes go and its completion, run
// exactly once (Finish) whichever of the fill, the hit or a Cancel comes first.
struct Op {
  std::string object;
  std::string key;  // RedactUrl(object)
  uint64_t max_bytes = 0;
  ObjectValidators validators;  // the HEAD's answer

  Mutex mu;
  std::vector<uint8_t>* out ABSL_GUARDED_BY(mu) = nullptr;
  ReadDone done ABSL_GUARDED_BY(mu);
  bool finished ABSL_GUARDED_BY(mu) = false;
  std::shared_ptr<PendingRead> inner ABSL_GUARDED_BY(mu);  // the HEAD or uncached GET now

  // Runs done with `st` unless it ran; `fill` (when ok and given) is copied
  // (or, `take`, swapped) into *out first.
  void Finish(absl::Status st, std::vector<uint8_t>* fill = nullptr, bool take = false) {
    ReadDone run;
    {
      MutexLock lock(&mu);
      if (finished) return;
      finished = true;
      if (st.ok() && fill != nullptr) {
        if (take) {
          out->swap(*fill);
        } else {
          out->assign(fill->begin(), fill->end());
        }
      }
      run = std::move(done);
      inner.reset();
    }
    run(std::move(st));
  }
};

class OpHandle final : public PendingRead {
 public:
  explicit OpHandle(std::shared_ptr<Op> op) : op_(std::move(op)) {}
  void Cancel() override {
    std::shared_ptr<PendingRead> inner;
    {
      MutexLock lock(&op_->mu);
      inner = op_->inner;
    }
    op_->Finish(absl::CancelledError(absl::StrCat("reading ", op_->key, ": cancelled")));
    if (inner != nullptr) inner->Cancel();
  }
  Progress progress() const override {
    std::shared_ptr<PendingRead> inner;
    {
      MutexLock lock(&op_->mu);
      inner = op_->inner;
    }
    if (inner != nullptr) return inner->progress();
    return Progress{op_->key, "", 0};
  }

 private:
  const std::shared_ptr<Op> op_;
};

// Keeps `p` as the request `op` waits on now (cancelled with it), unless op
// finished already.
inline void SetInner(Op* op, std::shared_ptr<PendingRead> p) {
  if (p == nullptr) return;
  MutexLock lock(&op->mu);
  if (!op->finished) op->inner = std::move(p);
}

// Whether op finished (answered or cancelled).
inline bool Finished(Op* op) {
  MutexLock lock(&op->mu);
  return op->finished;
}

}  // namespace conveyor::remote
