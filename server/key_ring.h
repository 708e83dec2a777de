// A FIFO of key fingerprints that holds at most bound() of them: push_back() at the bound drops
// the oldest, in O(1) (a ring over a power-of-two buffer, not a vector erased at its front).
// The buffer grows by doubling as the queue does, up to the bound, and never shrinks: once it
// has held as many keys, pushing and popping allocate nothing. One thread.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <vector>

#include "core/key_hash.h"

namespace sluice::server {

class KeyRing {
 public:
  // REQUIRES: bound >= 1.
  explicit KeyRing(std::size_t bound) : bound_(bound) {}

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::size_t bound() const { return bound_; }
  // Keys the buffer has room for without allocating.
  std::size_t capacity() const { return slots_.size(); }

  // The i-th oldest key. REQUIRES: i < size().
  const KeyHash& operator[](std::size_t i) const { return slots_[(head_ + i) & mask_]; }
  const KeyHash& front() const { return slots_[head_]; }

  // Appends `hash`; at the bound the oldest key goes first. Returns true when one went.
  bool push_back(const KeyHash& hash) {
    bool dropped = false;
    if (size_ == bound_) {
      pop_front();
      dropped = true;
    } else if (size_ == slots_.size()) {
      grow();
    }
    slots_[(head_ + size_) & mask_] = hash;
    ++size_;
    return dropped;
  }
  // REQUIRES: !empty().
  void pop_front() {
    head_ = (head_ + 1) & mask_;
    --size_;
  }
  void clear() {
    head_ = 0;
    size_ = 0;
  }

 private:
  void grow() {
    const std::size_t wanted = std::max<std::size_t>(16, std::bit_ceil(slots_.size() * 2));
    std::vector<KeyHash> larger(std::min(wanted, std::bit_ceil(bound_)));
    for (std::size_t i = 0; i < size_; ++i) larger[i] = (*this)[i];
    slots_.swap(larger);
    head_ = 0;
    mask_ = slots_.size() - 1;
  }

  std::size_t bound_;
  std::vector<KeyHash> slots_;  // a power of two long (or empty)
  std::size_t mask_ = 0;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace sluice::server
