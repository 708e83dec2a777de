// The client's own cost per decision, without the socket: building one request (hash the key,
// pick its shard, encode the one-item ACQUIRE frame into a reused buffer, as
// Client::acquire_async does under the connection's mutex) and taking one reply apart (decode
// the frame, parse it, map it to a Decision, as the I/O thread does). And the decisions the
// local layer makes with no round trip (issue 15), through Client::acquire against a real
// in-process node: a blocked-cache hit and a local fallback decision once the node is down.
// The target for each is in docs/BENCHMARKS.md.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include <memory>

#include "client/blocked_cache.h"
#include "client/client.h"
#include "client/node_connection.h"
#include "core/key_hash.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "server/server.h"

namespace {

using namespace sluice;

std::vector<std::string> make_keys(int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "tenant:%03d:u%05d", i % 1000, i * 7919 % 100000);
    keys.emplace_back(key);  // 16 bytes
  }
  return keys;
}

void BM_ClientBuildAndEncodeRequest(benchmark::State& state) {
  const std::vector<std::string> keys = make_keys(1024);
  const Rule rule{Algorithm::kTokenBucket, 100, 1000, 200};
  protocol::Bytes out;
  out.reserve(64 * 1024);
  std::uint32_t id = 0;
  std::uint32_t shards_seen = 0;
  for (auto _ : state) {
    const std::string& key = keys[id & 1023];
    const std::uint32_t shard = shard_for(hash_key(key), 2);
    shards_seen += shard;
    // A connection's buffer is handed to the socket and comes back empty: clear it as often.
    if (out.size() > 60 * 1024) out.clear();
    client::detail::encode_acquire(out, ++id, client::AcquireRequest{key, rule, 1, false});
    benchmark::DoNotOptimize(out.data());
  }
  benchmark::DoNotOptimize(shards_seen);
  state.SetItemsProcessed(state.iterations());
}

void BM_ClientDecodeReply(benchmark::State& state) {
  // 64 one-item replies back to back in one read buffer, as a pipelined connection sees them.
  protocol::Bytes stream;
  for (std::uint32_t id = 1; id <= 64; ++id) {
    const protocol::AcquireResult result{protocol::ItemStatus::kAllowed, 100, 42 + id, 500, 0};
    protocol::encode_acquire_reply(stream, id,
                                   std::span<const protocol::AcquireResult>(&result, 1));
  }
  const protocol::FrameDecoder decoder;
  std::vector<protocol::AcquireResult> scratch;
  std::size_t at = 0;
  std::uint64_t remaining = 0;
  for (auto _ : state) {
    if (at == stream.size()) at = 0;
    const protocol::DecodeResult r =
        decoder.decode(std::span<const std::uint8_t>(stream.data() + at, stream.size() - at));
    at += r.frame_size;
    const client::Result<client::Decision> d =
        client::detail::decision_from_reply(r.frame, scratch, 100, 1000);
    remaining += d->remaining;
  }
  benchmark::DoNotOptimize(remaining);
  state.SetItemsProcessed(state.iterations());
}

// The blocked-key cache's part of a blocked-cache hit (issue 15): hash the key, make its
// fingerprint with the rule, and find it blocked, over 1,000 blocked keys. The whole hit, through
// Client::acquire, is BM_BlockedCacheHit.
void BM_BlockedCacheLookup(benchmark::State& state) {
  const std::vector<std::string> keys = make_keys(1000);
  const Rule rule{Algorithm::kTokenBucket, 100, 1000, 0};
  client::detail::BlockedCache cache(65536);
  const std::uint64_t far = 1ull << 62;
  for (const std::string& key : keys) {
    cache.block(client::detail::blocked_fingerprint(hash_key(key), rule), far, 0);
  }
  std::size_t i = 0;
  std::uint64_t blocked = 0;
  for (auto _ : state) {
    const std::string& key = keys[i++ % keys.size()];
    blocked += cache.blocked_for(client::detail::blocked_fingerprint(hash_key(key), rule), 1) > 0;
  }
  benchmark::DoNotOptimize(blocked);
  if (blocked != static_cast<std::uint64_t>(state.iterations())) state.SkipWithError("not blocked");
}

