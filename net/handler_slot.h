// Memory for one queued Asio operation at a time, so that a hot path allocates nothing: Asio's
// own per-thread cache keeps just one block, and a connection has a read, a write and a wake-up
// outstanding. Each operation that is never outstanding twice at once gets a slot of its own
// and its handler wrapped by in_slot(). A second allocation while the slot is taken, or one
// larger than it, goes to the heap.
//
// A slot's users are ordered: Asio frees an operation's memory before it runs the handler, and
// the next operation in the same slot is started after that. A slot is not thread-safe: it
// belongs to the thread that starts (or posts) its operations and to the one that runs them,
// ordered by the io_context that hands the operation from one to the other.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace sluice::net {

class HandlerSlot {
 public:
  static constexpr std::size_t kBytes = 512;

  void* allocate(std::size_t n, std::size_t alignment) {
    if (!in_use_ && n <= kBytes && alignment <= alignof(std::max_align_t)) {
      in_use_ = true;
      return storage_;
    }
    return ::operator new(n);
  }
  void deallocate(void* p) noexcept {
    if (p == storage_) {
      in_use_ = false;
    } else {
      ::operator delete(p);
    }
  }
  bool in_use() const { return in_use_; }
  bool owns(const void* p) const { return p == storage_; }

 private:
  alignas(std::max_align_t) unsigned char storage_[kBytes];
  bool in_use_ = false;
};

// An allocator over one slot, as Asio asks a handler for (get_allocator()).
template <typename T>
class SlotAllocator {
 public:
  using value_type = T;
  explicit SlotAllocator(HandlerSlot& slot) noexcept : slot_(&slot) {}
  template <typename U>
  SlotAllocator(const SlotAllocator<U>& other) noexcept : slot_(other.slot()) {}  // NOLINT: rebind

  T* allocate(std::size_t n) { return static_cast<T*>(slot_->allocate(n * sizeof(T), alignof(T))); }
  void deallocate(T* p, std::size_t) noexcept { slot_->deallocate(p); }

  HandlerSlot* slot() const noexcept { return slot_; }
  template <typename U>
  bool operator==(const SlotAllocator<U>& other) const noexcept {
    return slot_ == other.slot();
  }
  template <typename U>
  bool operator!=(const SlotAllocator<U>& other) const noexcept {
    return slot_ != other.slot();
  }

 private:
  HandlerSlot* slot_;
};

// A completion handler whose operation memory lives in `slot`.
template <typename Handler>
class SlotHandler {
 public:
  using allocator_type = SlotAllocator<void>;
  SlotHandler(HandlerSlot& slot, Handler handler) : slot_(&slot), handler_(std::move(handler)) {}
  allocator_type get_allocator() const noexcept { return allocator_type(*slot_); }
  template <typename... Args>
  void operator()(Args&&... args) {
    handler_(std::forward<Args>(args)...);
  }

 private:
  HandlerSlot* slot_;
  Handler handler_;
};

template <typename Handler>
SlotHandler<std::decay_t<Handler>> in_slot(HandlerSlot& slot, Handler&& handler) {
  return SlotHandler<std::decay_t<Handler>>(slot, std::forward<Handler>(handler));
}

}  // namespace sluice::net
