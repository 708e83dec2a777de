#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/key_hash.h"

namespace sluice {
namespace {

TEST_CASE("hash_key is XXH3-128 with seed 0, low half first", "[key_hash]") {
  // Reference value of XXH3_128bits("") from the xxHash test vectors.
  const KeyHash empty = hash_key("");
  CHECK(empty.hi == 0x99aa06d3014798d8ull);
  CHECK(empty.lo == 0x6001c324468d497full);
}

TEST_CASE("hash_key is deterministic and depends on every byte", "[key_hash]") {
  CHECK(hash_key("user:42") == hash_key(std::string("user:") + "42"));
  CHECK_FALSE(hash_key("user:42") == hash_key("user:43"));
  CHECK_FALSE(hash_key("user:42") == hash_key("user:42 "));
  const std::string with_nul("a\0b", 3);
  CHECK_FALSE(hash_key(with_nul) == hash_key("a"));
}

void check_even_spread(std::uint32_t shards, double tolerance) {
  constexpr int kKeys = 100'000;
  std::vector<int> counts(shards);
  for (int i = 0; i < kKeys; ++i) {
    const std::uint32_t shard = shard_for(hash_key("key:" + std::to_string(i)), shards);
    REQUIRE(shard < shards);
    ++counts[shard];
  }
  const double expected = static_cast<double>(kKeys) / shards;
  for (std::uint32_t s = 0; s < shards; ++s) {
    INFO("shard " << s << " of " << shards << ": " << counts[s] << " keys");
    CHECK(counts[s] > expected * (1 - tolerance));
    CHECK(counts[s] < expected * (1 + tolerance));
  }
}

TEST_CASE("shard_for spreads 100k keys evenly", "[key_hash]") {
  check_even_spread(2, 0.02);
  check_even_spread(8, 0.05);
  CHECK(shard_for(hash_key("anything"), 1) == 0);
}

TEST_CASE("shard_for and slot_for stay in range at the extremes", "[key_hash]") {
  const KeyHash max{.lo = ~0ull, .hi = ~0ull};
  CHECK(shard_for(max, 8) == 7);
  CHECK(slot_for(max, 1024) == 1023);
  CHECK(shard_for(KeyHash{}, 8) == 0);
  CHECK(slot_for(KeyHash{}, 1024) == 0);
}

}  // namespace
}  // namespace sluice
