// A call that timed out is never spent later: withdrawn while its bytes are still queued, and
// its late reply dropped (and counted) once they had left.
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
using testing::GateProxy;
using testing::kHang;
using testing::options_for;
using testing::per_minute;
using testing::TestServer;
using SteadyClock = std::chrono::steady_clock;

TEST_CASE("a call that times out while the handshake is delayed is never sent") {
  TestServer server;
  GateProxy proxy(server.server().port());
  ClientOptions options = options_for(proxy.address(), /*shard_aware=*/false);
  options.timeout = 300ms;
  options.connect_timeout = 10s;  // the reconnect below must outlast the timed-out call
  auto client = connect_or_fail(options);
  REQUIRE(client->acquire("withdraw:warm", per_minute(5)).ok());

  // The daemon's replies (its next HELLO reply first) now wait in the proxy. Cut the
  // connection and let a call reconnect: it times out with the handshake still under way.
  proxy.hold_replies();
  proxy.drop_connections();
  Result<Decision> probe = client->peek("withdraw:probe", per_minute(5));
  for (int i = 0; i < 20 && probe.code() != ErrorCode::kTimeout; ++i) {
    probe = client->peek("withdraw:probe", per_minute(5));
  }
  REQUIRE(probe.code() == ErrorCode::kTimeout);

  // The call under test: told it failed, so it must never reach the daemon.
  const ClientCounters before_call = client->counters();
  const Result<Decision> timed_out = client->acquire("withdraw:key", per_minute(5));
  REQUIRE(timed_out.code() == ErrorCode::kTimeout);
  const ClientCounters after_call = client->counters();
  CHECK(after_call.withdrawn == before_call.withdrawn + 1);
  CHECK(after_call.timed_out == before_call.timed_out + 1);

  // The handshake completes; a peek on the same connection (same key, so the same shard, after
  // the acquire had it been sent) finds the key untouched: all 5 units could still be taken.
  proxy.release_replies();
  const auto deadline = SteadyClock::now() + kHang;
  Result<Decision> peeked = client->peek("withdraw:key", per_minute(5), 5);
  while (!peeked.ok() && SteadyClock::now() < deadline) {
    peeked = client->peek("withdraw:key", per_minute(5), 5);
  }
  REQUIRE(peeked.ok());
  CHECK(peeked->allowed);
  // And so does a client of its own, straight to the daemon.
  auto direct = connect_or_fail(options_for(server.address()));
  const Result<Decision> direct_peek = direct->peek("withdraw:key", per_minute(5), 5);
  REQUIRE(direct_peek.ok());
  CHECK(direct_peek->allowed);
  CHECK(client->counters().late_replies == 0);  // nothing withdrawn was answered
}

TEST_CASE("a reply that arrives after its call timed out is dropped and counted") {
  FakeServer node(FakeServer::Mode::kHold);
  ClientOptions options = options_for(node.address(), /*shard_aware=*/false);
  options.timeout = 100ms;
  auto client = connect_or_fail(options);
  CHECK(client->counters().late_replies == 0);
  CHECK(client->acquire("late:key", per_minute(10), 111).code() == ErrorCode::kTimeout);
  REQUIRE(node.wait_acquires(1, kHang));  // it was sent before it timed out: not withdrawn
  ClientCounters counters = client->counters();
  CHECK(counters.timed_out == 1);
  CHECK(counters.withdrawn == 0);

  node.release_held();  // the reply to cost 111 arrives now, late
  node.set_mode(FakeServer::Mode::kAnswer);
  // The next call's reply comes after the late one on the same connection, so once it is
  // answered the late one has been read. Retries only guard a loaded machine's timeouts: a
  // call's reply must be its own (the fake echoes the cost), never an earlier call's.
  const auto deadline = SteadyClock::now() + kHang;
  std::uint32_t cost = 222;
  Result<Decision> d = client->acquire("late:key", per_minute(1000), cost);
  while (d.code() == ErrorCode::kTimeout && SteadyClock::now() < deadline) {
    d = client->acquire("late:key", per_minute(1000), ++cost);
  }
  REQUIRE(d.ok());
  CHECK(d->remaining == cost);
  counters = client->counters();
  CHECK(counters.late_replies >= 1);
  CHECK(counters.late_replies <= counters.timed_out);
}

TEST_CASE("a call queued behind a stalled write still times out and is withdrawn") {
  FakeServer node(FakeServer::Mode::kStall);
  ClientOptions options = options_for(node.address(), /*shard_aware=*/false);
  options.timeout = 200ms;
  auto client = connect_or_fail(options);

  // The node reads nothing after HELLO: batches of ~1 MB each, more than the kernel's buffers
  // on both ends hold, leave the client's write stuck. Every call in them times out.
  constexpr std::size_t kItems = 4000;
  constexpr int kBatches = 12;
  std::vector<std::string> keys;
  keys.reserve(kItems);
  for (std::size_t i = 0; i < kItems; ++i)
    keys.push_back(std::string(200, 'k') + std::to_string(i));
  std::vector<AcquireRequest> items;
  for (const std::string& key : keys) items.push_back(AcquireRequest{key, per_minute(5)});
  CallbackLatch batches;
  for (int b = 0; b < kBatches; ++b) {
    client->acquire_batch_async(items,
                                [&](std::span<const Result<Decision>>) { batches.count_down(); });
  }
  REQUIRE(batches.wait_for(kBatches, kHang));

  // Nothing is in flight now but the stuck write. A new call waits behind it, so it arms no
  // timer of its own; it must still time out, with its bytes withdrawn.
  const ClientCounters before = client->counters();
  CallbackLatch answered;
  ErrorCode code = ErrorCode::kOk;
  client->acquire_async("stall:after", per_minute(5), 1, [&](Result<Decision> r) {
    code = r.code();
    answered.count_down();
  });
  REQUIRE(answered.wait_for(1, kHang));
  CHECK(code == ErrorCode::kTimeout);
  const ClientCounters after = client->counters();
  CHECK(after.withdrawn == before.withdrawn + 1);
  CHECK(node.acquires() == 0);
}

}  // namespace
}  // namespace sluice::client
