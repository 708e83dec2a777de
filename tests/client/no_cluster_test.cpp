// A client connected while no seed answers (ClientOptions::require_cluster_at_connect false):
// every call answers within its deadline from its failure policy (fail_open from the local
// limiter at limit / gateways, fail_closed denied, report the error naming every seed), counted
// as any fallback is; then a node starts on a seed's port and the client routes to it within
// 1 s, with no call made by hand to reconnect. With require_cluster_at_connect, or a seed that
// refuses the token, connect() still fails. The wait between rounds of connects (SeedBackoff)
// is tested alone.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/seed_finder.h"
#include "tests/client/test_support.h"
#include "tests/support/ports.h"

namespace sluice::client::testing {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr auto kDeadline = 200ms;  // each call's timeout in these tests

// A loopback address nothing listens on, reserved for this test process (tests/support/ports.h):
// a node may be started on it later.
std::string unused_address() { return "127.0.0.1:" + std::to_string(test::free_port_block(1)); }

Rule fixed(std::uint32_t limit, std::uint64_t period_ms) {
  return Rule{Algorithm::kFixedWindow, limit, period_ms, 0};
}

ClientOptions seedless(std::vector<std::string> servers, ManualClock& clock, FailurePolicy policy) {
  ClientOptions options = options_for(servers.front());
  options.servers = std::move(servers);
  options.timeout = kDeadline;
  options.connect_timeout = kDeadline;
  options.failure_policy = policy;
  options.metrics = true;
  options.clock = &clock;
  return options;
}

long long elapsed_ms(SteadyClock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - since).count();
}

// The real daemon in-process on `port` (its shards' ports ephemeral), on `clock`.
class NodeOnPort {
 public:
  NodeOnPort(std::uint16_t port, const ManualClock& clock) : server_(config(port, clock)) {
    server_.start();
  }

 private:
  static server::ServerConfig config(std::uint16_t port, const ManualClock& clock) {
    server::ServerConfig c;
    c.bind = "127.0.0.1";
    c.port = port;
    c.ephemeral_shard_ports = true;
    c.shards = 2;
    c.max_memory = 16u << 20;
    c.stats_refresh = std::chrono::milliseconds(0);
    c.clock = &clock;
    return c;
  }
  server::Server server_;
};

