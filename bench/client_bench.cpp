// The client's own cost per decision, without the socket: building one request (hash the key,
// pick its shard, encode the one-item ACQUIRE frame into a reused buffer, as
// Client::acquire_async does under the connection's mutex) and taking one reply apart (decode
// the frame, parse it, map it to a Decision, as the I/O thread does). The target for each is in
// docs/BENCHMARKS.md.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "client/blocked_cache.h"
#include "client/client.h"
#include "client/connection.h"
#include "core/key_hash.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

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
// Client::acquire, is BM_BlockedCacheHit once the cache is wired into the client.
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

BENCHMARK(BM_ClientBuildAndEncodeRequest);
BENCHMARK(BM_BlockedCacheLookup);
BENCHMARK(BM_ClientDecodeReply);

}  // namespace
