// The client against a real in-process daemon (2 shards, manual clock).
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <map>

#include "client/client.h"
#include "core/key_hash.h"
#include "tests/client/test_support.h"

namespace sluice::client {
namespace {

using testing::CallbackLatch;
using testing::connect_or_fail;
using testing::options_for;
using testing::TestServer;
using namespace std::chrono_literals;

Rule rule(std::uint32_t limit, Algorithm algorithm = Algorithm::kTokenBucket) {
  Rule r;
  r.algorithm = algorithm;
  r.limit = limit;
  r.period_ms = 60'000;
  return r;
}

std::map<std::string, std::uint64_t> stats_map(Client& client) {
  auto stats = client.stats();
  REQUIRE(stats.ok());
  std::map<std::string, std::uint64_t> out;
  for (const Stat& s : *stats) out[s.name] = s.value;
  return out;
}

TEST_CASE("connect learns the node's shards") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  const ServerInfo& info = client->server_info();
  CHECK(info.shard_ports == server.server().shard_ports());
  CHECK(info.max_key == protocol::kDefaultMaxKey);
  CHECK(info.max_batch == protocol::kDefaultMaxBatch);
  CHECK_FALSE(info.node_id.empty());
}

TEST_CASE("every algorithm admits exactly the limit, then denies (sync)") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  for (const Algorithm algorithm :
       {Algorithm::kFixedWindow, Algorithm::kSlidingWindow, Algorithm::kSlidingLog,
        Algorithm::kTokenBucket, Algorithm::kGcra}) {
    INFO(algorithm_name(algorithm));
    const std::string key = "sync:" + std::string(algorithm_name(algorithm));
    const Rule r = rule(10, algorithm);
    for (std::uint32_t i = 0; i < 10; ++i) {
      auto d = client->acquire(key, r);
      REQUIRE(d.ok());
      CHECK(d->allowed);
      CHECK(d->limit == 10);
      CHECK(d->remaining == 9 - i);
      CHECK(d->policy_quota == 10);
      CHECK(d->policy_window_ms == 60'000);
    }
    auto denied = client->acquire(key, r);
    REQUIRE(denied.ok());
    CHECK_FALSE(denied->allowed);
    CHECK(denied->remaining == 0);
    CHECK(denied->retry_after_ms > 0);
    CHECK(denied->retry_after_ms <= 60'000);
  }
}

TEST_CASE("async acquires on one key admit exactly the limit") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  constexpr int kCalls = 15;
  std::atomic<int> allowed{0};
  std::atomic<int> denied{0};
  std::atomic<int> failed{0};
  CallbackLatch latch;
  for (int i = 0; i < kCalls; ++i) {
    client->acquire_async("async:key", rule(10), 1, [&](Result<Decision> d) {
      if (!d.ok()) {
        ++failed;
      } else if (d->allowed) {
        ++allowed;
      } else {
        ++denied;
      }
      latch.count_down();
    });
  }
  REQUIRE(latch.wait_for(kCalls, 5s));
  CHECK(allowed == 10);
  CHECK(denied == 5);
  CHECK(failed == 0);
}

TEST_CASE("1000 async acquires in flight each call back exactly once") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  constexpr std::size_t kCalls = 1000;
  std::array<std::atomic<int>, kCalls> calls{};
  std::atomic<int> ok{0};
  CallbackLatch latch;
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < kCalls; ++i) keys.push_back("many:" + std::to_string(i));
  for (std::size_t i = 0; i < kCalls; ++i) {
    client->acquire_async(keys[i], rule(5), 1, [&, i](Result<Decision> d) {
      ++calls[i];
      if (d.ok() && d->allowed && d->remaining == 4) ++ok;
      latch.count_down();
    });
  }
  REQUIRE(latch.wait_for(kCalls, 10s));
  CHECK(ok == static_cast<int>(kCalls));
  for (std::size_t i = 0; i < kCalls; ++i) {
    INFO(i);
    CHECK(calls[i] == 1);
  }
}

TEST_CASE("many threads share one client") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        auto d = client->acquire("shared:key", rule(100));
        if (d.ok() && d->allowed) ++allowed;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(allowed == 100);
}

TEST_CASE("a batch returns results in item order across shards") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) keys.push_back("batch:" + std::to_string(i));
  std::vector<AcquireRequest> items;
  std::array<int, 2> per_shard{};
  for (std::size_t i = 0; i < keys.size(); ++i) {
    // Each item's limit is unique, so a result in the wrong slot would show.
    items.push_back({keys[i], rule(static_cast<std::uint32_t>(i + 1)), 1, false});
    ++per_shard[shard_for(hash_key(keys[i]), 2)];
  }
  REQUIRE(per_shard[0] > 0);
  REQUIRE(per_shard[1] > 0);
  items.insert(items.begin() + 7, AcquireRequest{"", rule(3), 1, false});
  items.push_back({"batch:0", rule(1), 1, false});  // second take on a limit-1 key

  const auto results = client->acquire_batch(items);
  REQUIRE(results.size() == items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    INFO(i);
    if (i == 7) {
      CHECK(results[i].code() == ErrorCode::kInvalidKey);
      continue;
    }
    REQUIRE(results[i].ok());
    CHECK(results[i]->limit == items[i].rule.limit);
    CHECK(results[i]->allowed == (i != items.size() - 1));
  }
}

