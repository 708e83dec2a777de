// Async batches, the transport probe, several connections per shard, and a client that runs on
// the caller's io_context.
#include "net/asio.h"  // before any other Asio header

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tests/client/test_support.h"

namespace sluice::client {
namespace {

using namespace std::chrono_literals;
using testing::CallbackLatch;
using testing::connect_or_fail;
using testing::options_for;
using testing::stat;
using testing::TestServer;

Rule rule_of(std::uint32_t limit) {
  Rule r;
  r.algorithm = Algorithm::kFixedWindow;
  r.limit = limit;
  r.period_ms = 60'000;
  return r;
}

// Copies a batch's results out of the callback (the span lives only during it).
struct Answer {
  CallbackLatch latch;
  std::vector<Result<Decision>> results;
  std::thread::id thread;
  int calls = 0;
  BatchCallback callback() {
    return [this](std::span<const Result<Decision>> r) {
      results.assign(r.begin(), r.end());
      thread = std::this_thread::get_id();
      ++calls;
      latch.count_down();
    };
  }
};

TEST_CASE("an async batch answers every item in item order, once, on the I/O thread") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  // Limits 1..40 on distinct keys, each taken twice: the first allowed, the second denied only
  // where the limit is 1. The keys spread over both shards.
  std::vector<std::string> keys;
  std::vector<AcquireRequest> items;
  for (int i = 0; i < 40; ++i) keys.push_back("async:" + std::to_string(i));
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 40; ++i) {
      items.push_back(AcquireRequest{keys[i], rule_of(static_cast<std::uint32_t>(i + 1)), 1});
    }
  }
  Answer answer;
  client->acquire_batch_async(items, answer.callback());
  REQUIRE(answer.latch.wait_for(1, 10s));
  CHECK(answer.calls == 1);
  CHECK(answer.thread != std::this_thread::get_id());
  REQUIRE(answer.results.size() == items.size());
  for (int i = 0; i < 40; ++i) {
    const auto& first = answer.results[static_cast<std::size_t>(i)];
    const auto& second = answer.results[static_cast<std::size_t>(40 + i)];
    REQUIRE(first.ok());
    REQUIRE(second.ok());
    CHECK(first->allowed);
    CHECK(first->remaining == static_cast<std::uint64_t>(i));
    CHECK(first->policy_quota == static_cast<std::uint32_t>(i + 1));
    CHECK(second->allowed == (i > 0));
  }
  CHECK(stat(*client, "shard.0.allowed") > 0);
  CHECK(stat(*client, "shard.1.allowed") > 0);
}

TEST_CASE("an async batch reports bad keys per item and still calls back when nothing is sent") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  const std::string too_long(client->server_info().max_key + 1u, 'x');
  std::vector<AcquireRequest> items = {{"ok:1", rule_of(5), 1},
                                       {"", rule_of(5), 1},
                                       {too_long, rule_of(5), 1},
                                       {"ok:2", rule_of(5), 1}};
  Answer mixed;
  client->acquire_batch_async(items, mixed.callback());
  REQUIRE(mixed.latch.wait_for(1, 10s));
  REQUIRE(mixed.results.size() == 4);
  CHECK(mixed.results[0].ok());
  CHECK(mixed.results[1].status().code() == ErrorCode::kInvalidKey);
  CHECK(mixed.results[2].status().code() == ErrorCode::kInvalidKey);
  CHECK(mixed.results[3].ok());

  const std::vector<AcquireRequest> bad = {{"", rule_of(5), 1}};
  Answer refused;
  client->acquire_batch_async(bad, refused.callback());
  REQUIRE(refused.latch.wait_for(1, 10s));
  CHECK(refused.thread != std::this_thread::get_id());
  REQUIRE(refused.results.size() == 1);
  CHECK(refused.results[0].status().code() == ErrorCode::kInvalidKey);

  Answer empty;
  client->acquire_batch_async({}, empty.callback());
  REQUIRE(empty.latch.wait_for(1, 10s));
  CHECK(empty.calls == 1);
  CHECK(empty.results.empty());
}

TEST_CASE("a batch above the server's max batch is split and answered as one") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  const std::size_t n = client->server_info().max_batch * 2u + 7u;
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < n; ++i) keys.push_back("split:" + std::to_string(i));
  std::vector<AcquireRequest> items;
  for (const std::string& k : keys) items.push_back({k, rule_of(3), 2});
  Answer answer;
  client->acquire_batch_async(items, answer.callback());
  REQUIRE(answer.latch.wait_for(1, 10s));
  REQUIRE(answer.results.size() == n);
  for (const auto& r : answer.results) {
    REQUIRE(r.ok());
    CHECK(r->allowed);
    CHECK(r->remaining == 1);
  }
  CHECK(stat(*client, "total.allowed") == n);
}

TEST_CASE("the probe echoes the batch's frames and decides nothing") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  std::vector<std::string> keys;
  for (int i = 0; i < 30; ++i) keys.push_back("probe:" + std::to_string(i));
  std::vector<AcquireRequest> items;
  for (const std::string& k : keys) items.push_back({k, rule_of(1), 1});
  for (int round = 0; round < 3; ++round) {
    Answer answer;
    client->probe_batch_async(items, answer.callback());
    REQUIRE(answer.latch.wait_for(1, 10s));
    REQUIRE(answer.results.size() == items.size());
    for (const auto& r : answer.results) {
      REQUIRE(r.ok());
      CHECK(r->allowed);
      CHECK(r->limit == 0);
    }
  }
  CHECK(stat(*client, "total.allowed") == 0);
  CHECK(stat(*client, "total.keys") == 0);
  // A real acquire afterwards finds the key untouched.
  auto d = client->acquire(keys[0], rule_of(1));
  REQUIRE(d.ok());
  CHECK(d->allowed);
}

