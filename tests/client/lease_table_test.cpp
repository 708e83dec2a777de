// The client's lease table on its own (client/lease_table.h): how many units a rule leases, when
// a key is hot, taking units (never more than a lease holds, from any number of threads), and
// ending leases with their unspent units.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "client/blocked_cache.h"
#include "client/lease_table.h"
#include "core/key_hash.h"

namespace sluice::client::detail {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kT0 = 1'000'000 * kMs;

const LeasePolicy kPolicy{100 * kMs, 16, 4};  // 100 ms, hot at 16 requests, 4 gateways

Rule fixed(std::uint32_t limit) { return Rule{Algorithm::kFixedWindow, limit, 1000, 0}; }

std::uint64_t fp(const std::string& key, const Rule& rule) {
  return blocked_fingerprint(hash_key(key), rule);
}

std::vector<EndedLease> ended;  // the test thread's
const int kOwner = 0;           // the granting node's identity
void collect(const EndedLease& e) { ended.push_back(e); }

// Makes `key` hot and installs a lease of `units` until `until`.
void lease(LeaseTable& table, const std::string& key, const Rule& rule, std::uint32_t units,
           std::uint64_t until, std::uint64_t now = kT0) {
  std::uint32_t asked = 0;
  for (int i = 0; i < 16; ++i)
    asked = table.want(fp(key, rule), key, rule, now, now + kMs, kPolicy);
  REQUIRE(asked > 0);
  REQUIRE(
      table.install(fp(key, rule), key, rule, units, 7, until, 100, until, now, &kOwner, collect));
}

// `count` threads that, once `go` is set, each try `tries` times to take one unit of the lease
// of `f`, and add what they took to `taken`.
std::vector<std::thread> takers(LeaseTable& table, std::uint64_t f, int count, int tries,
                                const std::atomic<bool>& go, std::atomic<std::uint64_t>& taken) {
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t) {
    threads.emplace_back([&table, f, tries, &go, &taken] {
      while (!go.load()) {
      }
      LeaseTake take;
      std::uint64_t mine = 0;
      for (int i = 0; i < tries; ++i) mine += table.take(f, 1, kT0, take) ? 1 : 0;
      taken += mine;
    });
  }
  return threads;
}

