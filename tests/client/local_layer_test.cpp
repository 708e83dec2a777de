// The client's local layer against the real daemon (in-process, on a manual clock that the
// client's layer shares), reached through a fault proxy of our own (tests/support/fault_proxy.h):
// with the node black-holed or dropped, fail_open answers from the local limiter at
// limit / gateways and fail_closed denies, each call within its deadline; once the breaker
// opens nothing is sent and no call waits for its deadline; when the node answers again the
// decisions are the cluster's within 1 s. The blocked-key cache answers a denied key with no
// request at the server until its retry_after has passed, per key, rule and cost.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "client/metrics.h"
#include "tests/client/test_support.h"
#include "tests/support/fault_proxy.h"

namespace sluice::client::testing {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr auto kDeadline = 200ms;  // each call's timeout in these tests

Rule fixed(std::uint32_t limit, std::uint64_t period_ms) {
  return Rule{Algorithm::kFixedWindow, limit, period_ms, 0};
}

// Everything through one public port (the proxy's): no shard connection goes around it.
ClientOptions layered(const std::string& address, ManualClock& clock, FailurePolicy policy) {
  ClientOptions options = options_for(address, /*shard_aware=*/false);
  options.timeout = kDeadline;
  options.failure_policy = policy;
  options.blocked_keys = ClientOptions{}.blocked_keys;
  options.breaker_failures = ClientOptions{}.breaker_failures;
  options.metrics = true;
  options.clock = &clock;
  return options;
}

long long elapsed_ms(SteadyClock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - since).count();
}

// Waits (bounded) until a call for `key` is decided by the cluster again; the time it took.
long long wait_for_cluster(Client& client, const std::string& key, const Rule& rule) {
  const auto start = SteadyClock::now();
  for (int i = 0; i < 400; ++i) {
    Result<Decision> d = client.peek(key, rule);
    REQUIRE(d.ok());
    if (d->source == DecisionSource::kCluster) return elapsed_ms(start);
    std::this_thread::sleep_for(5ms);
  }
  FAIL("decisions never went back to the cluster");
  return 0;
}

