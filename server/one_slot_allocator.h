// An allocator for an Asio handler of which at most one is outstanding at a time: its operation
// lives in a fixed slot the owner keeps, so posting it never reaches the heap. A second
// allocation while the slot is taken, or one larger than the slot, falls back to operator new.
#pragma once

#include <cstddef>
#include <new>

namespace sluice::server {

struct HandlerSlot {
  alignas(std::max_align_t) std::byte bytes[256];
  bool taken = false;
};

template <typename T>
class OneSlotAllocator {
 public:
  using value_type = T;

  explicit OneSlotAllocator(HandlerSlot& slot) noexcept : slot_(&slot) {}
  template <typename U>
  OneSlotAllocator(const OneSlotAllocator<U>& other) noexcept : slot_(other.slot()) {}

  T* allocate(std::size_t n) {
    if (!slot_->taken && n * sizeof(T) <= sizeof(slot_->bytes) &&
        alignof(T) <= alignof(std::max_align_t)) {
      slot_->taken = true;
      return reinterpret_cast<T*>(slot_->bytes);
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept {
    if (reinterpret_cast<std::byte*>(p) == slot_->bytes) {
      slot_->taken = false;
    } else {
      ::operator delete(p);
    }
  }

  HandlerSlot* slot() const noexcept { return slot_; }
  template <typename U>
  bool operator==(const OneSlotAllocator<U>& other) const noexcept {
    return slot_ == other.slot();
  }

 private:
  HandlerSlot* slot_;
};

}  // namespace sluice::server
