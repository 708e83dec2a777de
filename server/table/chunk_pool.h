// Fixed-size, zeroed chunks of memory for the counter table's segments (docs/ARCHITECTURE.md,
// "Counter table"). A segment is a list of chunks, so memory can come from blocks of any size:
// with huge pages, 2 MiB blocks aligned to 2 MiB and advised for transparent huge pages, so that
// a random lookup in a large table finds its page in the TLB. Chunks given back are kept on a
// free list and reused; blocks return to the system only with the pool. Owned by one shard
// thread: no locks.
#pragma once

#include <cstddef>
#include <vector>

namespace sluice::server {

class ChunkPool {
 public:
  static constexpr std::size_t kChunkBytes = 4096;
  static constexpr std::size_t kHugeBlockBytes = std::size_t{2} << 20;
  // Without huge pages, blocks of this many chunks are mapped ahead; their untouched pages hold
  // no memory, so only chunks handed out count.
  static constexpr std::size_t kSmallBlockChunks = 16;

  explicit ChunkPool(bool huge_pages);
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;
  ~ChunkPool();

  // A zeroed chunk of kChunkBytes, aligned to kChunkBytes, or nullptr when the system refuses
  // memory. Callers check cost() against their cap first.
  void* take();
  // Returns a chunk that take() handed out; a later take() reuses it.
  void give(void* chunk);

  // The bytes the pool holds against the table's cap. With huge pages, whole blocks: the
  // kernel backs a huge page as a whole. Without, chunks handed out or on the free list.
  std::size_t bytes() const;
  // How much bytes() grows if `n` more chunks are taken now.
  std::size_t cost(std::size_t n) const;
  // The most chunks that can be taken now with cost() at most `room` bytes.
  std::size_t affordable(std::size_t room) const;

  std::size_t chunks_in_use() const { return in_use_; }
  bool huge_pages() const { return huge_; }

 private:
  std::size_t block_chunks() const {
    return huge_ ? kHugeBlockBytes / kChunkBytes : kSmallBlockChunks;
  }
  // Chunks that take() can hand out without mapping a block: free ones and the newest block's
  // uncarved tail.
  std::size_t ready() const {
    return free_count_ + static_cast<std::size_t>(end_ - next_) / kChunkBytes;
  }
  bool map_block();

  bool huge_;
  std::vector<char*> blocks_;  // each block_chunks() * kChunkBytes bytes
  char* next_ = nullptr;       // the newest block's uncarved tail: [next_, end_)
  char* end_ = nullptr;
  void* free_ = nullptr;  // free chunks, linked through their first word
  std::size_t free_count_ = 0;
  std::size_t carved_ = 0;  // chunks ever handed out from blocks
  std::size_t in_use_ = 0;
};

}  // namespace sluice::server
