#include "server/table/log_arena.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <set>

using sluice::server::LogArena;

namespace {
constexpr std::size_t kUnlimited = ~std::size_t{0};
}

TEST_CASE("a ring class is the smallest power of two of at least 8 entries that fits") {
  CHECK(LogArena::class_for(0) == 0);
  CHECK(LogArena::class_for(1) == 0);
  CHECK(LogArena::class_for(8) == 0);
  CHECK(LogArena::class_for(9) == 1);
  CHECK(LogArena::class_for(16) == 1);
  CHECK(LogArena::class_for(17) == 2);
  CHECK(LogArena::class_for(10'000) == 11);  // 16384 entries
  CHECK(LogArena::ring_entries(LogArena::class_for(LogArena::kMaxRingEntries)) ==
        LogArena::kMaxRingEntries);
}

TEST_CASE("rings are carved from one chunk and the chunk is counted once") {
  LogArena arena(4096);
  std::set<std::uint64_t*> rings;
  for (int i = 0; i < 64; ++i) rings.insert(arena.allocate(0, kUnlimited));  // 64 x 64 bytes
  CHECK(rings.size() == 64);
  CHECK(rings.count(nullptr) == 0);
  CHECK(arena.bytes() == 4096);
  CHECK(arena.used_bytes() == 4096);
  REQUIRE(arena.allocate(0, kUnlimited) != nullptr);
  CHECK(arena.bytes() == 8192);
}

TEST_CASE("a released ring is handed out again before any new memory") {
  LogArena arena(4096);
  std::uint64_t* a = arena.allocate(2, kUnlimited);
  arena.release(a, 2);
  CHECK(arena.used_bytes() == 0);
  CHECK(arena.allocate(2, kUnlimited) == a);
  CHECK(arena.bytes() == 4096);
}

TEST_CASE("a small ring is split from a larger free one when no new chunk is allowed") {
  LogArena arena(4096);
  std::uint64_t* big = arena.allocate(6, kUnlimited);  // the whole 4 KiB chunk
  REQUIRE(big != nullptr);
  arena.release(big, 6);
  std::set<std::uint64_t*> small;
  for (int i = 0; i < 64; ++i) small.insert(arena.allocate(0, 0));
  CHECK(small.size() == 64);
  CHECK(small.count(nullptr) == 0);
  for (std::uint64_t* r : small) CHECK((r >= big && r < big + 512));
  CHECK(arena.allocate(0, 0) == nullptr);
  CHECK(arena.bytes() == 4096);
}

TEST_CASE("a ring larger than a chunk gets a chunk of its own size") {
  LogArena arena(4096);
  REQUIRE(arena.allocate(10, kUnlimited) != nullptr);  // 64 KiB
  CHECK(arena.bytes() == (64u << 10));
}

TEST_CASE("the arena allocates no chunk beyond the bytes it is allowed") {
  LogArena arena(4096);
  CHECK(arena.allocate(0, 63) == nullptr);
  CHECK(arena.bytes() == 0);
  // A ring smaller than a chunk still fits when only its own size is allowed.
  CHECK(arena.allocate(0, 64) != nullptr);
  CHECK(arena.bytes() == 64);
}

TEST_CASE("the unused tail of a chunk becomes free rings when a new chunk starts") {
  LogArena arena(4096);
  REQUIRE(arena.allocate(0, kUnlimited) != nullptr);  // 64 of 4096 bytes used
  REQUIRE(arena.allocate(6, kUnlimited) != nullptr);  // does not fit the tail: new chunk
  CHECK(arena.bytes() == 8192);
  // The first chunk's 4032 free bytes serve these without another chunk.
  for (std::uint32_t c = 0; c < 6; ++c) CHECK(arena.allocate(c, 0) != nullptr);
  CHECK(arena.bytes() == 8192);
}
