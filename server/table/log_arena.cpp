#include "server/table/log_arena.h"

#include <bit>
#include <cstring>
#include <new>

namespace sluice::server {

std::uint32_t LogArena::class_for(std::uint32_t entries) {
  if (entries <= 8) return 0;
  // ceil(log2(entries)) - 3
  return static_cast<std::uint32_t>(std::bit_width(entries - 1)) - 3;
}

LogArena::LogArena(std::size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}

void LogArena::push_free(std::uint64_t* ring, std::uint32_t ring_class) {
  ring[0] = reinterpret_cast<std::uintptr_t>(free_[ring_class]);
  free_[ring_class] = ring;
}

std::uint64_t* LogArena::pop_free(std::uint32_t ring_class) {
  std::uint64_t* ring = free_[ring_class];
  if (ring != nullptr) free_[ring_class] = reinterpret_cast<std::uint64_t*>(ring[0]);
  return ring;
}

void LogArena::retire_tail() {
  // Every chunk and ring is a multiple of 64 bytes, so the tail splits exactly.
  for (std::uint32_t c = kClasses; c-- > 0;) {
    const std::size_t words = ring_entries(c);
    while (static_cast<std::size_t>(tail_end_ - tail_) >= words) {
      push_free(tail_, c);
      tail_ += words;
    }
  }
  tail_ = tail_end_ = nullptr;
}

std::uint64_t* LogArena::allocate(std::uint32_t ring_class, std::size_t max_new_bytes) {
  const std::size_t words = ring_entries(ring_class);
  std::uint64_t* ring = pop_free(ring_class);
  if (ring == nullptr && static_cast<std::size_t>(tail_end_ - tail_) >= words) {
    ring = tail_;
    tail_ += words;
  }
  if (ring == nullptr) {
    // Split the smallest larger free ring: keep the front, free the halves behind it.
    for (std::uint32_t c = ring_class + 1; c < kClasses && ring == nullptr; ++c) {
      ring = pop_free(c);
      if (ring == nullptr) continue;
      for (std::uint32_t k = c; k-- > ring_class;) push_free(ring + ring_entries(k), k);
    }
  }
  if (ring == nullptr) {
    const std::size_t need = ring_bytes(ring_class);
    std::size_t size = need > chunk_bytes_ ? need : chunk_bytes_;
    if (size > max_new_bytes) size = need;
    if (size > max_new_bytes) return nullptr;
    std::unique_ptr<std::uint64_t[]> chunk(new (std::nothrow) std::uint64_t[size / 8]);
    if (!chunk) return nullptr;
    retire_tail();
    ring = chunk.get();
    tail_ = ring + words;
    tail_end_ = ring + size / 8;
    chunks_.push_back(std::move(chunk));
    bytes_ += size;
  }
  used_bytes_ += ring_bytes(ring_class);
  return ring;
}

void LogArena::release(std::uint64_t* ring, std::uint32_t ring_class) {
  used_bytes_ -= ring_bytes(ring_class);
  push_free(ring, ring_class);
}

}  // namespace sluice::server
