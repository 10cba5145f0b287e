// UniqueHandle<Traits>: sole owner of one handle of a C API (a CUDA stream,
// event, VMM allocation handle, reserved address range, mapping, host
// registration: core/gpu/cuda_handles.h), released by Traits::Close on
// destruction. Movable, not copyable; like UniqueFd for fds.
//
// Traits provide:
//   using Handle = ...;                 a small value type
//   static Handle Null();               the empty handle
//   static bool IsNull(const Handle&);
//   static void Close(const Handle&);   releases a non-null handle
//
// Thread-safety: like any value, one owner at a time.
#pragma once

#include <utility>

namespace conveyor::gpu {

template <typename Traits>
class UniqueHandle {
 public:
  using Handle = typename Traits::Handle;

  UniqueHandle() = default;
  explicit UniqueHandle(Handle h) : h_(h) {}
  ~UniqueHandle() { Reset(); }
  UniqueHandle(UniqueHandle&& other) noexcept : h_(other.Release()) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  const Handle& get() const { return h_; }
  bool valid() const { return !Traits::IsNull(h_); }
  explicit operator bool() const { return valid(); }

  // Gives up ownership without closing.
  Handle Release() { return std::exchange(h_, Traits::Null()); }
  void Reset(Handle h = Traits::Null()) {
    if (!Traits::IsNull(h_)) Traits::Close(h_);
    h_ = h;
  }

 private:
  Handle h_ = Traits::Null();
};

}  // namespace conveyor::gpu