// An in-process node on an ephemeral loopback port, two shards, and a client of it with the
// local layer on (fail_open, the defaults), everything through the public port.
struct LocalNode {
  explicit LocalNode(
      std::chrono::milliseconds lease_duration = client::ClientOptions{}.lease_duration)
      : server(config()) {
    server.start();
    client::ClientOptions options;
    options.servers = {"127.0.0.1:" + std::to_string(server.port())};
    options.shard_aware = false;
    options.timeout = std::chrono::milliseconds(50);
    options.lease_duration = lease_duration;
    auto connected = client::Client::connect(options);
    if (connected.ok()) client = std::move(connected).value();
  }
  static server::ServerConfig config() {
    server::ServerConfig c;
    c.bind = "127.0.0.1";
    c.port = 0;
    c.shards = 2;
    c.max_memory = 64u << 20;
    return c;
  }
  server::Server server;
  std::unique_ptr<client::Client> client;
};

// The timed loop of both: Client::acquire over `keys` in turn, each decision expected from
// `source` (the run is marked an error otherwise).
void time_acquires(benchmark::State& state, client::Client& client,
                   const std::vector<std::string>& keys, const Rule& rule,
                   client::DecisionSource source) {
  std::size_t i = 0;
  std::uint64_t expected = 0;
  for (auto _ : state) {
    const auto d = client.acquire(keys[i++ % keys.size()], rule);
    expected += d.ok() && d->source == source;
  }
  if (expected != static_cast<std::uint64_t>(state.iterations())) {
    state.SkipWithError("a decision came from another source than the one measured");
  }
  state.SetItemsProcessed(state.iterations());
}

// A blocked-cache hit, whole: Client::acquire of a key the node denied, answered on the calling
// thread from the cache (route, fingerprint, lookup, the decision), over 1,000 blocked keys.
void BM_BlockedCacheHit(benchmark::State& state) {
  LocalNode node;
  if (!node.client) return state.SkipWithError("no client");
  const std::vector<std::string> keys = make_keys(1000);
  const Rule rule{Algorithm::kFixedWindow, 1, 3'600'000, 0};  // one an hour
  for (const std::string& key : keys) {
    for (int i = 0; i < 2; ++i) (void)node.client->acquire(key, rule);  // the second is denied
  }
  time_acquires(state, *node.client, keys, rule, client::DecisionSource::kBlockedCache);
}

// A fail_open decision once the node is down and its breaker open: Client::acquire answered by
// the local fallback limiter on the calling thread (route, breaker, fingerprint, the rule's
// algorithm on the local table), over 1,000 keys.
void BM_LocalFallbackDecision(benchmark::State& state) {
  LocalNode node;
  if (!node.client) return state.SkipWithError("no client");
  node.server.stop_now();
  node.server.wait();
  const std::vector<std::string> keys = make_keys(1000);
  const Rule rule{Algorithm::kTokenBucket, 1'000'000, 1000, 0};
  // Failed calls open the breaker (five, by default); bounded.
  for (int i = 0; i < 100 && node.client->counters().node_down_events == 0; ++i) {
    (void)node.client->acquire(keys[0], rule);
  }
  if (node.client->counters().node_down_events == 0) return state.SkipWithError("breaker closed");
  time_acquires(state, *node.client, keys, rule, client::DecisionSource::kLocalFallback);
}

// A decision paid from a lease: Client::acquire of a hot key answered on the calling thread
// from the units its lease holds (route, fingerprint, the blocked cache's miss, one
// compare-and-swap), over 16 leased keys. Leases of 60 s and 2^24 - 1 units, so that none ends
// within the run.
void BM_LeasedDecision(benchmark::State& state) {
  LocalNode node(std::chrono::seconds(60));
  if (!node.client) return state.SkipWithError("no client");
  const std::vector<std::string> keys = make_keys(16);
  const Rule rule{Algorithm::kTokenBucket, 4'000'000'000u, 3'600'000, 0};
  for (const std::string& key : keys) {
    // The threshold's requests make the key hot; the last of them takes the lease.
    for (std::uint32_t i = 0; i < client::ClientOptions{}.lease_threshold; ++i) {
      (void)node.client->acquire(key, rule);
    }
  }
  if (node.client->counters().leases != keys.size()) return state.SkipWithError("not leased");
  time_acquires(state, *node.client, keys, rule, client::DecisionSource::kLease);
}

BENCHMARK(BM_ClientBuildAndEncodeRequest);
BENCHMARK(BM_LeasedDecision);
BENCHMARK(BM_BlockedCacheHit);
BENCHMARK(BM_LocalFallbackDecision);
BENCHMARK(BM_BlockedCacheLookup);
BENCHMARK(BM_ClientDecodeReply);

}  // namespace
