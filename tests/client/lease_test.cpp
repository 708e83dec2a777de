// Leases of hot keys through the client and the in-process daemon, on the manual clock both
// share (docs/CLIENT.md section 10, "Leases"): a key asked for often enough is leased, its
// decisions are paid from the lease with no request at the server, what is left when the lease
// ends is given back and credited; and the proof: a hot key hammered by four gateways
// is admitted at most its limit per window, with at least ten times fewer requests at the
// server than without leases.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/client/test_support.h"

namespace sluice::client::testing {
namespace {

using namespace std::chrono_literals;

Rule fixed(std::uint32_t limit, std::uint64_t period_ms) {
  return Rule{Algorithm::kFixedWindow, limit, period_ms, 0};
}

// A gateway's client: the local layer as by default (leases included), on the server's clock.
ClientOptions gateway(const std::string& address, ManualClock& clock, std::uint32_t gateways,
                      bool leases) {
  ClientOptions options = options_for(address);
  const ClientOptions defaults;
  options.failure_policy = FailurePolicy::kReport;  // an error is an error here
  options.blocked_keys = defaults.blocked_keys;
  options.metrics = true;
  options.gateways = gateways;
  options.lease_duration = leases ? defaults.lease_duration : 0ms;
  options.clock = &clock;
  return options;
}

// What the server was asked: every item it decided (a lease is one), and the give-backs.
std::uint64_t server_requests(Client& client) {
  return stat(client, "total.allowed") + stat(client, "total.denied") +
         stat(client, "total.give_backs");
}

// Waits (bounded) until the client has no lease running and every give-back is answered.
void wait_for_give_backs(Client& client, std::uint64_t returned) {
  for (int i = 0; i < 500; ++i) {
    const ClientCounters c = client.counters();
    if (c.returned_units >= returned && stat(client, "total.give_backs") >= 1) return;
    std::this_thread::sleep_for(10ms);
  }
  FAIL("the give-back never reached the server");
}

TEST_CASE(
    "a hot key is leased, paid from its lease with no request at the server, and what is "
    "left is given back when the lease ends",
    "[lease]") {
  TestServer server;
  auto client = connect_or_fail(gateway(server.address(), server.clock(), 1, true));
  const Rule rule = fixed(1000, 60'000);  // leases of 1000 / 10 = 100 units
  // 16 requests make the key hot: the 16th asks for a lease and pays its own unit from it.
  for (int i = 0; i < 16; ++i) {
    Result<Decision> d = client->acquire("hot", rule);
    REQUIRE(d.ok());
    CHECK(d->allowed);
    CHECK(d->source == DecisionSource::kCluster);
  }
  CHECK(stat(*client, "total.leases") == 1);
  CHECK(stat(*client, "total.leased_units") == 100);
  const std::uint64_t asked = server_requests(*client);
  CHECK(asked == 16);
  // The next 60 come from the lease: the server sees none of them, and the headers count the
  // lease's units as remaining.
  for (int i = 0; i < 60; ++i) {
    Result<Decision> d = client->acquire("hot", rule);
    REQUIRE(d.ok());
    CHECK(d->allowed);
    CHECK(d->source == DecisionSource::kLease);
    CHECK(d->remaining == 1000 - 16 - 99 + (99 - 1 - static_cast<std::uint64_t>(i)));
    CHECK(d->retry_after_ms == 0);
    CHECK(d->reset_after_ms > 0);
  }
  CHECK(server_requests(*client) == asked);
  // A peek is never paid from a lease: it asks the server, which counts the lease's units as
  // spent.
  Result<Decision> peek = client->peek("hot", rule);
  REQUIRE(peek.ok());
  CHECK(peek->source == DecisionSource::kCluster);
  CHECK(peek->remaining == 1000 - 15 - 100 - 1);  // a peek's remaining is after its own unit
  // The lease's 100 ms pass: its 39 units go back, and the server credits them (the window is
  // the same).
  server.clock().advance_ms(101);
  wait_for_give_backs(*client, 39);
  CHECK(client->counters().returned_units == 39);
  CHECK(stat(*client, "total.credited_units") == 39);
  for (int i = 0; i < 100 && client->counters().credited_units < 39; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(client->counters().credited_units == 39);
  peek = client->peek("hot", rule);
  REQUIRE(peek.ok());
  CHECK(peek->remaining == 1000 - 15 - 1 - 60 - 1);  // exactly what was admitted
  const ClientCounters counters = client->counters();
  CHECK(counters.leases == 1);
  CHECK(counters.leased_units == 100);
  CHECK(counters.lease_decisions == 60);
}

TEST_CASE(
    "a fixed window's lease ends with its window, and its units are not given back to the "
    "next one",
    "[lease]") {
  TestServer server;
  auto client = connect_or_fail(gateway(server.address(), server.clock(), 1, true));
  const Rule rule = fixed(1000, 1000);
  // 50 ms before the window ends: the lease lasts 50 ms, not 100.
  const std::uint64_t into = (kStartNs / 1'000'000) % 1000;
  server.clock().advance_ms(950 - into);
  for (int i = 0; i < 16; ++i) REQUIRE(client->acquire("edge", rule).ok());
  REQUIRE(stat(*client, "total.leases") == 1);
  Result<Decision> d = client->acquire("edge", rule);
  REQUIRE(d.ok());
  CHECK(d->source == DecisionSource::kLease);
  server.clock().advance_ms(50);  // the next window
  d = client->acquire("edge", rule);
  REQUIRE(d.ok());
  CHECK(d->source == DecisionSource::kCluster);  // the lease ended with its window
  CHECK(d->remaining == 999);                    // a new window, its first unit
  // What it gave back came after its window: nothing credited.
  for (int i = 0; i < 500 && client->counters().returned_units == 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(client->counters().returned_units == 98);
  // The give-back reaches the server, which credits nothing.
  for (int i = 0; i < 500 && stat(*client, "total.give_backs") == 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(stat(*client, "total.give_backs") == 1);
  CHECK(stat(*client, "total.credited_units") == 0);
}

TEST_CASE("a reset key's lease is dropped: the next request is the cluster's", "[lease]") {
  TestServer server;
  auto client = connect_or_fail(gateway(server.address(), server.clock(), 1, true));
  const Rule rule = fixed(1000, 60'000);
  for (int i = 0; i < 16; ++i) REQUIRE(client->acquire("reset", rule).ok());
  Result<Decision> d = client->acquire("reset", rule);
  REQUIRE(d.ok());
  REQUIRE(d->source == DecisionSource::kLease);
  REQUIRE(client->reset("reset").ok());
  d = client->acquire("reset", rule);
  REQUIRE(d.ok());
  CHECK(d->source == DecisionSource::kCluster);
  // A fresh key at the server: the lease's units were not kept (nor given back).
  CHECK(client->counters().returned_units == 0);
}

// The proof, both ways in one run: four gateways hammer one key for five windows, with
// leases and without (the blocked-key cache on in both), on the server's clock.
struct Hammered {
  std::uint64_t max_admitted = 0;  // in one window, over the gateways
  std::uint64_t min_admitted = ~std::uint64_t{0};
  std::uint64_t requests = 0;  // at the server
  std::uint64_t lease_decisions = 0;
};

Hammered hammer(bool leases) {
  TestServer server;
  constexpr int kGateways = 4;
  constexpr std::uint32_t kLimit = 4000;  // leases of 4000 / (4 x 10) = 100 units
  constexpr int kWindows = 5;
  constexpr int kCallsPerWindow = 2000;  // per gateway: twice the whole limit over the four
  const Rule rule = fixed(kLimit, 1000);
  std::vector<std::unique_ptr<Client>> clients;
  for (int g = 0; g < kGateways; ++g) {
    clients.push_back(
        connect_or_fail(gateway(server.address(), server.clock(), kGateways, leases)));
  }
  // At the start of a window.
  server.clock().advance_ms(1000 - (kStartNs / 1'000'000) % 1000);
  Hammered out;
  for (int w = 0; w < kWindows; ++w) {
    std::atomic<std::uint64_t> admitted{0};
    std::atomic<std::uint64_t> errors{0};
    std::vector<std::thread> threads;
    for (int g = 0; g < kGateways; ++g) {
      threads.emplace_back([&, g] {
        for (int i = 0; i < kCallsPerWindow; ++i) {
          Result<Decision> d = clients[static_cast<std::size_t>(g)]->acquire("hammered", rule);
          if (!d.ok()) {
            ++errors;
          } else if (d->allowed) {
            ++admitted;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    CHECK(errors.load() == 0);
    out.max_admitted = std::max(out.max_admitted, admitted.load());
    out.min_admitted = std::min(out.min_admitted, admitted.load());
    server.clock().advance_ms(1000);
  }
  out.requests = server_requests(*clients[0]);
  for (auto& c : clients) out.lease_decisions += c->counters().lease_decisions;
  return out;
}

TEST_CASE(
    "four gateways hammering one key admit at most its limit per window, with ten times "
    "fewer requests at the server than without leases",
    "[lease]") {
  const Hammered with = hammer(true);
  const Hammered without = hammer(false);
  std::printf(
      "LEASES: 4 gateways x 2000 calls x 5 windows on a key of 4000 a window: with leases %llu "
      "requests at the server (%llu decisions paid from leases), admitted %llu..%llu a window; "
      "without %llu requests, admitted %llu..%llu a window; %.1fx fewer\n",
      static_cast<unsigned long long>(with.requests),
      static_cast<unsigned long long>(with.lease_decisions),
      static_cast<unsigned long long>(with.min_admitted),
      static_cast<unsigned long long>(with.max_admitted),
      static_cast<unsigned long long>(without.requests),
      static_cast<unsigned long long>(without.min_admitted),
      static_cast<unsigned long long>(without.max_admitted),
      static_cast<double>(without.requests) / static_cast<double>(with.requests));
  CHECK(with.max_admitted <= 4000);
  CHECK(without.max_admitted <= 4000);
  CHECK(without.min_admitted == 4000);
  CHECK(with.lease_decisions > 0);
  CHECK(with.requests * 10 <= without.requests);
}

}  // namespace
}  // namespace sluice::client::testing