std::uint16_t port_of(const std::string& address) {
  return static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

TEST_CASE("the wait between seed rounds doubles from 50 ms to 500 ms, each within +-20%",
          "[no-cluster]") {
  detail::SeedBackoff lowest;
  detail::SeedBackoff highest;
  detail::SeedBackoff middle;
  const std::uint64_t bases[] = {50'000'000,  100'000'000, 200'000'000, 400'000'000,
                                 500'000'000, 500'000'000, 500'000'000};
  for (const std::uint64_t base : bases) {
    INFO("base " << base << " ns");
    // random % (2 * base / 5 + 1): 0 is the lowest wait, 2 * base / 5 the highest.
    CHECK(lowest.next_wait_ns(0) == base - base / 5);
    CHECK(highest.next_wait_ns(2 * base / 5) == base + base / 5);
    const std::uint64_t wait = middle.next_wait_ns(0x9e3779b97f4a7c15ull);
    CHECK(wait >= base - base / 5);
    CHECK(wait <= base + base / 5);
  }
}

TEST_CASE(
    "fail_open with no node running: connect succeeds, the local limiter answers within the "
    "deadline, and the client moves to a node within 1 s of its start",
    "[no-cluster]") {
  ManualClock clock(kStartNs);
  const std::string address = unused_address();
  const std::string other = unused_address();
  ClientOptions options = seedless({address, other}, clock, FailurePolicy::kOpen);
  options.gateways = 4;
  auto connected = Client::connect(options);
  REQUIRE(connected.ok());
  Client& client = **connected;
  CHECK_FALSE(client.seeded());
  CHECK(client.server_info().endpoint.empty());
  const Rule rule = fixed(40, 60'000);  // 10 per gateway

  int allowed = 0;
  for (int i = 0; i < 30; ++i) {
    const auto start = SteadyClock::now();
    Result<Decision> d = client.acquire("hot", rule);
    const long long took = elapsed_ms(start);
    INFO("call " << i << " took " << took << " ms");
    REQUIRE(d.ok());
    CHECK(d->source == DecisionSource::kLocalFallback);
    CHECK(d->limit == 10);         // the local limiter's capacity
    CHECK(d->policy_quota == 40);  // the rule's
    CHECK(took < kDeadline.count());
    allowed += d->allowed ? 1 : 0;
  }
  CHECK(allowed == 10);  // the local limit, enforced

  // The async and batch paths take the same way.
  CallbackLatch latch;
  Result<Decision> async_result(ErrorCode::kTimeout, "not called");
  client.acquire_async(AcquireRequest{"cold", rule}, [&](Result<Decision> r) {
    async_result = std::move(r);
    latch.count_down();
  });
  REQUIRE(latch.wait_for(1, kHang));
  REQUIRE(async_result.ok());
  CHECK(async_result->source == DecisionSource::kLocalFallback);
  CHECK(async_result->allowed);
  const AcquireRequest items[] = {{"a", rule}, {"b", rule}, {"c", rule}};
  for (const Result<Decision>& r : client.acquire_batch(items)) {
    REQUIRE(r.ok());
    CHECK(r->source == DecisionSource::kLocalFallback);
    CHECK(r->allowed);
  }

  // Counted as every fallback decision is.
  CHECK(client.counters().fallback_decisions == 34);
  const ClientMetrics metrics = client.metrics();
  REQUIRE(metrics.rules.size() == 1);
  const auto& by_source =
      metrics.rules[0].decisions[static_cast<std::size_t>(DecisionSource::kLocalFallback)];
  CHECK(by_source[1] == 14);  // allowed
  CHECK(by_source[0] == 20);  // denied

  // Node-level calls have nobody to ask: the error names every seed.
  Result<std::chrono::nanoseconds> ping = client.ping();
  REQUIRE_FALSE(ping.ok());
  CHECK(ping.code() == ErrorCode::kConnectionFailed);
  CHECK_THAT(ping.status().message(), Catch::Contains(address) && Catch::Contains(other));

  // The gateway goes on serving from the fallback until the rounds are at their longest
  // (SeedBackoff: 500 ms apart, +-20%, after 1.35 s at most), every call within its deadline.
  const auto outage = SteadyClock::now();
  while (elapsed_ms(outage) < 1500) {
    const auto start = SteadyClock::now();
    Result<Decision> d = client.peek("hot", rule);
    REQUIRE(d.ok());
    CHECK(d->source == DecisionSource::kLocalFallback);
    CHECK(elapsed_ms(start) < kDeadline.count());
    std::this_thread::sleep_for(10ms);
  }
  CHECK_FALSE(client.seeded());

  // A node starts on the second seed's port: the client finds it in the background, and a call
  // is decided there within 1 s, with nothing done by hand.
  NodeOnPort node(port_of(other), clock);
  const auto started = SteadyClock::now();
  long long moved_after = -1;
  while (elapsed_ms(started) < std::chrono::milliseconds(kHang).count()) {
    Result<Decision> d = client.acquire("fresh", rule);
    REQUIRE(d.ok());
    if (d->source == DecisionSource::kCluster) {
      moved_after = elapsed_ms(started);
      CHECK(d->limit == 40);  // the rule's, as the node decides it
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  INFO("moved to the node after " << moved_after << " ms");
  REQUIRE(moved_after >= 0);
  CHECK(moved_after < 1000);
  CHECK(client.seeded());
  CHECK(client.server_info().endpoint == other);
  // The node counted the call: its STATS, asked over the seed it now has.
  CHECK(stat(client, "total.allowed") == 1);
  Result<Decision> next = client.acquire("fresh", rule);
  REQUIRE(next.ok());
  CHECK(next->source == DecisionSource::kCluster);
  CHECK(next->remaining == 38);
}

TEST_CASE("fail_closed with no node running denies each call at once, retry_after its period",
          "[no-cluster]") {
  ManualClock clock(kStartNs);
  auto connected = Client::connect(seedless({unused_address()}, clock, FailurePolicy::kClosed));
  REQUIRE(connected.ok());
  Client& client = **connected;
  const Rule rule = fixed(40, 60'000);
  for (int i = 0; i < 5; ++i) {
    const auto start = SteadyClock::now();
    Result<Decision> d = client.acquire("k", rule);
    CHECK(elapsed_ms(start) < kDeadline.count());
    REQUIRE(d.ok());
    CHECK_FALSE(d->allowed);
    CHECK(d->source == DecisionSource::kLocalFallback);
    CHECK(d->retry_after_ms == 60'000);
  }
  CHECK(client.counters().fallback_decisions == 5);
}

TEST_CASE("report with no node running returns the error naming every seed, within the deadline",
          "[no-cluster]") {
  ManualClock clock(kStartNs);
  const std::string first = unused_address();
  const std::string second = unused_address();
  auto connected = Client::connect(seedless({first, second}, clock, FailurePolicy::kReport));
  REQUIRE(connected.ok());
  Client& client = **connected;
  const Rule rule = fixed(40, 60'000);

  const auto start = SteadyClock::now();
  Result<Decision> d = client.acquire("k", rule);
  CHECK(elapsed_ms(start) < kDeadline.count());
  REQUIRE_FALSE(d.ok());
  CHECK(d.code() == ErrorCode::kConnectionFailed);
  const std::string& message = d.status().message();
  CHECK_THAT(message, Catch::StartsWith("no seed answered: connect to " + first + " failed: "));
  CHECK_THAT(message, Catch::Contains("; connect to " + second + " failed: "));

  // A request's own policy wins over the client's, here too.
  AcquireRequest open{"k", rule};
  open.failure_policy = FailurePolicy::kOpen;
  Result<Decision> local = client.acquire(open);
  REQUIRE(local.ok());
  CHECK(local->source == DecisionSource::kLocalFallback);
  CHECK(client.counters().fallback_decisions == 1);
  CHECK(client.reset("k").code() == ErrorCode::kConnectionFailed);
}

TEST_CASE("require_cluster_at_connect fails connect, naming every seed and why", "[no-cluster]") {
  ManualClock clock(kStartNs);
  const std::string first = unused_address();
  const std::string second = unused_address();
  ClientOptions options = seedless({first, second}, clock, FailurePolicy::kOpen);
  options.require_cluster_at_connect = true;
  auto connected = Client::connect(options);
  REQUIRE_FALSE(connected.ok());
  CHECK(connected.code() == ErrorCode::kConnectionFailed);
  CHECK_THAT(connected.status().message(),
             Catch::StartsWith("no seed answered: connect to " + first + " failed: ") &&
                 Catch::Contains("; connect to " + second + " failed: "));
}

TEST_CASE("a seed that refuses the token fails connect even when the others are down",
          "[no-cluster]") {
  ManualClock clock(kStartNs);
  TestServer guarded("a-token-of-sixteen-bytes");
  ClientOptions options =
      seedless({unused_address(), guarded.address()}, clock, FailurePolicy::kOpen);
  options.auth_token = "the-wrong-token-sixteen";
  auto connected = Client::connect(options);
  REQUIRE_FALSE(connected.ok());
  CHECK(connected.code() == ErrorCode::kUnauthenticated);
}

TEST_CASE("a client on the caller's io_context with no node running answers and closes cleanly",
          "[no-cluster]") {
  ManualClock clock(kStartNs);
  boost::asio::io_context io;
  auto connected = Client::connect(seedless({unused_address()}, clock, FailurePolicy::kClosed), io);
  REQUIRE(connected.ok());
  Client& client = **connected;
  Result<Decision> answer(ErrorCode::kTimeout, "not called");
  client.acquire_async(AcquireRequest{"k", fixed(10, 1000)},
                       [&](Result<Decision> r) { answer = std::move(r); });
  // Runs a seed round or two meanwhile; the answer does not wait for them.
  io.run_for(200ms);
  REQUIRE(answer.ok());
  CHECK(answer->source == DecisionSource::kLocalFallback);
  CHECK_FALSE(answer->allowed);
  client.close();
  io.restart();
  const auto start = SteadyClock::now();
  io.run();  // returns: the client left no timer behind
  CHECK(elapsed_ms(start) < std::chrono::milliseconds(kHang).count());
}

}  // namespace
}  // namespace sluice::client::testing
