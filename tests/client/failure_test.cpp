// Timeouts, lost connections and reconnects, against fake nodes and a stopped daemon.
#include <atomic>
#include <catch2/catch.hpp>

#include "client/client.h"
#include "tests/client/test_support.h"

namespace sluice::client {
namespace {

using testing::CallbackLatch;
using testing::connect_or_fail;
using testing::FakeServer;
using testing::kHang;
using testing::options_for;
using testing::per_minute;
using testing::TestServer;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// Long call and connect timeouts (2 s, from options_for): for clients whose calls must succeed.
ClientOptions long_options(const std::string& address) {
  return options_for(address, /*shard_aware=*/false);
}

// A short call timeout, for calls meant to time out. Connecting must still succeed, so the
// connect timeout stays long.
ClientOptions short_call_options(const std::string& address) {
  ClientOptions options = long_options(address);
  options.timeout = 100ms;
  return options;
}

TEST_CASE("connect to a node that never answers HELLO times out within bounds") {
  FakeServer silent(FakeServer::Mode::kSilent);
  const auto start = SteadyClock::now();
  ClientOptions options = long_options(silent.address());
  options.connect_timeout = 200ms;  // this connect is meant to time out
  options.require_cluster_at_connect = true;
  auto client = Client::connect(options);
  const auto elapsed = SteadyClock::now() - start;
  REQUIRE_FALSE(client.ok());
  CHECK(client.code() == ErrorCode::kTimeout);
  CHECK(elapsed >= 200ms);
  CHECK(elapsed < kHang);
}

TEST_CASE("connect to a closed port fails with a connection error") {
  std::uint16_t port = 0;
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor probe(
        io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    port = probe.local_endpoint().port();
  }
  ClientOptions options = long_options("127.0.0.1:" + std::to_string(port));
  options.require_cluster_at_connect = true;
  auto client = Client::connect(options);
  REQUIRE_FALSE(client.ok());
  CHECK(client.code() == ErrorCode::kConnectionFailed);
}

TEST_CASE("connect rejects bad options") {
  ClientOptions no_servers;
  no_servers.servers.clear();
  CHECK(Client::connect(no_servers).code() == ErrorCode::kInvalidArgument);
  CHECK(Client::connect(long_options("no-port")).code() == ErrorCode::kInvalidArgument);
  CHECK(Client::connect(long_options("host:99999")).code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("a call the node never answers returns a timeout within bounds") {
  FakeServer node(FakeServer::Mode::kHold);
  auto client = connect_or_fail(short_call_options(node.address()));
  const auto start = SteadyClock::now();
  auto d = client->acquire("timeout:key", per_minute(10));
  const auto elapsed = SteadyClock::now() - start;
  CHECK(d.code() == ErrorCode::kTimeout);
  CHECK(elapsed >= 100ms);
  CHECK(elapsed < kHang);
}

TEST_CASE("async calls the node never answers each time out exactly once") {
  FakeServer node(FakeServer::Mode::kHold);
  auto client = connect_or_fail(short_call_options(node.address()));
  constexpr int kCalls = 200;
  std::atomic<int> timeouts{0};
  std::atomic<int> calls{0};
  CallbackLatch latch;
  for (int i = 0; i < kCalls; ++i) {
    client->acquire_async("timeout:async", per_minute(10), 1, [&](Result<Decision> d) {
      ++calls;
      if (d.code() == ErrorCode::kTimeout) ++timeouts;
      latch.count_down();
    });
  }
  REQUIRE(latch.wait_for(kCalls, kHang));
  CHECK(timeouts == kCalls);
  CHECK(calls == kCalls);
}

TEST_CASE("calls in flight when the connection drops fail, and a later call reconnects") {
  FakeServer node(FakeServer::Mode::kHold);
  ClientOptions options = long_options(node.address());
  options.timeout = 60s;  // the drop, not the timeout, must end these calls
  auto client = connect_or_fail(options);
  constexpr int kCalls = 10;
  std::atomic<int> connection_errors{0};
  CallbackLatch latch;
  for (int i = 0; i < kCalls; ++i) {
    client->acquire_async("drop:key", per_minute(10), 1, [&](Result<Decision> d) {
      if (d.code() == ErrorCode::kConnectionFailed) ++connection_errors;
      latch.count_down();
    });
  }
  // The fake has parsed the frames once it holds their replies; then cut the connection.
  node.drop_connections();
  REQUIRE(latch.wait_for(kCalls, kHang));  // well before the 60 s timeout
  CHECK(connection_errors == kCalls);

  node.set_mode(FakeServer::Mode::kAnswer);
  auto d = client->acquire("drop:key", per_minute(10), 7);
  REQUIRE(d.ok());
  CHECK(d->remaining == 7);
  CHECK(node.accepted() == 2);
}

TEST_CASE("an ERROR reply fails its call with the server's reason, and the next call reconnects") {
  FakeServer node(FakeServer::Mode::kRefuse);
  auto client = connect_or_fail(long_options(node.address()));
  auto refused = client->acquire("error:key", per_minute(10));
  CHECK(refused.code() == ErrorCode::kServerError);
  CHECK_THAT(refused.status().message(), Catch::Contains("boom"));
  node.set_mode(FakeServer::Mode::kAnswer);
  // The connection closes after the ERROR; a call may still see that close before reconnecting.
  Result<Decision> d = client->acquire("error:key", per_minute(10), 5);
  if (d.code() == ErrorCode::kConnectionFailed) d = client->acquire("error:key", per_minute(10), 5);
  REQUIRE(d.ok());
  CHECK(d->remaining == 5);
}

TEST_CASE("after the server stops, calls fail with a connection error instead of hanging") {
  auto server = std::make_unique<TestServer>();
  ClientOptions options = options_for(server->address());
  options.timeout = 2s;
  auto client = connect_or_fail(options);
  REQUIRE(client->acquire("stop:key", per_minute(10))->allowed);
  server->server().stop();
  server->server().wait();
  for (int i = 0; i < 5; ++i) {
    INFO(i);
    const auto start = SteadyClock::now();
    auto d = client->acquire("stop:key", per_minute(10));
    CHECK(d.code() == ErrorCode::kConnectionFailed);
    CHECK(SteadyClock::now() - start < kHang);
    CHECK(client->ping().code() == ErrorCode::kConnectionFailed);
  }
  std::vector<AcquireRequest> items = {{"stop:a", per_minute(1), 1, false},
                                       {"stop:b", per_minute(1), 1, false}};
  for (const auto& r : client->acquire_batch(items))
    CHECK(r.code() == ErrorCode::kConnectionFailed);
}

TEST_CASE("destroying the client fails the calls still in flight with kClosed") {
  FakeServer node(FakeServer::Mode::kHold);
  ClientOptions options = long_options(node.address());
  options.timeout = 60s;  // destruction, not the timeout, must end these calls
  auto client = connect_or_fail(options);
  std::atomic<int> closed{0};
  CallbackLatch latch;
  for (int i = 0; i < 5; ++i) {
    client->acquire_async("close:key", per_minute(10), 1, [&](Result<Decision> d) {
      if (d.code() == ErrorCode::kClosed) ++closed;
      latch.count_down();
    });
  }
  const auto start = SteadyClock::now();
  client.reset();
  CHECK(SteadyClock::now() - start < kHang);  // well before the 60 s timeout
  CHECK(latch.wait_for(5, kHang));
  CHECK(closed == 5);
}

}  // namespace
}  // namespace sluice::client
