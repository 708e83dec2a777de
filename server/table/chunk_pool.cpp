#include "server/table/chunk_pool.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace sluice::server {
namespace {

// Zeroed memory of `bytes` aligned to `align` (a power of two, at least a page), or nullptr.
char* map_aligned(std::size_t bytes, std::size_t align, bool huge) {
#ifdef __linux__
  // Over-map by the alignment and cut off both ends.
  const std::size_t span = bytes + align;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t aligned = (start + align - 1) & ~(std::uintptr_t{align} - 1);
  if (aligned > start) munmap(p, aligned - start);
  const std::uintptr_t tail = aligned + bytes;
  if (start + span > tail) munmap(reinterpret_cast<void*>(tail), start + span - tail);
  auto* block = reinterpret_cast<char*>(aligned);
  // Advice only: where THP is off, or memory is fragmented, the block has 4 KiB pages.
  if (huge) madvise(block, bytes, MADV_HUGEPAGE);
  return block;
#else
  (void)huge;
  void* p = std::aligned_alloc(align, bytes);
  if (p != nullptr) std::memset(p, 0, bytes);
  return static_cast<char*>(p);
#endif
}

void unmap_block(char* block, std::size_t bytes) {
#ifdef __linux__
  munmap(block, bytes);
#else
  (void)bytes;
  std::free(block);
#endif
}

}  // namespace

ChunkPool::ChunkPool(bool huge_pages) : huge_(huge_pages) {}

ChunkPool::~ChunkPool() {
  for (char* block : blocks_) unmap_block(block, block_chunks() * kChunkBytes);
}

bool ChunkPool::map_block() {
  const std::size_t bytes = block_chunks() * kChunkBytes;
  // Room for the block's entry first, so that a mapped block is never lost to a failed
  // push_back; like a refused mapping, a refused entry is a nullptr from take().
  if (blocks_.size() == blocks_.capacity()) {
    try {
      blocks_.reserve(2 * blocks_.size() + 8);
    } catch (const std::bad_alloc&) {
      return false;
    }
  }
  char* block = map_aligned(bytes, huge_ ? kHugeBlockBytes : kChunkBytes, huge_);
  if (block == nullptr) return false;
  blocks_.push_back(block);
  next_ = block;
  end_ = block + bytes;
  return true;
}

void* ChunkPool::take() {
  if (free_ != nullptr) {
    void* chunk = free_;
    std::memcpy(&free_, chunk, sizeof(void*));
    std::memset(chunk, 0, kChunkBytes);
    --free_count_;
    ++in_use_;
    return chunk;
  }
  if (next_ == end_ && !map_block()) return nullptr;
  void* chunk = next_;  // never handed out: still zero from the mapping
  next_ += kChunkBytes;
  ++carved_;
  ++in_use_;
  return chunk;
}

void ChunkPool::give(void* chunk) {
  std::memcpy(chunk, &free_, sizeof(void*));
  free_ = chunk;
  ++free_count_;
  --in_use_;
}

std::size_t ChunkPool::bytes() const {
  return huge_ ? blocks_.size() * kHugeBlockBytes : carved_ * kChunkBytes;
}

std::size_t ChunkPool::cost(std::size_t n) const {
  if (!huge_) return n > free_count_ ? (n - free_count_) * kChunkBytes : 0;
  const std::size_t have = ready();
  if (n <= have) return 0;
  const std::size_t per_block = block_chunks();
  return (n - have + per_block - 1) / per_block * kHugeBlockBytes;
}

std::size_t ChunkPool::affordable(std::size_t room) const {
  if (!huge_) return free_count_ + room / kChunkBytes;
  return ready() + room / kHugeBlockBytes * block_chunks();
}

}  // namespace sluice::server