TEST_CASE("a one-item batch (its own fast path) decides and probes like a bigger one") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  const std::vector<AcquireRequest> one = {{"one:1", rule_of(2), 1}};
  for (int round = 0; round < 3; ++round) {
    Answer answer;
    client->acquire_batch_async(one, answer.callback());
    REQUIRE(answer.latch.wait_for(1, 10s));
    CHECK(answer.calls == 1);
    CHECK(answer.thread != std::this_thread::get_id());
    REQUIRE(answer.results.size() == 1);
    REQUIRE(answer.results[0].ok());
    CHECK(answer.results[0]->allowed == (round < 2));
    CHECK(answer.results[0]->policy_quota == 2);
  }
  const std::vector<AcquireRequest> other = {{"one:2", rule_of(1), 1}};
  Answer probed;
  client->probe_batch_async(other, probed.callback());
  REQUIRE(probed.latch.wait_for(1, 10s));
  REQUIRE(probed.results.size() == 1);
  REQUIRE(probed.results[0].ok());
  CHECK(probed.results[0]->allowed);
  CHECK(probed.results[0]->limit == 0);
  CHECK(stat(*client, "total.keys") == 1);  // only one:1; the probe stored nothing
}

TEST_CASE("connections_per_shard opens that many connections to each shard and uses them") {
  TestServer server;
  ClientOptions options = options_for(server.address());
  options.connections_per_shard = 3;
  auto client = connect_or_fail(options);
  // The public port plus three per shard.
  CHECK(stat(*client, "total.connections") == 7);
  // Many calls in flight at once spread over the connections and all complete.
  std::vector<std::string> keys;
  for (int i = 0; i < 64; ++i) keys.push_back("spread:" + std::to_string(i));
  CallbackLatch latch;
  std::atomic<int> allowed{0};
  for (const std::string& k : keys) {
    client->acquire_async(k, rule_of(1), 1, [&](Result<Decision> r) {
      if (r.ok() && r->allowed) ++allowed;
      latch.count_down();
    });
  }
  REQUIRE(latch.wait_for(keys.size(), 10s));
  CHECK(allowed.load() == 64);

  options.connections_per_shard = 0;
  auto refused = Client::connect(options);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("connections_per_shard also applies to a client that is not shard-aware") {
  TestServer server;
  ClientOptions options = options_for(server.address(), /*shard_aware=*/false);
  options.connections_per_shard = 2;
  auto client = connect_or_fail(options);
  CHECK(stat(*client, "total.connections") == 2);
  auto d = client->acquire("public:1", rule_of(1));
  REQUIRE(d.ok());
  CHECK(d->allowed);
}

TEST_CASE("a client on the caller's io_context calls back on the thread running it") {
  TestServer server;
  boost::asio::io_context io(1);
  auto connected = Client::connect(options_for(server.address()), io);
  REQUIRE(connected.ok());
  Client& client = **connected;
  CHECK(client.server_info().shard_ports.size() == 2);

  // A closed loop driven from callbacks: each answer issues the next batch, 50 in all, all on
  // this thread. Then close() lets run() return.
  const std::vector<AcquireRequest> items = {{"io:a", rule_of(1000), 1},
                                             {"io:b", rule_of(1000), 1}};
  int batches = 0;
  int allowed = 0;
  bool wrong_thread = false;
  const auto runner = std::this_thread::get_id();
  boost::asio::steady_timer guard(io, 10s);  // a hang fails the test instead of blocking it
  bool timed_out = false;
  guard.async_wait([&](const boost::system::error_code& ec) {
    if (!ec) {
      timed_out = true;
      io.stop();
    }
  });
  std::function<void()> next = [&] {
    client.acquire_batch_async(items, [&](std::span<const Result<Decision>> r) {
      wrong_thread = wrong_thread || std::this_thread::get_id() != runner;
      for (const auto& d : r) allowed += d.ok() && d->allowed ? 1 : 0;
      if (++batches < 50) {
        next();
      } else {
        client.close();
        guard.cancel();
      }
    });
  };
  boost::asio::post(io, next);
  // Returns only when nothing is left: the client must leave no work behind after close().
  io.run();
  CHECK_FALSE(timed_out);
  CHECK(batches == 50);
  CHECK(allowed == 100);
  CHECK_FALSE(wrong_thread);
}

TEST_CASE("close() fails calls in flight with kClosed and refuses later ones") {
  testing::FakeServer fake(testing::FakeServer::Mode::kHold);
  boost::asio::io_context io(1);
  auto connected = Client::connect(options_for(fake.address(), /*shard_aware=*/false), io);
  REQUIRE(connected.ok());
  Client& client = **connected;
  std::optional<ErrorCode> held;
  std::optional<ErrorCode> later;
  const std::vector<AcquireRequest> items = {{"held:1", rule_of(5), 1}};
  client.acquire_batch_async(items, [&](std::span<const Result<Decision>> r) {
    held = r[0].ok() ? ErrorCode::kOk : r[0].status().code();
  });
  // Let the request reach the fake node, then close while it is held.
  boost::asio::steady_timer later_timer(io, 100ms);
  later_timer.async_wait([&](const boost::system::error_code&) {
    client.close();
    client.acquire_batch_async(items, [&](std::span<const Result<Decision>> r) {
      later = r[0].ok() ? ErrorCode::kOk : r[0].status().code();
    });
  });
  io.run_for(10s);
  REQUIRE(held.has_value());
  CHECK(*held == ErrorCode::kClosed);
  REQUIRE(later.has_value());
  CHECK(*later == ErrorCode::kClosed);
}

}  // namespace
}  // namespace sluice::client
