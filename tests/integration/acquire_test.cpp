// Decisions through the daemon: counts, concurrency, cross-shard hand-over and pipelining.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/rule.h"
#include "tests/integration/raw_client.h"
#include "tests/integration/test_server.h"

namespace sluice::test {
namespace {

using protocol::ItemStatus;

Rule per_minute(Algorithm algorithm, std::uint32_t limit) {
  return Rule{algorithm, limit, 60'000, 0};
}

TEST_CASE("100 acquires on a key limited to 10 per minute admit exactly 10", "[acquire]") {
  const Algorithm algorithm =
      GENERATE(Algorithm::kFixedWindow, Algorithm::kSlidingWindow, Algorithm::kSlidingLog,
               Algorithm::kTokenBucket, Algorithm::kGcra);
  CAPTURE(algorithm_name(algorithm));
  TestServer server;
  RawClient client(server.port());
  const Rule rule = per_minute(algorithm, 10);

  int allowed = 0;
  for (int i = 0; i < 100; ++i) {
    const protocol::AcquireResult result = client.acquire("user:42", rule);
    REQUIRE((result.status == ItemStatus::kAllowed || result.status == ItemStatus::kDenied));
    CHECK(result.limit == 10);
    if (result.status == ItemStatus::kAllowed) {
      ++allowed;
      CHECK(result.remaining == static_cast<std::uint32_t>(10 - allowed));
    } else {
      CHECK(result.retry_after_ms > 0);
    }
  }
  CHECK(allowed == 10);
}

TEST_CASE("8 connections hammering one key admit exactly the limit in total", "[acquire]") {
  TestServer server(test_config(3));
  constexpr int kThreads = 8;
  constexpr int kPerThread = 150;
  constexpr std::uint32_t kLimit = 500;
  const Rule rule = per_minute(Algorithm::kTokenBucket, kLimit);

  std::vector<int> allowed(kThreads, 0);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        // Half use the public port, half a shard port, so most requests need a hand-over.
        const std::uint16_t port = t % 2 == 0 ? server.port() : server.shard_port(t % 3);
        RawClient client(port);
        for (int i = 0; i < kPerThread; ++i) {
          if (client.acquire("hot-key", rule).status == ItemStatus::kAllowed) ++allowed[t];
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();

  int total = 0;
  for (int t = 0; t < kThreads; ++t) {
    CHECK(errors[t].empty());
    total += allowed[t];
  }
  CHECK(total == static_cast<int>(kLimit));
}

TEST_CASE("a key owned by another shard is answered through any port", "[acquire][shards]") {
  TestServer server(test_config(2));
  const std::string key = key_on_shard(1, 2);
  const Rule rule = per_minute(Algorithm::kFixedWindow, 10);

  RawClient other_shard(server.shard_port(0));
  const auto before = other_shard.stats();
  CHECK(before.at("total.handed_over") == 0);

  for (int i = 0; i < 6; ++i) {
    const auto result = other_shard.acquire(key, rule);
    CHECK(result.status == ItemStatus::kAllowed);
    CHECK(result.remaining == static_cast<std::uint32_t>(10 - 1 - i));
  }
  const auto after = other_shard.stats();
  CHECK(after.at("shard.0.handed_over") == 6);
  CHECK(after.at("shard.1.allowed") == 6);  // counted where the key lives
  CHECK(after.at("shard.0.allowed") == 0);
  CHECK(after.at("shard.1.keys") == 1);

  // The same counter, whichever port asks: 4 left, then denied.
  RawClient public_port(server.port());
  for (int i = 0; i < 4; ++i) CHECK(public_port.acquire(key, rule).status == ItemStatus::kAllowed);
  CHECK(public_port.acquire(key, rule).status == ItemStatus::kDenied);
  RawClient owner(server.shard_port(1));
  CHECK(owner.acquire(key, rule).status == ItemStatus::kDenied);
  CHECK(owner.stats().at("total.allowed") == 10);
}

TEST_CASE("a batch spanning every shard is answered item by item, in order", "[acquire][shards]") {
  TestServer server(test_config(3));
  RawClient client(server.shard_port(0));
  std::vector<std::string> keys;
  for (unsigned s = 0; s < 3; ++s) {
    keys.push_back(key_on_shard(s, 3, "a-"));
    keys.push_back(key_on_shard(s, 3, "b-"));
  }
  std::vector<protocol::AcquireItem> items;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    // Item i has limit i: the reply's limit field tells the items apart.
    items.push_back(
        {keys[i], per_minute(Algorithm::kGcra, static_cast<std::uint32_t>(i + 1)), 1, false});
  }
  items.push_back({"", per_minute(Algorithm::kGcra, 5), 1, false});
  items.push_back({"bad-rule", Rule{Algorithm::kGcra, 5, 0, 0}, 1, false});

  const auto results = client.acquire(items);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    CHECK(results[i].status == ItemStatus::kAllowed);
    CHECK(results[i].limit == i + 1);
    CHECK(results[i].remaining == i);
  }
  CHECK(results[keys.size()].status == ItemStatus::kInvalidKey);
  CHECK(results[keys.size() + 1].status == ItemStatus::kInvalidRule);

  const auto stats = client.stats();
  CHECK(stats.at("total.keys") == keys.size());
  CHECK(stats.at("shard.0.handed_over") == 4);
  CHECK(stats.at("total.invalid_items") == 2);
}

TEST_CASE("RESET forgets keys on every shard", "[reset][shards]") {
  TestServer server(test_config(2));
  RawClient client(server.port());
  const std::string a = key_on_shard(0, 2);
  const std::string b = key_on_shard(1, 2);
  const Rule rule = per_minute(Algorithm::kFixedWindow, 1);
  CHECK(client.acquire(a, rule).status == ItemStatus::kAllowed);
  CHECK(client.acquire(b, rule).status == ItemStatus::kAllowed);
  CHECK(client.acquire(b, rule).status == ItemStatus::kDenied);

  const std::vector<std::string_view> keys = {a, b, "never-seen", ""};
  const auto statuses = client.reset(keys);
  REQUIRE(statuses.size() == 4);
  CHECK(statuses[0] == protocol::ResetStatus::kRemoved);
  CHECK(statuses[1] == protocol::ResetStatus::kRemoved);
  CHECK(statuses[2] == protocol::ResetStatus::kAbsent);
  CHECK(statuses[3] == protocol::ResetStatus::kInvalidKey);
  CHECK(client.acquire(b, rule).status == ItemStatus::kAllowed);
}

TEST_CASE("1000 pipelined requests are each answered once", "[acquire][pipeline]") {
  TestServer server(test_config(2));
  RawClient client(server.port());
  const Rule rule = per_minute(Algorithm::kSlidingWindow, 300);

  // Keys on both shards, so replies can come back out of order; all written before any read.
  protocol::Bytes burst;
  std::set<std::uint32_t> ids;
  for (std::uint32_t i = 0; i < 1000; ++i) {
    const std::uint32_t id = client.next_id();
    ids.insert(id);
    const std::string key = "pipelined-" + std::to_string(i % 4);
    const protocol::AcquireItem item{key, rule, 1, false};
    protocol::encode_acquire_request(burst, id, std::span(&item, 1));
  }
  REQUIRE(client.send(burst));

  std::set<std::uint32_t> answered;
  int allowed = 0;
  for (int i = 0; i < 1000; ++i) {
    const ReceivedFrame reply = client.read();
    REQUIRE(reply.header.opcode == protocol::Opcode::kAcquire);
    REQUIRE(reply.header.is_reply());
    CHECK(answered.insert(reply.header.request_id).second);  // never twice
    std::vector<protocol::AcquireResult> results;
    REQUIRE(protocol::parse_acquire_reply(reply.body, results));
    REQUIRE(results.size() == 1);
    if (results[0].status == ItemStatus::kAllowed) ++allowed;
  }
  CHECK(answered == ids);
  CHECK(allowed == 4 * 250);  // 250 per key, all within the limit of 300
  // The next frame on the connection answers a PING sent now: no stray ACQUIRE reply is left.
  CHECK(client.ping());
}

TEST_CASE("PING echoes its payload and HELLO describes the node", "[hello]") {
  TestServer server(test_config(3));
  RawClient client(server.port());
  CHECK(client.ping());
  const protocol::HelloReply hello = client.hello();
  CHECK(hello.version == protocol::kVersion);
  CHECK(hello.this_shard == protocol::kPublicPort);
  CHECK(hello.shard_ports == server.server().shard_ports());
  CHECK(hello.max_frame == protocol::kDefaultMaxFrame);
  CHECK(hello.max_key == protocol::kDefaultMaxKey);
  CHECK(hello.max_batch == protocol::kDefaultMaxBatch);
  CHECK(hello.node_id == "127.0.0.1:" + std::to_string(server.port()));

  // A newer client is answered in the version this server speaks.
  RawClient newer(server.port());
  CHECK(newer.hello(9).version == protocol::kVersion);
}

TEST_CASE("HELLO reports shard ports that accept connections", "[hello][shards]") {
  TestServer server(test_config(3));
  RawClient client(server.port());
  const protocol::HelloReply hello = client.hello();
  REQUIRE(hello.shard_ports.size() == 3);
  for (unsigned i = 0; i < hello.shard_ports.size(); ++i) {
    RawClient shard(hello.shard_ports[i]);
    CHECK(shard.hello().this_shard == i);
    // A key of this shard asked on its own port needs no hand-over.
    CHECK(shard.acquire(key_on_shard(i, 3), per_minute(Algorithm::kGcra, 3)).status ==
          ItemStatus::kAllowed);
  }
  CHECK(client.stats().at("total.handed_over") == 0);
}

TEST_CASE("node_id comes from the config when given", "[hello]") {
  server::ServerConfig config = test_config(1);
  config.node_id = "node-a";
  TestServer server(config);
  RawClient client(server.port());
  CHECK(client.hello().node_id == "node-a");
}

}  // namespace
}  // namespace sluice::test
