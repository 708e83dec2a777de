#include "server/table/chunk_pool.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

using sluice::server::ChunkPool;

namespace {

constexpr std::size_t kChunk = ChunkPool::kChunkBytes;
constexpr std::size_t kBlock = ChunkPool::kHugeBlockBytes;
constexpr std::size_t kPerBlock = kBlock / kChunk;

bool all_zero(const void* chunk) {
  const auto* bytes = static_cast<const unsigned char*>(chunk);
  return std::all_of(bytes, bytes + kChunk, [](unsigned char b) { return b == 0; });
}

}  // namespace

TEST_CASE("chunks are zeroed, aligned, distinct, and reused after being given back") {
  for (const bool huge : {false, true}) {
    INFO("huge pages: " << huge);
    ChunkPool pool(huge);
    std::vector<void*> taken;
    for (int i = 0; i < 40; ++i) {
      void* chunk = pool.take();
      REQUIRE(chunk != nullptr);
      CHECK(reinterpret_cast<std::uintptr_t>(chunk) % kChunk == 0);
      CHECK(all_zero(chunk));
      std::memset(chunk, 0xab, kChunk);
      taken.push_back(chunk);
    }
    std::vector<void*> sorted = taken;
    std::sort(sorted.begin(), sorted.end());
    CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
    CHECK(pool.chunks_in_use() == 40);

    const std::size_t bytes = pool.bytes();
    pool.give(taken[3]);
    pool.give(taken[7]);
    CHECK(pool.chunks_in_use() == 38);
    CHECK(pool.bytes() == bytes);  // kept for reuse, still held
    // The last one given back comes out first, written over before and zeroed again.
    void* again = pool.take();
    CHECK(again == taken[7]);
    CHECK(all_zero(again));
    CHECK(pool.take() == taken[3]);
    CHECK(pool.bytes() == bytes);
  }
}

TEST_CASE("without huge pages the pool counts the chunks it has handed out") {
  ChunkPool pool(false);
  CHECK_FALSE(pool.huge_pages());
  CHECK(pool.bytes() == 0);
  CHECK(pool.cost(3) == 3 * kChunk);
  CHECK(pool.affordable(3 * kChunk + kChunk - 1) == 3);
  void* a = pool.take();
  void* b = pool.take();
  CHECK(pool.bytes() == 2 * kChunk);
  pool.give(a);
  pool.give(b);
  // Two free chunks cost nothing; the third is a new one.
  CHECK(pool.cost(2) == 0);
  CHECK(pool.cost(3) == kChunk);
  CHECK(pool.affordable(0) == 2);
  CHECK(pool.affordable(kChunk) == 3);
}

TEST_CASE("with huge pages the pool counts whole 2 MiB blocks, aligned to 2 MiB") {
  ChunkPool pool(true);
  CHECK(pool.huge_pages());
  CHECK(pool.bytes() == 0);
  CHECK(pool.cost(1) == kBlock);
  CHECK(pool.cost(kPerBlock + 1) == 2 * kBlock);
  CHECK(pool.affordable(kBlock - 1) == 0);
  CHECK(pool.affordable(kBlock) == kPerBlock);

  void* first = pool.take();
  REQUIRE(first != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(first) % kBlock == 0);
  CHECK(pool.bytes() == kBlock);
  // The rest of the block is ready: taking it costs nothing more.
  CHECK(pool.cost(kPerBlock - 1) == 0);
  CHECK(pool.cost(kPerBlock) == kBlock);
  CHECK(pool.affordable(0) == kPerBlock - 1);
  for (std::size_t i = 1; i < kPerBlock; ++i) REQUIRE(pool.take() != nullptr);
  CHECK(pool.bytes() == kBlock);
  void* next = pool.take();  // a second block
  CHECK(reinterpret_cast<std::uintptr_t>(next) % kBlock == 0);
  CHECK(pool.bytes() == 2 * kBlock);
  CHECK(pool.chunks_in_use() == kPerBlock + 1);
}
