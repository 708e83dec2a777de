// Leases through the daemon (protocol 4, docs/PROTOCOL.md "Leases"): a lease item takes up to its
// cost in units, as many as are left; a give-back item credits unspent units while they still
// count; both work for keys another shard owns (hand-over) and are bounded like any item.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "core/rule.h"
#include "protocol/messages.h"
#include "tests/integration/raw_client.h"
#include "tests/integration/test_server.h"

namespace sluice::test {
namespace {

using protocol::AcquireItem;
using protocol::AcquireResult;
using protocol::ItemStatus;

AcquireItem lease_of(std::string_view key, const Rule& rule, std::uint32_t units) {
  AcquireItem item{key, rule, units};
  item.lease = true;
  return item;
}

AcquireItem give_back_of(std::string_view key, const Rule& rule, std::uint32_t units,
                         std::uint32_t stamp) {
  AcquireItem item{key, rule, units};
  item.give_back = true;
  item.stamp = stamp;
  return item;
}

AcquireResult one(RawClient& client, const AcquireItem& item) {
  return client.acquire(std::span(&item, 1)).at(0);
}

// One-unit acquires admitted now, up to 1,000.
int admitted(RawClient& client, std::string_view key, const Rule& rule) {
  int n = 0;
  while (n < 1000 && client.acquire(key, rule).status == ItemStatus::kAllowed) ++n;
  return n;
}

TEST_CASE("a lease takes what it asks for or what is left, and gives back what it did not spend",
          "[lease]") {
  const Algorithm algorithm = GENERATE(Algorithm::kFixedWindow, Algorithm::kSlidingWindow,
                                       Algorithm::kTokenBucket, Algorithm::kGcra);
  CAPTURE(algorithm_name(algorithm));
  TestServer server;
  RawClient client(server.port());
  const Rule rule{algorithm, 20, 60'000, 0};  // nothing comes back by itself within the test

  const AcquireResult first = one(client, lease_of("hot", rule, 8));
  CHECK(first.status == ItemStatus::kAllowed);
  CHECK(first.granted == 8);
  CHECK(first.remaining == 12);
  const AcquireResult second = one(client, lease_of("hot", rule, 50));
  CHECK(second.granted == 12);  // what was left
  CHECK(second.remaining == 0);
  const AcquireResult none = one(client, lease_of("hot", rule, 5));
  CHECK(none.status == ItemStatus::kDenied);
  CHECK(none.granted == 0);
  CHECK(none.retry_after_ms > 0);
  // Five of the second lease's twelve were not spent: given back, they are admitted again.
  const AcquireResult back = one(client, give_back_of("hot", rule, 5, second.retry_after_ms));
  CHECK(back.status == ItemStatus::kAllowed);
  CHECK(back.granted == 5);
  CHECK(admitted(client, "hot", rule) == 5);
  // More than the key holds is credited only up to what it holds.
  const AcquireResult more = one(client, give_back_of("hot", rule, 100, second.retry_after_ms));
  CHECK(more.granted == 20);
  CHECK(admitted(client, "hot", rule) == 20);
  // A give-back for a key with nothing stored credits nothing.
  CHECK(one(client, give_back_of("absent", rule, 3, 0)).granted == 0);
  // STATS: two leases granted 20 units; three give-backs credited 25 of 108.
  const auto stats = client.stats();
  CHECK(stats.at("total.leases") == 2);
  CHECK(stats.at("total.leased_units") == 20);
  CHECK(stats.at("total.give_backs") == 3);
  CHECK(stats.at("total.credited_units") == 25);
}

TEST_CASE(
    "a fixed window's units given back in a later window, or under another stamp, are "
    "dropped",
    "[lease]") {
  TestServer server;
  RawClient client(server.port());
  const Rule rule{Algorithm::kFixedWindow, 10, 1000, 0};
  server.clock().set_ns(kTestStartNs - kTestStartNs % 1'000'000'000 + 900'000'000);
  const AcquireResult lease = one(client, lease_of("w", rule, 10));
  REQUIRE(lease.granted == 10);
  CHECK(one(client, give_back_of("w", rule, 4, lease.retry_after_ms + 1)).granted == 0);
  server.clock().advance_ms(100);  // the next window
  CHECK(client.acquire("w", rule).status == ItemStatus::kAllowed);
  CHECK(one(client, give_back_of("w", rule, 4, lease.retry_after_ms)).granted == 0);
  CHECK(admitted(client, "w", rule) == 9);
}

TEST_CASE("leases and give-backs of keys another shard owns are handed over", "[lease]") {
  TestServer server(test_config(3));
  RawClient client(server.shard_port(0));
  const Rule rule{Algorithm::kTokenBucket, 30, 60'000, 0};
  // Keys on every shard, in one frame: some are handed over.
  std::vector<std::string> keys;
  for (int i = 0; i < 12; ++i) keys.push_back("h:" + std::to_string(i));
  std::vector<AcquireItem> leases;
  for (const std::string& key : keys) leases.push_back(lease_of(key, rule, 10));
  const std::vector<AcquireResult> granted = client.acquire(leases);
  REQUIRE(granted.size() == keys.size());
  std::vector<AcquireItem> backs;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    INFO(keys[i]);
    CHECK(granted[i].granted == 10);
    backs.push_back(give_back_of(keys[i], rule, 4, granted[i].retry_after_ms));
  }
  const std::vector<AcquireResult> credited = client.acquire(backs);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    INFO(keys[i]);
    CHECK(credited[i].granted == 4);
    CHECK(admitted(client, keys[i], rule) == 24);
  }
}

TEST_CASE("a lease over 2^24 - 1 units is an invalid item, and a sliding log is never given back",
          "[lease]") {
  TestServer server;
  RawClient client(server.port());
  const Rule bucket{Algorithm::kTokenBucket, 100, 60'000, 0};
  CHECK(one(client, lease_of("big", bucket, protocol::kMaxLeaseUnits + 1)).status ==
        ItemStatus::kInvalidRule);
  CHECK(one(client, give_back_of("big", bucket, protocol::kMaxLeaseUnits + 1, 0)).status ==
        ItemStatus::kInvalidRule);
  CHECK(one(client, lease_of("big", bucket, protocol::kMaxLeaseUnits)).granted == 100);
  const Rule log{Algorithm::kSlidingLog, 10, 60'000, 0};
  const AcquireResult lease = one(client, lease_of("log", log, 4));
  CHECK(lease.granted == 4);
  CHECK(one(client, give_back_of("log", log, 4, lease.retry_after_ms)).granted == 0);
  CHECK(admitted(client, "log", log) == 6);
}

}  // namespace
}  // namespace sluice::test