TEST_CASE("a rule leases a tenth of each gateway's share, and only where leasing is exact enough",
          "[lease]") {
  CHECK(lease_units(fixed(1000), kPolicy) == 25);
  CHECK(lease_units(Rule{Algorithm::kTokenBucket, 100, 1000, 400}, kPolicy) == 10);  // burst
  CHECK(lease_units(Rule{Algorithm::kGcra, 1000, 1000, 0}, kPolicy) == 25);
  // One unit a lease would save nothing.
  CHECK(lease_units(fixed(79), kPolicy) == 0);
  CHECK(lease_units(fixed(80), kPolicy) == 2);
  // Never a sliding window or log, and never with leases off.
  CHECK(lease_units(Rule{Algorithm::kSlidingWindow, 1000, 1000, 0}, kPolicy) == 0);
  CHECK(lease_units(Rule{Algorithm::kSlidingLog, 1000, 1000, 0}, kPolicy) == 0);
  CHECK(lease_units(fixed(1000), LeasePolicy{0, 16, 4}) == 0);
  // At most 2^24 - 1 units (what a lease item can carry).
  CHECK(lease_units(fixed(4'000'000'000u), LeasePolicy{kMs, 16, 1}) == LeaseTable::kMaxUnits);
}

TEST_CASE(
    "a key is hot after the threshold of requests within a lease's time, asks once at a "
    "time, and stays hot after a lease",
    "[lease]") {
  LeaseTable table(256);
  const Rule rule = fixed(1000);
  const std::uint64_t f = fp("hot", rule);
  // 15 requests spread over more than 100 ms never make it hot.
  for (int i = 0; i < 15; ++i) {
    CHECK(table.want(f, "hot", rule, kT0 + static_cast<std::uint64_t>(i) * 10 * kMs, kT0,
                     kPolicy) == 0);
  }
  // A new window of 100 ms: the 16th request within it asks for 25 units.
  const std::uint64_t t = kT0 + 200 * kMs;
  for (int i = 0; i < 15; ++i) CHECK(table.want(f, "hot", rule, t, t + 50 * kMs, kPolicy) == 0);
  CHECK(table.want(f, "hot", rule, t, t + 50 * kMs, kPolicy) == 25);
  // One request at a time: not again until the first is answered or its deadline passed.
  CHECK(table.want(f, "hot", rule, t + kMs, t + 50 * kMs, kPolicy) == 0);
  CHECK(table.want(f, "hot", rule, t + 51 * kMs, t + 100 * kMs, kPolicy) == 25);
  // Answered: a lease until t + 150 ms. Once spent, the next request asks again at once, and
  // so does one within a lease's time after it ended.
  REQUIRE(table.install(f, "hot", rule, 3, 7, t + 150 * kMs, 100, t + 900 * kMs, t + 60 * kMs,
                        &kOwner, collect));
  LeaseTake take;
  for (int i = 0; i < 3; ++i) CHECK(table.take(f, 1, t + 61 * kMs, take));
  CHECK_FALSE(table.take(f, 1, t + 61 * kMs, take));
  CHECK(table.want(f, "hot", rule, t + 62 * kMs, t + 70 * kMs, kPolicy) == 25);
  REQUIRE(table.install(f, "hot", rule, 0, 7, t + 200 * kMs, 0, t + 900 * kMs, t + 63 * kMs,
                        &kOwner, collect));
  CHECK(table.want(f, "hot", rule, t + 290 * kMs, t + 300 * kMs, kPolicy) == 25);
  // Other keys, long keys and peeks of a sliding window are never asked for.
  CHECK(table.want(fp("cold", rule), "cold", rule, t, t, kPolicy) == 0);
  const std::string long_key(LeaseTable::kMaxKey + 1, 'k');
  for (int i = 0; i < 20; ++i)
    CHECK(table.want(fp(long_key, rule), long_key, rule, t, t, kPolicy) == 0);
}

TEST_CASE("units are taken while the lease lasts, never more than it holds, by cost", "[lease]") {
  LeaseTable table(256);
  const Rule rule = fixed(1000);
  const std::uint64_t f = fp("k", rule);
  lease(table, "k", rule, 10, kT0 + 100 * kMs);
  CHECK(table.running() == 1);
  LeaseTake take;
  CHECK(table.has(f, 10, kT0));
  CHECK_FALSE(table.has(f, 11, kT0));
  REQUIRE(table.take(f, 4, kT0 + kMs, take));
  CHECK(take.left == 6);
  CHECK(take.remaining == 100);
  CHECK_FALSE(table.take(f, 7, kT0 + kMs, take));  // more than is left: nothing taken
  REQUIRE(table.take(f, 6, kT0 + kMs, take));
  CHECK(take.left == 0);
  CHECK_FALSE(table.take(f, 1, kT0 + kMs, take));
  // Another rule of the same key is another lease.
  CHECK_FALSE(table.take(fp("k", fixed(999)), 1, kT0, take));

  lease(table, "j", rule, 10, kT0 + 100 * kMs);
  CHECK(table.take(fp("j", rule), 1, kT0 + 99 * kMs, take));
  CHECK_FALSE(table.take(fp("j", rule), 1, kT0 + 100 * kMs, take));  // its time is up
}

TEST_CASE("a lease ends at its time with exactly its unspent units, or when the next replaces it",
          "[lease]") {
  LeaseTable table(256);
  ended.clear();
  const Rule rule = fixed(1000);
  lease(table, "a", rule, 10, kT0 + 100 * kMs);
  lease(table, "b", rule, 5, kT0 + 300 * kMs);
  LeaseTake take;
  for (int i = 0; i < 3; ++i) REQUIRE(table.take(fp("a", rule), 1, kT0, take));
  CHECK(table.end_leases(kT0 + 50 * kMs, false, collect) == kT0 + 100 * kMs);
  CHECK(ended.empty());
  CHECK(table.end_leases(kT0 + 100 * kMs, false, collect) == kT0 + 300 * kMs);
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].key == "a");
  CHECK(ended[0].units == 7);
  CHECK(ended[0].stamp == 7);
  CHECK(ended[0].owner == &kOwner);
  CHECK(table.running() == 1);
  // A new lease of "b" first ends the one it holds: its 5 units go back.
  ended.clear();
  REQUIRE(
      table.install(fp("b", rule), "b", rule, 8, 9, kT0 + 400 * kMs, 0, 0, kT0, &kOwner, collect));
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].units == 5);
  CHECK(table.running() == 1);
  // Everything at once (closing); a spent lease has nothing to give back.
  ended.clear();
  for (int i = 0; i < 8; ++i) REQUIRE(table.take(fp("b", rule), 1, kT0, take));
  CHECK(table.end_leases(kT0, true, collect) == 0);
  CHECK(ended.empty());
  CHECK(table.running() == 0);
  // A grant for a key the table no longer follows goes straight back.
  CHECK_FALSE(
      table.install(fp("zz", rule), "zz", rule, 4, 1, kT0 + kMs, 0, 0, kT0, &kOwner, collect));
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].units == 4);
}

