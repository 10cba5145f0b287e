// PrimaryContext: a retained reference to one device's primary context (the
// context the CUDA runtime, and so PyTorch, CuPy and JAX, use on that
// device), released on destruction; and ContextScope, which makes it the
// calling thread's current context for a scope (push, then pop). The
// client's registrations and mappings are made and undone inside one.
//
// Thread-safety: a PrimaryContext is a value with one owner; a
// ContextScope belongs to the thread that made it.
#pragma once

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "client/cpp/cuda/cuda_driver.h"

namespace conveyor::client {

class PrimaryContext {
 public:
  PrimaryContext() = default;
  ~PrimaryContext();
  PrimaryContext(PrimaryContext&& other) noexcept;
  PrimaryContext& operator=(PrimaryContext&& other) noexcept;
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;

  static absl::StatusOr<PrimaryContext> Retain(std::shared_ptr<const CudaDriver> driver,
                                               CUdevice device);

  const std::shared_ptr<const CudaDriver>& driver() const { return driver_; }
  CUdevice device() const { return device_; }
  CUcontext get() const { return context_; }

 private:
  void Reset();
  std::shared_ptr<const CudaDriver> driver_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

class ContextScope {
 public:
  // Pushes `context` (which must outlive the scope) on this thread.
  static absl::StatusOr<std::unique_ptr<ContextScope>> Enter(const PrimaryContext& context);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  explicit ContextScope(const CudaDriver* driver) : driver_(driver) {}
  const CudaDriver* driver_;
};

}  // namespace conveyor::client