TEST_CASE(
    "fail_open with the node black-holed: the local limiter at limit / gateways answers "
    "within the deadline, then at once once the breaker opens, and the cluster again "
    "after the node returns",
    "[local-layer]") {
  TestServer server;
  test::FaultProxy proxy(server.server().port());
  ClientOptions options = layered(proxy.address(), server.clock(), FailurePolicy::kOpen);
  options.gateways = 4;
  auto client = connect_or_fail(options);
  const Rule rule = fixed(40, 60'000);  // 10 per gateway

  // Healthy: the cluster decides.
  Result<Decision> first = client->acquire("hot", rule);
  REQUIRE(first.ok());
  CHECK(first->source == DecisionSource::kCluster);
  CHECK(first->limit == 40);

  proxy.black_hole();
  int allowed = 0;
  int waited = 0;  // calls that waited for their deadline (sent, then timed out)
  long long slowest_after_open = 0;
  for (int i = 0; i < 30; ++i) {
    const auto start = SteadyClock::now();
    Result<Decision> d = client->acquire("hot", rule);
    const long long took = elapsed_ms(start);
    INFO("call " << i << " took " << took << " ms");
    REQUIRE(d.ok());  // never the error
    CHECK(d->source == DecisionSource::kLocalFallback);
    CHECK(d->limit == 10);                      // the local limiter's capacity
    CHECK(d->policy_quota == 40);               // the rule's, for RateLimit-Policy
    CHECK(took < 2 * kDeadline.count() + 500);  // within the deadline (and a slow build's slack)
    allowed += d->allowed ? 1 : 0;
    if (took >= kDeadline.count()) ++waited;
    if (i >= 5) slowest_after_open = std::max(slowest_after_open, took);
  }
  // Exactly the local limit over the outage, whatever the cluster had admitted before.
  CHECK(allowed == 10);
  // Five calls waited for their deadline; then the breaker opened and no call waited again.
  CHECK(waited == 5);
  CHECK(slowest_after_open < kDeadline.count() / 2);
  CHECK(client->counters().node_down_events == 1);
  CHECK(client->counters().fallback_decisions == 30);
  // The breaker is open now, on the node the client routes to (the proxy's address).
  CHECK(client->counters().nodes_down == 1);
  const std::vector<NodeBreaker> open = client->node_breakers();
  REQUIRE(open.size() == 1);
  CHECK(open[0].address == proxy.address());
  CHECK(open[0].down);

  // The node returns: within 1 s of it answering (the probe's backoff is at most 625 ms), the
  // cluster decides again.
  proxy.pass();
  const long long back_after = wait_for_cluster(*client, "hot", rule);
  INFO("back to the cluster after " << back_after << " ms");
  CHECK(back_after < 1000);
  CHECK(client->counters().node_up_events == 1);
  CHECK(client->counters().nodes_down == 0);
  CHECK_FALSE(client->node_breakers().at(0).down);
  Result<Decision> again = client->acquire("hot", rule);
  REQUIRE(again.ok());
  CHECK(again->source == DecisionSource::kCluster);
  CHECK(again->limit == 40);
}

TEST_CASE("fail_closed with the node unreachable denies with retry_after the rule's period",
          "[local-layer]") {
  TestServer server;
  test::FaultProxy proxy(server.server().port());
  auto client = connect_or_fail(layered(proxy.address(), server.clock(), FailurePolicy::kClosed));
  const Rule rule = fixed(5, 2'000);
  REQUIRE(client->acquire("k", rule).ok());

  SECTION("black-holed") { proxy.black_hole(); }
  SECTION("connections dropped") { proxy.drop(); }
  for (int i = 0; i < 8; ++i) {
    Result<Decision> d = client->acquire("k", rule);
    REQUIRE(d.ok());
    CHECK_FALSE(d->allowed);
    CHECK(d->source == DecisionSource::kLocalFallback);
    CHECK(d->retry_after_ms == 2'000);
    CHECK(d->retry_after_seconds() == std::optional<std::uint64_t>(2));
  }
  // A request that names its own policy is answered by it.
  AcquireRequest open{"k", rule};
  open.failure_policy = FailurePolicy::kOpen;
  Result<Decision> opened = client->acquire(open);
  REQUIRE(opened.ok());
  CHECK(opened->allowed);
  CHECK(opened->source == DecisionSource::kLocalFallback);
  AcquireRequest report{"k", rule};
  report.failure_policy = FailurePolicy::kReport;
  Result<Decision> reported = client->acquire(report);
  REQUIRE_FALSE(reported.ok());
  // The breaker opened after five failures: the node's error comes at once.
  CHECK(client->counters().node_down_events == 1);
  CHECK(reported.status().code() == ErrorCode::kUnavailable);
  // The caller's own errors are never turned into a decision.
  Result<Decision> empty = client->acquire("", rule);
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.status().code() == ErrorCode::kInvalidKey);
}

TEST_CASE(
    "a key hammered at 10x its limit: after the first denial the server sees no request "
    "for it until retry_after has passed",
    "[local-layer]") {
  TestServer server;
  server.clock().set_ns(kStartNs - kStartNs % 1'000'000'000);  // a window starts here
  auto client = connect_or_fail(layered(server.address(), server.clock(), FailurePolicy::kOpen));
  const Rule rule = fixed(5, 1'000);
  std::map<DecisionSource, int> by_source;
  int allowed = 0;
  for (int i = 0; i < 50; ++i) {
    Result<Decision> d = client->acquire("hammered", rule);
    REQUIRE(d.ok());
    ++by_source[d->source];
    allowed += d->allowed ? 1 : 0;
    if (d->source == DecisionSource::kBlockedCache) {
      CHECK_FALSE(d->allowed);
      CHECK(d->retry_after_ms == 1'000);  // the manual clock stands still
    }
  }
  CHECK(allowed == 5);
  CHECK(by_source[DecisionSource::kCluster] == 6);  // five allowed, one denied
  CHECK(by_source[DecisionSource::kBlockedCache] == 44);
  CHECK(stat(*client, "total.allowed") == 5);
  CHECK(stat(*client, "total.denied") == 1);
  CHECK(client->counters().blocked_cache_hits == 44);

  // Retry-After counts down with the clock; a request of another rule, another key, or a
  // cheaper cost than the denied one is not answered from the cache.
  server.clock().advance_ms(400);
  Result<Decision> later = client->acquire("hammered", rule);
  REQUIRE(later.ok());
  CHECK(later->source == DecisionSource::kBlockedCache);
  CHECK(later->retry_after_ms == 600);
  Result<Decision> other_rule = client->acquire("hammered", fixed(6, 1'000));
  REQUIRE(other_rule.ok());
  CHECK(other_rule->source == DecisionSource::kCluster);
  Result<Decision> other_key = client->acquire("calm", rule);
  REQUIRE(other_key.ok());
  CHECK(other_key->source == DecisionSource::kCluster);
  CHECK(stat(*client, "total.denied") == 1);

  // Once retry_after has passed, the key goes to the server again, which admits it.
  server.clock().advance_ms(600);
  Result<Decision> after = client->acquire("hammered", rule);
  REQUIRE(after.ok());
  CHECK(after->source == DecisionSource::kCluster);
  CHECK(after->allowed);
  CHECK(stat(*client, "total.allowed") == 8);  // 5, "hammered" under 6/s, "calm", this one
}

TEST_CASE(
    "the blocked-key cache answers async calls and batch items too, and reset forgets the "
    "key",
    "[local-layer]") {
  TestServer server;
  auto client = connect_or_fail(layered(server.address(), server.clock(), FailurePolicy::kOpen));
  const Rule rule = per_minute(2);
  for (int i = 0; i < 3; ++i) REQUIRE(client->acquire("b", rule).ok());  // the third is denied
  REQUIRE(stat(*client, "total.denied") == 1);

  CallbackLatch latch;
  DecisionSource async_source = DecisionSource::kCluster;
  client->acquire_async("b", rule, 1, [&](Result<Decision> d) {
    if (d.ok()) async_source = d->source;
    latch.count_down();
  });
  REQUIRE(latch.wait_for(1, kHang));
  CHECK(async_source == DecisionSource::kBlockedCache);

  const std::vector<AcquireRequest> items = {AcquireRequest{"b", rule},
                                             AcquireRequest{"fresh", rule},
                                             AcquireRequest{"b", rule, 1, /*peek=*/true}};
  const std::vector<Result<Decision>> results = client->acquire_batch(items);
  REQUIRE(results.size() == 3);
  for (const auto& r : results) REQUIRE(r.ok());
  CHECK(results[0]->source == DecisionSource::kBlockedCache);
  CHECK(results[1]->source == DecisionSource::kCluster);
  CHECK(results[1]->allowed);
  CHECK(results[2]->source == DecisionSource::kBlockedCache);
  CHECK(stat(*client, "total.denied") == 1);

  REQUIRE(client->reset("b").ok());
  Result<Decision> after_reset = client->acquire("b", rule);
  REQUIRE(after_reset.ok());
  CHECK(after_reset->source == DecisionSource::kCluster);
  CHECK(after_reset->allowed);
}

TEST_CASE(
    "metrics count decisions by rule, source and outcome, errors, node events and the "
    "cluster's latencies",
    "[local-layer]") {
  TestServer server;
  test::FaultProxy proxy(server.server().port());
  auto client = connect_or_fail(layered(proxy.address(), server.clock(), FailurePolicy::kOpen));
  const Rule two = per_minute(2);
  const Rule five = fixed(5, 60'000);
  for (int i = 0; i < 4; ++i) REQUIRE(client->acquire("m", two).ok());  // 2 allowed, 1 + 1 cache
  for (int i = 0; i < 3; ++i) REQUIRE(client->acquire("n", five).ok());
  AcquireRequest report{"m", five};
  report.failure_policy = FailurePolicy::kReport;
  proxy.black_hole();
  REQUIRE_FALSE(client->acquire(report).ok());                           // a timeout, reported
  for (int i = 0; i < 2; ++i) REQUIRE(client->acquire("o", five).ok());  // the fallback's

  const ClientMetrics m = client->metrics();
  REQUIRE(m.rules.size() == 2);
  const auto of = [&](const Rule& rule) -> const RuleDecisions& {
    for (const RuleDecisions& r : m.rules) {
      if (r.rule == rule) return r;
    }
    FAIL("no metrics for a rule");
    return m.rules.front();
  };
  const auto at = [](DecisionSource s) { return static_cast<std::size_t>(s); };
  const RuleDecisions& m_two = of(two);
  CHECK(m_two.decisions[at(DecisionSource::kCluster)][1] == 2);
  CHECK(m_two.decisions[at(DecisionSource::kCluster)][0] == 1);
  CHECK(m_two.decisions[at(DecisionSource::kBlockedCache)][0] == 1);
  const RuleDecisions& m_five = of(five);
  CHECK(m_five.decisions[at(DecisionSource::kCluster)][1] == 3);
  CHECK(m_five.decisions[at(DecisionSource::kLocalFallback)][1] == 2);
  CHECK(m.other_rules == 0);
  REQUIRE(m.errors.size() == 1);
  CHECK(m.errors[0].first == ErrorCode::kTimeout);
  CHECK(m.errors[0].second == 1);
  // Six decisions came from the cluster (the denial included): each in the histogram once.
  CHECK(m.cluster_calls == 6);
  std::uint64_t in_buckets = 0;
  std::uint64_t bound = 0;
  for (const LatencyBucket& b : m.cluster_latency) {
    CHECK(b.upper_us > bound);  // in order
    bound = b.upper_us;
    in_buckets += b.count;
  }
  CHECK(in_buckets == 6);
  CHECK(m.node_down_events == client->counters().node_down_events);
}

TEST_CASE("latency buckets are one microsecond wide up to 16 us, then four per power of two",
          "[local-layer]") {
  using detail::latency_bucket;
  using detail::latency_bucket_upper_us;
  for (std::uint64_t us = 0; us < 16; ++us) {
    CHECK(latency_bucket(us) == us);
    CHECK(latency_bucket_upper_us(us) == us + 1);
  }
  CHECK(latency_bucket(16) == 16);
  CHECK(latency_bucket_upper_us(16) == 20);
  CHECK(latency_bucket(19) == 16);
  CHECK(latency_bucket(20) == 17);
  CHECK(latency_bucket(31) == 19);
  CHECK(latency_bucket(32) == 20);
  CHECK(latency_bucket_upper_us(20) == 40);
  // Every value lands in the bucket whose bounds hold it.
  for (std::uint64_t us = 1; us < (1ull << 27); us = us * 3 / 2 + 1) {
    const std::size_t b = latency_bucket(us);
    INFO("us " << us << " bucket " << b);
    CHECK(us < latency_bucket_upper_us(b));
    if (b > 0) CHECK(us >= latency_bucket_upper_us(b - 1));
  }
  CHECK(latency_bucket(UINT64_MAX) == detail::kLatencyBuckets - 1);
  CHECK(latency_bucket_upper_us(detail::kLatencyBuckets - 1) == UINT64_MAX);
}

TEST_CASE("the local layer's options are checked at connect", "[local-layer]") {
  TestServer server;
  ClientOptions options = layered(server.address(), server.clock(), FailurePolicy::kOpen);
  options.gateways = 0;
  CHECK(Client::connect(options).status().code() == ErrorCode::kInvalidArgument);
  options.gateways = 65536;
  CHECK(Client::connect(options).status().code() == ErrorCode::kInvalidArgument);
  options.gateways = 65535;
  CHECK(Client::connect(options).ok());
  options.fallback_keys = 0;
  CHECK(Client::connect(options).status().code() == ErrorCode::kInvalidArgument);
  CHECK(parse_failure_policy("open") == FailurePolicy::kOpen);
  CHECK(parse_failure_policy("closed") == FailurePolicy::kClosed);
  CHECK(parse_failure_policy("report") == FailurePolicy::kReport);
  CHECK_FALSE(parse_failure_policy("Open").has_value());
  CHECK(failure_policy_name(FailurePolicy::kClosed) == "closed");
  CHECK(source_name(DecisionSource::kLocalFallback) == "local_fallback");
}

}  // namespace
}  // namespace sluice::client::testing
