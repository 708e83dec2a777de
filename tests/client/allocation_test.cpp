// The hot path allocates nothing once buffers have grown: counted per thread (the caller's
// and the client's I/O thread) with a replaced global operator new. Skipped under
// AddressSanitizer, which owns operator new there.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // the replaced new/delete pair up
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/node_connection.h"
#include "tests/client/test_support.h"
#include "tests/integration/test_cluster.h"

#if defined(__SANITIZE_ADDRESS__)
#define SLUICE_COUNT_ALLOCATIONS 0
#else
#define SLUICE_COUNT_ALLOCATIONS 1
#endif

#if SLUICE_COUNT_ALLOCATIONS
namespace {
thread_local std::uint64_t tl_allocations = 0;
// Every thread's: the caller's, the client's I/O thread's and the in-process server's.
std::atomic<std::uint64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  ++tl_allocations;
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace sluice::client {
namespace {

using namespace std::chrono_literals;
using testing::CallbackLatch;
using testing::connect_or_fail;
using testing::options_for;
using testing::TestServer;

Rule generous_rule() {
  Rule r;
  r.limit = 1'000'000;
  r.period_ms = 60'000;
  return r;
}

// The I/O thread's allocation count, read on that thread.
std::uint64_t io_thread_allocations(Client& client) {
  std::uint64_t count = 0;
  CallbackLatch latch;
  client.acquire_async("alloc:probe", generous_rule(), 1, [&count, &latch](Result<Decision>) {
    count = tl_allocations;
    latch.count_down();
  });
  latch.wait_for(1, 5s);
  return count;
}

const char* const kKeys[] = {"alloc:a", "alloc:b", "alloc:c", "alloc:d"};

TEST_CASE("sync acquires allocate nothing once warmed up") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  const Rule rule = generous_rule();
  for (int i = 0; i < 2000; ++i) (void)client->acquire(kKeys[i % 4], rule);

  const std::uint64_t io_before = io_thread_allocations(*client);
  const std::uint64_t caller_before = tl_allocations;
  int failures = 0;
  for (int i = 0; i < 1000; ++i) {
    if (!client->acquire(kKeys[i % 4], rule).ok()) ++failures;
  }
  const std::uint64_t caller_after = tl_allocations;
  const std::uint64_t io_after = io_thread_allocations(*client);
  CHECK(failures == 0);
  CHECK(caller_after - caller_before == 0);
  CHECK(io_after - io_before == 0);
}

TEST_CASE("async acquires in flight allocate nothing once warmed up") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  const Rule rule = generous_rule();
  auto burst = [&](std::size_t n, std::uint64_t* caller_allocations) {
    CallbackLatch latch;
    const std::uint64_t before = tl_allocations;
    for (std::size_t i = 0; i < n; ++i) {
      client->acquire_async(kKeys[i % 4], rule, 1,
                            [&latch](Result<Decision>) { latch.count_down(); });
    }
    if (caller_allocations != nullptr) *caller_allocations = tl_allocations - before;
    return latch.wait_for(n, 10s);
  };
  // Warm up with bigger bursts than the measured one, so the pending ring has grown.
  REQUIRE(burst(2000, nullptr));
  REQUIRE(burst(2000, nullptr));

  const std::uint64_t io_before = io_thread_allocations(*client);
  std::uint64_t caller = 0;
  REQUIRE(burst(1000, &caller));
  const std::uint64_t io_after = io_thread_allocations(*client);
  CHECK(caller == 0);
  CHECK(io_after - io_before == 0);
}

// Through a cluster map an acquire whose key is too long for the connection's copy (over
// ResendCopy::kKeyBytes) copies it into a pooled one-item batch, which the pool hands out in
// whatever order batches came back: a batch that has only seen shorter keys must not grow for a
// longer one (CI once caught one allocation this way among 100,000 decisions).
TEST_CASE("a clustered acquire allocates nothing for a key longer than any before it") {
  test::TestCluster cluster(2);
  auto client = connect_or_fail(options_for("127.0.0.1:" + std::to_string(cluster.port(0))));
  REQUIRE(client->node_count() == 2);
  const Rule rule = generous_rule();
  // Sync calls one at a time: the pool holds a single one-item batch, which sees only `shorter`.
  const std::string shorter(detail::ResendCopy::kKeyBytes + 1, 'k');
  for (int i = 0; i < 1000; ++i) REQUIRE(client->acquire(shorter, rule).ok());
  const std::string longest(protocol::kDefaultMaxKey, 'x');
  const std::uint64_t before = tl_allocations;
  const Result<Decision> decided = client->acquire(longest, rule);
  const std::uint64_t caller = tl_allocations - before;
  REQUIRE(decided.ok());
  CHECK(caller == 0);
}

struct SteadyAllocations {
  std::uint64_t process = 0;    // every thread's
  std::uint64_t caller = 0;     // the thread that makes the calls
  std::uint64_t io_thread = 0;  // the client's I/O thread
};

// 100,000 decisions after warm-up (single async acquires and async batches, pipelined, over
// 1,000 keys): the heap allocations during them, or fails the test.
SteadyAllocations steady_state_allocations(Client& client) {
  const Rule rule = generous_rule();
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back("steady:" + std::to_string(i));
  std::vector<AcquireRequest> batch;
  for (int i = 0; i < 50; ++i)
    batch.push_back(AcquireRequest{keys[static_cast<std::size_t>(i)], rule, 1});

  struct Tally {
    std::atomic<std::uint64_t> decided{0};
    std::atomic<std::uint64_t> failed{0};
    void add(const Result<Decision>& d) {
      (d.ok() ? decided : failed).fetch_add(1, std::memory_order_relaxed);
    }
  } tally;
  // One round: 250 single acquires and 5 batches of 50 in flight together = 500 decisions;
  // `scale` times that for the warm-up, so that every buffer and pool (the client's batches,
  // the server's output buffers) has grown past what a measured round can need, whatever the
  // timing.
  // Callbacks capture at most two pointers, so std::function stores them in place.
  auto round = [&](std::size_t r, std::size_t scale = 1) {
    CallbackLatch latch;
    for (std::size_t i = 0; i < 250 * scale; ++i) {
      client.acquire_async(keys[(r * 250 + i) % keys.size()], rule, 1,
                           [&tally, &latch](Result<Decision> d) {
                             tally.add(d);
                             latch.count_down();
                           });
    }
    for (std::size_t b = 0; b < 5 * scale; ++b) {
      client.acquire_batch_async(batch,
                                 [&tally, &latch](std::span<const Result<Decision>> results) {
                                   for (const auto& d : results) tally.add(d);
                                   latch.count_down();
                                 });
    }
    return latch.wait_for(255 * scale, 10s);
  };
  for (std::size_t r = 0; r < 40; ++r) REQUIRE(round(r, 4));  // warm-up: every key stored
  // One round with the I/O thread held (in a callback, until the round is submitted): every
  // call of it is in flight at once, so the pools grow to hold four measured rounds whatever
  // the timing. Without it, a measured round in which the I/O thread was descheduled for long
  // had more calls in flight than any warm-up round had had, and took new batches (the test
  // failed on a loaded 2-core machine, on the code before issue 23 as after).
  {
    CallbackLatch entered;
    std::atomic<bool> release{false};
    client.acquire_async("alloc:hold", generous_rule(), 1, [&entered, &release](Result<Decision>) {
      entered.count_down();
      while (!release.load()) std::this_thread::yield();
    });
    REQUIRE(entered.wait_for(1, 10s));
    CallbackLatch latch;
    for (std::size_t i = 0; i < 1000; ++i) {
      client.acquire_async(keys[i % keys.size()], rule, 1, [&tally, &latch](Result<Decision> d) {
        tally.add(d);
        latch.count_down();
      });
    }
    for (std::size_t b = 0; b < 20; ++b) {
      client.acquire_batch_async(batch,
                                 [&tally, &latch](std::span<const Result<Decision>> results) {
                                   for (const auto& d : results) tally.add(d);
                                   latch.count_down();
                                 });
    }
    release = true;
    REQUIRE(latch.wait_for(1020, 10s));
  }
  // Then until ten warm-up rounds in a row allocate nothing (at most 100 more): pools grow to
  // the most work in flight at once, which depends on timing (a call answered locally, from a
  // lease say, holds a pooled one-item batch on its way to the I/O thread).
  for (std::size_t r = 0, quiet = 0; r < 100 && quiet < 10; ++r) {
    const std::uint64_t grown = g_allocations.load();
    REQUIRE(round(r, 4));
    quiet = g_allocations.load() == grown ? quiet + 1 : 0;
  }

  tally.decided = 0;
  const std::uint64_t io_before = io_thread_allocations(client);
  const std::uint64_t caller_before = tl_allocations;
  const std::uint64_t before = g_allocations.load();
  bool all_answered = true;
  for (std::size_t r = 0; r < 200 && all_answered; ++r) all_answered = round(r);
  const std::uint64_t after = g_allocations.load();
  const std::uint64_t caller_after = tl_allocations;
  const std::uint64_t io_after = io_thread_allocations(client);
  REQUIRE(all_answered);
  CHECK(tally.failed.load() == 0);
  CHECK(tally.decided.load() == 100'000);
  return SteadyAllocations{after - before, caller_after - caller_before, io_after - io_before};
}

// Issue 4's proof: 100,000 decisions through the client and the in-process server (both
// shards, shard-aware connections), with no heap allocation anywhere in the process.
TEST_CASE("100,000 decisions through client and server allocate nothing in the whole process") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  CHECK(steady_state_allocations(*client).process == 0);
}

// The same with the client's local layer as a gateway has it by default (fail_open, the
// blocked-key cache, the breaker, metrics): every decision is copied, settled and counted, and
// nothing is allocated. Leases are off here, so that every decision is the cluster's; the next
// test has them.
// The client of `server` with its local layer as a gateway has it by default, on the server's
// manual clock; leases as `leases` says.
ClientOptions gateway_options(TestServer& server, bool leases) {
  ClientOptions options = options_for(server.address());
  const ClientOptions defaults;
  options.failure_policy = defaults.failure_policy;
  options.blocked_keys = defaults.blocked_keys;
  options.breaker_failures = defaults.breaker_failures;
  options.metrics = defaults.metrics;
  if (leases) options.lease_duration = defaults.lease_duration;
  options.clock = &server.clock();
  return options;
}

TEST_CASE("100,000 decisions with the local layer on allocate nothing in the whole process") {
  TestServer server;
  auto client = connect_or_fail(gateway_options(server, /*leases=*/false));
  CHECK(steady_state_allocations(*client).process == 0);
  CHECK(client->metrics().cluster_calls >= 100'000);
}

// With leases too, on the server's manual clock (it stands still: the warm-up makes every key
// hot and leases it, and the leases last): the decisions are paid from leases, single and
// batched, and nothing is allocated.
TEST_CASE("100,000 decisions paid from leases allocate nothing in the whole process") {
  TestServer server;
  auto client = connect_or_fail(gateway_options(server, /*leases=*/true));
  const std::uint64_t before = client->counters().lease_decisions;
  const SteadyAllocations allocations = steady_state_allocations(*client);
  INFO("allocations on the calling thread " << allocations.caller << ", on the I/O thread "
                                            << allocations.io_thread);
  CHECK(allocations.process == 0);
  CHECK(client->counters().leases > 0);
  CHECK(client->counters().lease_decisions - before >= 100'000);
  // The cluster decided only until the keys were hot: a small share of the 200,000 or more
  // decisions of the warm-up and the measured rounds.
  // (34,144 here: its first 16 calls of each key, and batch items that found no units left).
  CHECK(client->metrics().cluster_calls < 50'000);
}

// The same through a three-node cluster: the client routes by the map (every acquire is a
// one-item batch that could follow a REDIRECT) to each key's primary and its shard there, and
// allocates nothing. The nodes stream every change to a replica each millisecond; a flush
// (queued straight to the socket) and the lag snapshot for STATS allocate nothing, but a shard
// thread of a node runs many socket readers (clients, peers' streams, its links' replies) as
// coroutines, and Asio 1.18 keeps one spare operation block per thread: when two reads finish
// before the next starts, one of the next reads allocates. That is about one allocation per
// 130 decisions here (one per 80 with both cores busy); bounded at one per 20, and sanitizers
// run slower, so more of it falls on each decision there.
TEST_CASE(
    "100,000 decisions through a three-node cluster: nothing allocated by the client, and by "
    "the nodes at most one per 20 decisions") {
  test::TestCluster cluster(3);
  auto client = connect_or_fail(options_for("127.0.0.1:" + std::to_string(cluster.port(0))));
  REQUIRE(client->node_count() == 3);
  const SteadyAllocations counted = steady_state_allocations(*client);
  CHECK(counted.caller == 0);
  CHECK(counted.io_thread == 0);
  CHECK(counted.process <= 5'000u * test::kTimingSlack);
  std::printf(
      "RELIABILITY: three-node cluster with replication: %llu allocations in the whole "
      "process over 100,000 decisions (the client's threads: %llu)\n",
      static_cast<unsigned long long>(counted.process),
      static_cast<unsigned long long>(counted.caller + counted.io_thread));
}

}  // namespace
}  // namespace sluice::client
#endif  // SLUICE_COUNT_ALLOCATIONS
