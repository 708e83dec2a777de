// Storage for sliding-log rings: power-of-two size classes carved from big chunks, with one
// free list per class. Chunks are allocated rarely and kept until the arena is destroyed, so a
// steady state of sliding-log keys allocates nothing. Owned by one shard thread: no locks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::server {

class LogArena {
 public:
  // A ring of class c holds 8 << c timestamps (64 << c bytes).
  static constexpr std::uint32_t kClasses = 24;
  static constexpr std::uint32_t kMaxRingEntries = 8u << (kClasses - 1);

  static constexpr std::uint32_t ring_entries(std::uint32_t ring_class) { return 8u << ring_class; }
  static constexpr std::size_t ring_bytes(std::uint32_t ring_class) {
    return std::size_t{64} << ring_class;
  }
  // The smallest class holding `entries` timestamps. REQUIRES: entries <= kMaxRingEntries.
  static std::uint32_t class_for(std::uint32_t entries);

  // `chunk_bytes` (a power of two >= 64) is the usual chunk size; a ring larger than that gets
  // a chunk of its own size.
  explicit LogArena(std::size_t chunk_bytes);
  LogArena(const LogArena&) = delete;
  LogArena& operator=(const LogArena&) = delete;

  // A ring of the class, or nullptr when none is free and a new chunk would take more than
  // `max_new_bytes`. Reuses a free ring of the class, else the current chunk's unused tail,
  // else splits a larger free ring, and only then allocates a chunk.
  std::uint64_t* allocate(std::uint32_t ring_class, std::size_t max_new_bytes);

  // Returns a ring to its class's free list. REQUIRES: it came from allocate(ring_class, ...).
  void release(std::uint64_t* ring, std::uint32_t ring_class);

  // Bytes of all chunks: what the arena holds from the system, used or free.
  std::size_t bytes() const { return bytes_; }
  // Bytes in rings currently handed out.
  std::size_t used_bytes() const { return used_bytes_; }
  std::size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  void push_free(std::uint64_t* ring, std::uint32_t ring_class);
  std::uint64_t* pop_free(std::uint32_t ring_class);
  // Cuts the rest of the current chunk into free rings, largest first, before starting another.
  void retire_tail();

  std::size_t chunk_bytes_;
  std::size_t bytes_ = 0;
  std::size_t used_bytes_ = 0;
  std::vector<std::unique_ptr<std::uint64_t[]>> chunks_;
  std::uint64_t* tail_ = nullptr;  // unused part of the newest chunk: [tail_, tail_end_)
  std::uint64_t* tail_end_ = nullptr;
  // Free rings form a singly linked list through their first word.
  std::array<std::uint64_t*, kClasses> free_{};
};

}  // namespace sluice::server
