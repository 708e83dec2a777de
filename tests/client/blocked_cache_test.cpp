// The blocked-key cache on its own (client/blocked_cache.h): what is blocked stays blocked
// exactly until its time, per key and rule, within a fixed capacity where the oldest goes.
#include "client/blocked_cache.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <thread>
#include <unordered_set>

namespace sluice::client::detail {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

Rule per_second(std::uint32_t limit) { return Rule{Algorithm::kFixedWindow, limit, 1000, 0}; }

std::uint64_t fp(const std::string& key, const Rule& rule) {
  return blocked_fingerprint(hash_key(key), rule);
}

TEST_CASE("a blocked key counts down to its time and is free at it, not a nanosecond later",
          "[blocked-cache]") {
  BlockedCache cache(1024);
  const std::uint64_t f = fp("user:1", per_second(5));
  const std::uint64_t t0 = 1'000 * kMs;
  CHECK(cache.blocked_for(f, t0) == 0);
  cache.block(f, t0 + 300 * kMs, t0);
  CHECK(cache.size() == 1);
  CHECK(cache.blocked_for(f, t0) == 300 * kMs);
  CHECK(cache.blocked_for(f, t0 + 100 * kMs) == 200 * kMs);
  CHECK(cache.blocked_for(f, t0 + 300 * kMs - 1) == 1);
  CHECK(cache.blocked_for(f, t0 + 300 * kMs) == 0);
  CHECK(cache.size() == 1);  // expired: held until it is replaced (lookups write nothing)
  // A time already past blocks nothing, and changes nothing.
  cache.block(f, t0 + 350 * kMs, t0 + 400 * kMs);
  CHECK(cache.blocked_for(f, t0 + 400 * kMs) == 0);
  CHECK(cache.size() == 1);
  cache.unblock(f);
  CHECK(cache.size() == 0);
}

TEST_CASE("a key denied for a cost blocks requests of that cost or more, not cheaper ones",
          "[blocked-cache]") {
  BlockedCache cache(1024);
  const std::uint64_t f = fp("user:1", per_second(5));
  cache.block(f, 40 * kMs, 0, 0, 3);
  CHECK(cache.blocked_for(f, 0, 1) == 0);
  CHECK(cache.blocked_for(f, 0, 2) == 0);
  CHECK(cache.blocked_for(f, 0, 3) == 40 * kMs);
  CHECK(cache.blocked_for(f, 10 * kMs, 4) == 30 * kMs);
  CHECK(cache.size() == 1);  // a cheaper request leaves the entry where it is
}

TEST_CASE("unblock_key forgets every rule of one key and nothing of the others",
          "[blocked-cache]") {
  BlockedCache cache(1024);
  const Rule five = per_second(5);
  const Rule six = per_second(6);
  const std::uint64_t one = blocked_key_tag(hash_key("user:1"));
  const std::uint64_t two = blocked_key_tag(hash_key("user:2"));
  REQUIRE(one != two);
  cache.block(fp("user:1", five), 50 * kMs, 0, one);
  cache.block(fp("user:1", six), 50 * kMs, 0, one);
  cache.block(fp("user:2", five), 50 * kMs, 0, two);
  REQUIRE(cache.size() == 3);
  cache.unblock_key(one);
  CHECK(cache.size() == 1);
  CHECK(cache.blocked_for(fp("user:1", five), 0) == 0);
  CHECK(cache.blocked_for(fp("user:1", six), 0) == 0);
  CHECK(cache.blocked_for(fp("user:2", five), 0) == 50 * kMs);
}

TEST_CASE("the cache is per key and per rule", "[blocked-cache]") {
  BlockedCache cache(1024);
  const Rule five = per_second(5);
  const Rule six = per_second(6);
  Rule five_per_minute = five;
  five_per_minute.period_ms = 60'000;
  Rule five_bucket = five;
  five_bucket.algorithm = Algorithm::kTokenBucket;
  Rule five_burst = five_bucket;
  five_burst.burst = 10;
  cache.block(fp("user:1", five), 50 * kMs, 0);
  CHECK(cache.blocked_for(fp("user:1", five), 0) == 50 * kMs);
  CHECK(cache.blocked_for(fp("user:2", five), 0) == 0);
  CHECK(cache.blocked_for(fp("user:1", six), 0) == 0);
  CHECK(cache.blocked_for(fp("user:1", five_per_minute), 0) == 0);
  CHECK(cache.blocked_for(fp("user:1", five_bucket), 0) == 0);
  CHECK(cache.blocked_for(fp("user:1", five_burst), 0) == 0);
  cache.unblock(fp("user:1", five));
  CHECK(cache.blocked_for(fp("user:1", five), 0) == 0);
  CHECK(cache.size() == 0);
}

TEST_CASE("blocking a key again replaces its time, even with an earlier one", "[blocked-cache]") {
  BlockedCache cache(16);
  const std::uint64_t f = fp("k", per_second(1));
  cache.block(f, 500 * kMs, 0);
  cache.block(f, 900 * kMs, 10 * kMs);
  CHECK(cache.blocked_for(f, 10 * kMs) == 890 * kMs);
  cache.block(f, 20 * kMs, 10 * kMs);
  CHECK(cache.blocked_for(f, 10 * kMs) == 10 * kMs);
  CHECK(cache.size() == 1);
}

TEST_CASE("a full cache keeps its size and gives up the oldest entries for new ones",
          "[blocked-cache]") {
  BlockedCache cache(4096);
  REQUIRE(cache.capacity() >= 4096);
  REQUIRE(cache.capacity() <= 2 * 4096 + BlockedCache::kWays * BlockedCache::kShards);
  const Rule rule = per_second(1);
  const std::uint64_t far = 1'000'000 * kMs;  // nothing expires during the test
  const int total = static_cast<int>(cache.capacity()) * 10;
  for (int i = 0; i < total; ++i) {
    cache.block(fp("key:" + std::to_string(i), rule), far, static_cast<std::uint64_t>(i));
  }
  CHECK(cache.size() <= cache.capacity());
  CHECK(cache.size() + cache.evicted() == static_cast<std::uint64_t>(total));
  // The last bucket's worth of keys of every bucket is what stays: the newest keys are all
  // there, and the oldest are all gone.
  int newest_kept = 0;
  int oldest_kept = 0;
  const int sample = 200;
  for (int i = 0; i < sample; ++i) {
    newest_kept += cache.blocked_for(fp("key:" + std::to_string(total - 1 - i), rule), 0) > 0;
    oldest_kept += cache.blocked_for(fp("key:" + std::to_string(i), rule), 0) > 0;
  }
  CHECK(newest_kept == sample);
  CHECK(oldest_kept == 0);
}

TEST_CASE("expired entries make room before any live one is evicted", "[blocked-cache]") {
  BlockedCache cache(4096);  // 1,024 buckets: 200 new keys put at most 4 in any one
  const Rule rule = per_second(1);
  const std::uint64_t capacity = cache.capacity();
  // Fill everything with entries that expire at 10 ms.
  for (int i = 0; cache.size() < capacity && i < 1'000'000; ++i) {
    cache.block(fp("old:" + std::to_string(i), rule), 10 * kMs, 0);
  }
  REQUIRE(cache.size() == capacity);
  const std::uint64_t evicted_before = cache.evicted();
  // After they expire, new keys take their places without evicting (each bucket is full of
  // expired entries only).
  for (int i = 0; i < 200; ++i)
    cache.block(fp("new:" + std::to_string(i), rule), 50 * kMs, 20 * kMs);
  CHECK(cache.evicted() == evicted_before);
  CHECK(cache.size() <= capacity);
}

TEST_CASE("a cache of capacity 0 keeps nothing", "[blocked-cache]") {
  BlockedCache cache(0);
  const std::uint64_t f = fp("k", per_second(1));
  cache.block(f, 100 * kMs, 0);
  CHECK(cache.blocked_for(f, 0) == 0);
  CHECK(cache.size() == 0);
  CHECK(cache.capacity() == 0);
}

TEST_CASE("fingerprints are never 0 and differ for keys and rules that differ", "[blocked-cache]") {
  std::unordered_set<std::uint64_t> seen;
  int zeros = 0;
  for (int i = 0; i < 10'000; ++i) {
    for (std::uint32_t limit = 1; limit <= 3; ++limit) {
      const std::uint64_t f = fp("key:" + std::to_string(i), per_second(limit));
      zeros += f == 0;
      seen.insert(f);
    }
  }
  CHECK(zeros == 0);
  CHECK(seen.size() == 30'000);
}

TEST_CASE("a lookup during writes to its bucket sees an entry whole or not at all",
          "[blocked-cache]") {
  // The smallest cache: one bucket per shard, so keys of one shard share a bucket. A writer
  // keeps replacing the entries of that bucket; readers must never see one key's time under
  // another key's name.
  BlockedCache cache(1);
  const Rule rule = per_second(1);
  std::vector<std::uint64_t> same;
  const std::uint64_t shard = fp("seed", rule) >> 58;
  for (int i = 0; same.size() < 2 * BlockedCache::kWays && i < 100'000; ++i) {
    const std::uint64_t f = fp("key:" + std::to_string(i), rule);
    if ((f >> 58) == shard) same.push_back(f);
  }
  REQUIRE(same.size() == 2 * BlockedCache::kWays);
  // Key j is always blocked until kFar + j: a torn read would show another key's time. Each
  // block is at a later `now`, so the bucket's oldest entry goes each time (all four ways turn).
  constexpr std::uint64_t kFar = std::uint64_t{1} << 40;
  const auto until = [](std::size_t j) { return kFar + j; };
  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
  std::thread writer([&] {
    for (std::uint64_t round = 0; !stop.load(std::memory_order_relaxed) && round < 2'000'000;
         ++round) {
      const std::size_t j = round % same.size();
      cache.block(same[j], until(j), round + 1);
      started.store(true, std::memory_order_relaxed);
    }
  });
  // The reads overlap the writes: they start once the writer has written (a reader that ran
  // before the writer's thread was scheduled saw nothing at all; bounded all the same).
  for (int spin = 0; !started.load(std::memory_order_relaxed) && spin < 100'000'000; ++spin) {
  }
  std::uint64_t seen = 0;
  std::uint64_t wrong = 0;
  for (int i = 0; i < 400'000; ++i) {
    const std::size_t j = static_cast<std::size_t>(i) % same.size();
    const std::uint64_t left = cache.blocked_for(same[j], 0);
    if (left != 0) ++seen;
    if (left != 0 && left != until(j)) ++wrong;
  }
  stop.store(true);
  writer.join();
  CHECK(wrong == 0);
  CHECK(seen > 0);
}

}  // namespace
}  // namespace sluice::client::detail