TEST_CASE("peek reports without consuming") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  for (int i = 0; i < 5; ++i) {
    auto p = client->peek("peek:key", rule(3));
    REQUIRE(p.ok());
    CHECK(p->allowed);
  }
  for (int i = 0; i < 3; ++i) CHECK(client->acquire("peek:key", rule(3))->allowed);
  auto p = client->peek("peek:key", rule(3));
  REQUIRE(p.ok());
  CHECK_FALSE(p->allowed);
  CHECK(p->remaining == 0);
}

TEST_CASE("reset forgets a key and says whether it existed") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  for (int i = 0; i < 2; ++i) CHECK(client->acquire("reset:key", rule(2))->allowed);
  CHECK_FALSE(client->acquire("reset:key", rule(2))->allowed);

  auto removed = client->reset("reset:key");
  REQUIRE(removed.ok());
  CHECK(*removed);
  CHECK(client->acquire("reset:key", rule(2))->allowed);

  auto absent = client->reset("reset:never-seen");
  REQUIRE(absent.ok());
  CHECK_FALSE(*absent);
}

TEST_CASE("invalid rules and keys come back as error values") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  Rule zero_period = rule(10);
  zero_period.period_ms = 0;
  CHECK(client->acquire("bad:rule", zero_period).code() == ErrorCode::kInvalidRule);
  CHECK(client->acquire("bad:cost", rule(10), 0).code() == ErrorCode::kInvalidRule);
  Rule unknown = rule(10);
  unknown.algorithm = static_cast<Algorithm>(99);
  CHECK(client->acquire("bad:algorithm", unknown).code() == ErrorCode::kInvalidRule);
  CHECK(client->acquire("", rule(10)).code() == ErrorCode::kInvalidKey);
  CHECK(client->acquire(std::string(300, 'k'), rule(10)).code() == ErrorCode::kInvalidKey);
  CHECK(client->reset("").code() == ErrorCode::kInvalidKey);
  // The connection is still good afterwards.
  CHECK(client->acquire("bad:after", rule(10))->allowed);
}

TEST_CASE("a shard-aware client sends each key to the shard shard_for picks") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address(), true));
  std::array<std::uint64_t, 2> expected{};
  for (int i = 0; i < 64; ++i) {
    const std::string key = "route:" + std::to_string(i);
    REQUIRE(client->acquire(key, rule(10))->allowed);
    ++expected[shard_for(hash_key(key), 2)];
  }
  auto stats = stats_map(*client);
  CHECK(stats["shard.0.allowed"] == expected[0]);
  CHECK(stats["shard.1.allowed"] == expected[1]);
  CHECK(stats["total.handed_over"] == 0);
}

TEST_CASE("a client that is not shard-aware works through the public port") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address(), false));
  for (int i = 0; i < 64; ++i) {
    REQUIRE(client->acquire("public:" + std::to_string(i), rule(1))->allowed);
    CHECK_FALSE(client->acquire("public:" + std::to_string(i), rule(1))->allowed);
  }
  std::vector<AcquireRequest> items;
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) keys.push_back("public-batch:" + std::to_string(i));
  for (const auto& k : keys) items.push_back({k, rule(1), 1, false});
  for (const auto& r : client->acquire_batch(items)) CHECK(r->allowed);
  auto stats = stats_map(*client);
  CHECK(stats["total.allowed"] == 74);
  // Keys of the other shard were handed over inside the node.
  CHECK(stats["total.handed_over"] > 0);
}

TEST_CASE("ping measures a round trip and stats lists the node's counters") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  auto rtt = client->ping();
  REQUIRE(rtt.ok());
  CHECK(rtt->count() > 0);
  CHECK(*rtt < 2s);
  auto stats = stats_map(*client);
  CHECK(stats.count("total.allowed") == 1);
  CHECK(stats.count("shard.1.keys") == 1);
}

TEST_CASE("decisions follow the server's manual clock") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  Rule r = rule(1, Algorithm::kFixedWindow);
  r.period_ms = 1000;
  CHECK(client->acquire("clock:key", r)->allowed);
  auto denied = client->acquire("clock:key", r);
  REQUIRE(denied.ok());
  CHECK_FALSE(denied->allowed);
  server.clock().advance_ms(denied->retry_after_ms);
  CHECK(client->acquire("clock:key", r)->allowed);
}

}  // namespace
}  // namespace sluice::client