TEST_CASE("a flood of other keys never evicts a running lease", "[lease]") {
  LeaseTable table(64);  // one bucket of 4 per shard
  const Rule rule = fixed(1000);
  lease(table, "kept", rule, 50, kT0 + 100 * kMs);
  for (int i = 0; i < 10'000; ++i) {
    const std::string key = "flood:" + std::to_string(i);
    table.want(fp(key, rule), key, rule, kT0, kT0, kPolicy);
  }
  LeaseTake take;
  CHECK(table.take(fp("kept", rule), 50, kT0, take));
}

TEST_CASE("threads taking from one lease take exactly its units between them", "[lease]") {
  LeaseTable table(256);
  const Rule rule = fixed(1'000'000);
  constexpr std::uint32_t kUnits = 100'000;
  lease(table, "shared", rule, kUnits, kT0 + 100 * kMs);
  const std::uint64_t f = fp("shared", rule);
  std::atomic<std::uint64_t> taken{0};
  const std::atomic<bool> go{true};
  std::vector<std::thread> threads = takers(table, f, 4, 40'000, go, taken);
  for (auto& t : threads) t.join();
  CHECK(taken.load() == kUnits);
  ended.clear();
  table.end_leases(kT0, true, collect);
  CHECK(ended.empty());
}

TEST_CASE("a reset key's leases end without giving anything back", "[lease]") {
  LeaseTable table(256);
  ended.clear();
  lease(table, "reset-me", fixed(1000), 10, kT0 + 100 * kMs);
  lease(table, "reset-me", fixed(2000), 10, kT0 + 100 * kMs);
  lease(table, "other", fixed(1000), 10, kT0 + 100 * kMs);
  table.forget_key("reset-me");
  LeaseTake take;
  CHECK_FALSE(table.take(fp("reset-me", fixed(1000)), 1, kT0, take));
  CHECK_FALSE(table.take(fp("reset-me", fixed(2000)), 1, kT0, take));
  CHECK(table.take(fp("other", fixed(1000)), 1, kT0, take));
  CHECK(table.running() == 1);
  CHECK(ended.empty());
}

TEST_CASE("a key on its way to being hot is kept over colder keys of its bucket", "[lease]") {
  LeaseTable table(64);  // one bucket of 4 per shard
  const Rule rule = fixed(1000);
  // Keys of one bucket: same shard (top 6 bits) and bucket (bit 0 of the fingerprint).
  std::vector<std::string> same;
  const std::uint64_t target = fp("warm", rule);
  for (int i = 0; same.size() < 8 && i < 1'000'000; ++i) {
    const std::string key = "k" + std::to_string(i);
    const std::uint64_t f = fp(key, rule);
    if ((f >> 58) == (target >> 58)) same.push_back(key);
  }
  REQUIRE(same.size() == 8);
  // "warm" has 10 requests; then 8 other keys of its bucket ask once each, in turn.
  for (int i = 0; i < 10; ++i) table.want(target, "warm", rule, kT0, kT0, kPolicy);
  for (const std::string& key : same) table.want(fp(key, rule), key, rule, kT0, kT0, kPolicy);
  // Still followed: six more requests make it hot.
  std::uint32_t asked = 0;
  for (int i = 0; i < 6; ++i) asked = table.want(target, "warm", rule, kT0, kT0 + kMs, kPolicy);
  CHECK(asked == 25);
}

TEST_CASE("threads taking while the lease ends take or give back each unit exactly once",
          "[lease]") {
  for (int round = 0; round < 20; ++round) {
    LeaseTable table(256);
    const Rule rule = fixed(1'000'000);
    constexpr std::uint32_t kUnits = 20'000;
    lease(table, "raced", rule, kUnits, kT0 + 100 * kMs);
    const std::uint64_t f = fp("raced", rule);
    std::atomic<std::uint64_t> taken{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads = takers(table, f, 3, 20'000, go, taken);
    ended.clear();
    go = true;
    table.end_leases(kT0, true, collect);  // while they take
    for (auto& t : threads) t.join();
    const std::uint64_t returned = ended.empty() ? 0 : ended[0].units;
    CHECK(taken.load() + returned == kUnits);
  }
}

}  // namespace
}  // namespace sluice::client::detail
