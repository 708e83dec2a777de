// The client's own limits: calls in flight (max_in_flight) and the largest timeout.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/client/test_support.h"

namespace sluice::client {
namespace {

using namespace std::chrono_literals;
using testing::CallbackLatch;
using testing::connect_or_fail;
using testing::FakeServer;
using testing::kHang;
using testing::options_for;
using testing::per_minute;
using testing::TestServer;

TEST_CASE(
    "exactly max_in_flight calls are accepted and one more is overloaded until replies drain") {
  FakeServer node(FakeServer::Mode::kHold);
  ClientOptions options = options_for(node.address(), /*shard_aware=*/false);
  options.timeout = 5s;  // the held calls must outlive the test's steps
  constexpr std::size_t kMax = 8;
  options.max_in_flight = kMax;
  auto client = connect_or_fail(options);
  const std::vector<AcquireRequest> two = {{"inflight:a", per_minute(100), 1},
                                           {"inflight:b", per_minute(100), 1}};

  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    std::atomic<int> answered{0};
    CallbackLatch held;
    for (std::size_t i = 0; i < kMax; ++i) {
      client->acquire_async("inflight:key", per_minute(100), 1, [&](Result<Decision> d) {
        if (d.ok()) ++answered;
        held.count_down();
      });
    }
    REQUIRE(node.wait_acquires(static_cast<int>(kMax) * (round + 1), kHang));

    // Full: every kind of call is refused at once, and nothing more reaches the node.
    const Result<Decision> refused = client->acquire("inflight:key", per_minute(100));
    CHECK(refused.code() == ErrorCode::kOverloaded);
    CHECK_THAT(refused.status().message(),
               Catch::Contains("max_in_flight") && Catch::Contains(std::to_string(kMax)));
    CHECK(client->ping().code() == ErrorCode::kOverloaded);
    CallbackLatch refusals;
    std::atomic<int> overloaded{0};
    client->acquire_async("inflight:key", per_minute(100), 1, [&](Result<Decision> d) {
      if (d.code() == ErrorCode::kOverloaded) ++overloaded;
      refusals.count_down();
    });
    client->acquire_batch_async(two, [&](std::span<const Result<Decision>> r) {
      for (const auto& d : r) overloaded += d.code() == ErrorCode::kOverloaded ? 1 : 0;
      refusals.count_down();
    });
    REQUIRE(refusals.wait_for(2, kHang));
    CHECK(overloaded == 3);
    CHECK(node.acquires() == static_cast<int>(kMax) * (round + 1));

    // The replies drain the table; then max calls fit again (the next round).
    node.release_held();
    REQUIRE(held.wait_for(kMax, kHang));
    CHECK(answered == static_cast<int>(kMax));
  }
}

TEST_CASE("max_in_flight 0 is refused") {
  ClientOptions options = options_for("127.0.0.1:1");
  options.max_in_flight = 0;
  CHECK(Client::connect(options).code() == ErrorCode::kInvalidArgument);
}

TEST_CASE("a timeout too large to count in nanoseconds is clamped to kMaxTimeout") {
  TestServer server;
  ClientOptions options = options_for(server.address());
  options.timeout = std::chrono::milliseconds::max();
  options.connect_timeout = std::chrono::milliseconds::max();
  auto client = connect_or_fail(options);
  CHECK(client->options().timeout == kMaxTimeout);
  CHECK(client->options().connect_timeout == kMaxTimeout);
  const Result<Decision> d = client->acquire("huge:timeout", per_minute(5));
  REQUIRE(d.ok());
  CHECK(d->allowed);

  // A call held by the node is still waiting for its reply (not timed out at once).
  FakeServer node(FakeServer::Mode::kHold);
  ClientOptions held_options = options_for(node.address(), /*shard_aware=*/false);
  held_options.timeout = std::chrono::milliseconds::max();
  auto held_client = connect_or_fail(held_options);
  CallbackLatch latch;
  std::atomic<std::uint64_t> remaining{0};
  std::atomic<bool> ok{false};
  held_client->acquire_async("huge:held", per_minute(50), 7, [&](Result<Decision> r) {
    ok = r.ok();
    if (r.ok()) remaining = r->remaining;
    latch.count_down();
  });
  REQUIRE(node.wait_acquires(1, kHang));
  node.release_held();
  REQUIRE(latch.wait_for(1, kHang));
  CHECK(ok);
  CHECK(remaining == 7);  // the fake echoes the cost
}

}  // namespace
}  // namespace sluice::client
