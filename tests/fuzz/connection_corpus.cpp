// Writes connection_fuzz's seed corpus (tests/fuzz/corpus/connection_fuzz/) from the protocol's
// own encoders: HELLO of every version with and without a token, against a node with and
// without one; PING; ACQUIRE batches over several shards with every algorithm, invalid items,
// repeated keys and request ids; RESET; STATS; pipelines fed whole, in pieces and a byte at a
// time to several peers; back-pressure; a table at its cap; and the ways a stream goes wrong.
// Each file is connection_fuzz's input: five setup bytes (see connection_fuzz.cpp), then the
// stream.
// Usage: connection_corpus DIR  (rewrites DIR's seeds; tools/fuzz.sh --seeds runs it)
#include <cstdint>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/key_hash.h"
#include "core/rule.h"
#include "protocol/cluster_messages.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace {

using namespace sluice;
using namespace sluice::protocol;

// The setup bytes, field by field (connection_fuzz.cpp, read_setup, has the encoding). Indices
// pick from its tables: 0 is the default everywhere.
struct Setup {
  unsigned shards = 1;         // 1..3
  bool token = false;          // the node requires the token "fuzz-token"
  unsigned max_frame = 0;      // 0: 1 MiB, 1: 32, 2: 128, 3: 1024 bytes
  unsigned max_batch = 0;      // 0: 4096, 1: 1, 2: 2, 3: 8 items
  unsigned max_key = 0;        // 0: 256, 1: 3 bytes
  unsigned max_pending = 0;    // max_pending_items 0: 65536, 1: 1, 2: 3, 3: 16
  bool small_table = false;    // 12 KiB a shard instead of 1 MiB
  bool stats_now = false;      // stats_refresh 0 instead of 100 ms
  bool small_log_cap = false;  // sliding_log_cap 4
  unsigned peers = 1;          // 1..4, peer i on shard i % shards
  bool shard_ports = false;    // the peers are on their shards' ports, not the public one
  unsigned pieces = 0;         // 0: whole, 1: a byte at a time, 2: 1..16 bytes, 3: 1..256 bytes
  unsigned runs = 0;           // loops run 0: at the end, 1: after every piece, 2: 1/2, 3: 1/8
  unsigned clock_step = 0;     // at each run, 0: none, 1: 1 ms, 2: 150 ms, 3: 61 s
  unsigned dealing = 0;        // frames to peers 0: in turn, 1: at random, 2: by id, 3: in runs
  std::uint8_t seed = 0;
  bool pauses = false;  // peers pause and resume at random
  bool resume = false;  // held input is dispatched after every run
  bool closes = false;  // peers close at random

  Bytes bytes() const {
    return {
        static_cast<std::uint8_t>((shards - 1) | (token ? 4 : 0) | max_frame << 3 | max_batch << 5 |
                                  max_key << 7),
        static_cast<std::uint8_t>(max_pending | (small_table ? 4 : 0) | (stats_now ? 8 : 0) |
                                  (small_log_cap ? 16 : 0) | (peers - 1) << 5 |
                                  (shard_ports ? 128 : 0)),
        static_cast<std::uint8_t>(pieces | runs << 2 | clock_step << 4 | dealing << 6),
        seed,
        static_cast<std::uint8_t>((pauses ? 1 : 0) | (resume ? 2 : 0) | (closes ? 4 : 0)),
    };
  }
};

constexpr std::string_view kToken = "fuzz-token";

// The n-th key with `prefix` that shard `shard` of `shards` owns.
std::string key_on(unsigned shard, unsigned shards, std::string_view prefix, int n = 0) {
  for (int i = 0;; ++i) {
    std::string key = std::string(prefix) + std::to_string(i);
    if (shard_for(hash_key(key), shards) == shard && n-- == 0) return key;
  }
}

AcquireItem item(std::string_view key, Algorithm algorithm, std::uint32_t limit,
                 std::uint64_t period_ms, std::uint32_t burst = 0, std::uint32_t cost = 1,
                 bool peek = false) {
  AcquireItem result;
  result.key = key;
  result.rule = Rule{algorithm, limit, period_ms, burst};
  result.cost = cost;
  result.peek = peek;
  return result;
}

void hello(Bytes& out, std::uint32_t id, std::uint8_t version, std::string_view token = "") {
  encode_hello_request(out, id, HelloRequest{version, "connection-corpus", token});
}

void acquire(Bytes& out, std::uint32_t id, const std::vector<AcquireItem>& items) {
  encode_acquire_request(out, id, items);
}

void reset(Bytes& out, std::uint32_t id, const std::vector<std::string>& keys) {
  const std::vector<std::string_view> views(keys.begin(), keys.end());
  encode_reset_request(out, id, views);
}

void ping(Bytes& out, std::uint32_t id, std::string_view payload) {
  const std::span<const std::uint8_t> bytes(reinterpret_cast<const std::uint8_t*>(payload.data()),
                                            payload.size());
  encode_ping(out, id, bytes, /*reply=*/false);
}

// Keeps a key made on the fly for as long as the seeds are written (AcquireItem holds a view; a
// deque never moves what it holds).
std::string_view kept(std::string key) {
  static std::deque<std::string> keys;
  return keys.emplace_back(std::move(key));
}

// One item of every algorithm on each of three shards, with peeks and costs above one.
std::vector<AcquireItem> every_algorithm(const std::vector<std::string>& keys) {
  std::vector<AcquireItem> items;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    items.push_back(item(keys[i], Algorithm::kFixedWindow, 3, 1000));
    items.push_back(item(keys[i], Algorithm::kSlidingWindow, 5, 60'000, 0, 2));
    items.push_back(item(kept(keys[i] + "-log"), Algorithm::kSlidingLog, 4, 1000, 0, 1, i == 1));
    items.push_back(item(kept(keys[i] + "-tb"), Algorithm::kTokenBucket, 10, 1000, 20, 7));
    items.push_back(item(kept(keys[i] + "-gcra"), Algorithm::kGcra, 2, kMaxPeriodMs, 0, 1, i == 2));
  }
  return items;
}

struct Seed {
  std::string name;
  Setup setup;
  Bytes stream;
};

std::vector<Seed> seeds() {
  std::vector<Seed> s;
  const auto add = [&s](std::string name, const Setup& setup, Bytes stream) {
    s.push_back({std::move(name), setup, std::move(stream)});
  };
  const std::vector<std::string> three = {key_on(0, 3, "k"), key_on(1, 3, "k"), key_on(2, 3, "k")};
  Setup three_shards;
  three_shards.shards = 3;
  Setup with_token;
  with_token.token = true;

  // HELLO: every version, with and without the token, on nodes with and without one.
  {
    Bytes out;
    hello(out, 1, 1);
    add("hello_v1", Setup{}, out);
    out.clear();
    hello(out, 1, 2);
    add("hello_v2", Setup{}, out);
    out.clear();
    hello(out, 1, 2, kToken);
    add("hello_v2_token_not_required", Setup{}, out);
    Setup ports = three_shards;
    ports.shard_ports = true;
    ports.peers = 3;
    out.clear();
    hello(out, 1, 2);
    hello(out, 2, 9);  // a later client version is answered with ours
    add("hello_three_shard_ports", ports, out);
    out.clear();
    hello(out, 1, 0);
    add("hello_v0", Setup{}, out);
  }
  {
    Bytes out;
    hello(out, 1, 2, kToken);
    acquire(out, 2, {item("user:1", Algorithm::kTokenBucket, 5, 1000)});
    hello(out, 3, 2, kToken);  // every HELLO is checked, also once authenticated
    encode_stats_request(out, 4);
    add("hello_token_then_requests", with_token, out);
    out.clear();
    hello(out, 1, 2, "fuzz-tokem");
    add("hello_wrong_token", with_token, out);
    out.clear();
    hello(out, 1, 2);
    add("hello_v2_without_token", with_token, out);
    out.clear();
    hello(out, 1, 1);
    add("hello_v1_token_required", with_token, out);
    out.clear();
    ping(out, 1, "first");
    add("ping_before_hello", with_token, out);
    out.clear();
    hello(out, 1, 2, kToken);
    hello(out, 2, 2, "wrong");
    add("hello_token_then_wrong_token", with_token, out);
  }

  // PING, empty and with a payload, and STATS on every shard.
  {
    Bytes out;
    ping(out, 1, "");
    ping(out, 2, "payload bytes");
    add("ping", Setup{}, out);
    Setup stats = three_shards;
    stats.stats_now = true;
    stats.peers = 3;
    out.clear();
    acquire(out, 1, {item(three[1], Algorithm::kFixedWindow, 1, 1000)});
    encode_stats_request(out, 2);
    encode_stats_request(out, 3);
    encode_stats_request(out, 4);
    add("stats_three_shards", stats, out);
  }

  // ACQUIRE: every algorithm over three shards, answered in order.
  {
    Bytes out;
    acquire(out, 1, every_algorithm(three));
    acquire(out, 2, every_algorithm(three));
    add("acquire_every_algorithm", three_shards, out);
    Setup runs = three_shards;
    runs.runs = 1;
    runs.clock_step = 2;
    add("acquire_every_algorithm_runs", runs, out);
  }
  {
    // The same key until it is denied, then the window passes (61 s a run).
    Bytes out;
    for (std::uint32_t id = 1; id <= 4; ++id) {
      acquire(out, id, {item(three[2], Algorithm::kFixedWindow, 2, 60'000)});
    }
    Setup later = three_shards;
    later.runs = 1;
    later.clock_step = 3;
    add("acquire_until_denied", three_shards, out);
    add("acquire_window_passes", later, out);
  }
  {
    // One key several times in a frame, on each shard: each item starts where the last left it.
    const std::string also_on_1 = key_on(1, 3, "k", 1);
    std::vector<AcquireItem> items;
    for (int round = 0; round < 4; ++round) {
      items.push_back(item(three[0], Algorithm::kFixedWindow, 3, 1000, 0, 1, round == 1));
      items.push_back(item(three[1], Algorithm::kTokenBucket, 5, 1000, 0, 2, round == 2));
      items.push_back(item(three[2], Algorithm::kGcra, 3, 1000, 0, 1));
      items.push_back(item(also_on_1, Algorithm::kSlidingWindow, 4, 1000, 0, 1));
    }
    Bytes out;
    acquire(out, 1, items);
    add("acquire_one_key_in_a_frame", three_shards, out);
  }
  {
    // Items the server answers one by one: bad rules, then bad keys (max_key 3).
    Bytes out;
    const std::vector<AcquireItem> items = {
        item("a", static_cast<Algorithm>(0), 1, 1000),
        item("a", static_cast<Algorithm>(6), 1, 1000),
        item("a", Algorithm::kFixedWindow, 1, 0),
        item("a", Algorithm::kGcra, 1, kMaxPeriodMs + 1),
        item("a", Algorithm::kTokenBucket, 1, 1000, 0, 0),
        item("a", Algorithm::kSlidingLog, 5, 1000),
        item("a", Algorithm::kSlidingLog, 4, 1000, 5),
        item("", Algorithm::kFixedWindow, 1, 1000),
        item("abcd", Algorithm::kFixedWindow, 1, 1000),
        item("abc", Algorithm::kTokenBucket, 3, 1000, 0, 4),
        item("abc", Algorithm::kGcra, 0, 1000),
    };
    acquire(out, 1, items);
    Setup tight = three_shards;
    tight.max_key = 1;
    tight.small_log_cap = true;
    add("acquire_invalid_items", tight, out);
    out.clear();
    acquire(out, 1, {});
    reset(out, 2, {});
    add("empty_batches", Setup{}, out);
  }
  {
    // Request ids repeat: the replies of other shards may come back in any order.
    Bytes out;
    for (int n = 0; n < 3; ++n) {
      acquire(out, 7, {item(key_on(1, 3, "same", n), Algorithm::kGcra, 1, 1000)});
      acquire(out, 7,
              {item(key_on(0, 3, "same", n), Algorithm::kGcra, 1, 1000),
               item(key_on(2, 3, "same", n), Algorithm::kGcra, 1, 1000)});
      ping(out, 7, "seven");
    }
    Setup setup = three_shards;
    setup.peers = 2;
    setup.runs = 2;
    setup.seed = 5;
    add("repeated_request_ids", setup, out);
  }

  // RESET after ACQUIRE, local and handed over, removed and absent.
  {
    Bytes out;
    acquire(out, 1,
            {item(three[0], Algorithm::kTokenBucket, 1, 1000),
             item(three[1], Algorithm::kTokenBucket, 1, 1000)});
    reset(out, 2, {three[0], three[1], three[2], ""});
    acquire(out, 3, {item(three[1], Algorithm::kTokenBucket, 1, 1000)});
    Setup setup = three_shards;
    setup.runs = 1;
    add("reset", setup, out);
  }

  // INSPECT after ACQUIRE, of keys on every shard (stored, absent), and of an empty key.
  {
    Bytes out;
    acquire(out, 1, every_algorithm(three));
    for (std::uint32_t i = 0; i < 3; ++i) encode_inspect_request(out, 2 + i, three[i]);
    encode_inspect_request(out, 5, "never-acquired");
    encode_inspect_request(out, 6, "");
    Setup setup = three_shards;
    setup.runs = 1;
    add("inspect", setup, out);
  }

  // Pipelines on several peers: whole, in pieces, a byte at a time.
  {
    Bytes out;
    hello(out, 1, 2, kToken);
    acquire(out, 2, every_algorithm(three));
    reset(out, 3, {three[2]});
    encode_stats_request(out, 4);
    ping(out, 5, "end");
    acquire(out, 6, {item(three[0], Algorithm::kSlidingWindow, 1, 1000)});
    Setup setup = three_shards;
    setup.token = true;
    add("pipeline", setup, out);
    setup.peers = 3;
    setup.dealing = 0;
    setup.pieces = 2;
    setup.runs = 2;
    setup.seed = 17;
    add("pipeline_pieces_three_peers", setup, out);
    setup.peers = 2;
    setup.pieces = 1;
    setup.runs = 3;
    setup.dealing = 3;
    setup.shard_ports = true;
    add("pipeline_bytes_two_peers", setup, out);
    setup = three_shards;
    setup.peers = 4;
    setup.dealing = 1;
    setup.pieces = 3;
    setup.runs = 1;
    setup.resume = true;
    add("pipeline_four_peers", setup, out);
  }

  // Back-pressure: a backlog bound of one item, peers pausing and resuming.
  {
    Bytes out;
    for (std::uint32_t id = 1; id <= 6; ++id) {
      acquire(out, id,
              {item(key_on(id % 3, 3, "bp", 0), Algorithm::kFixedWindow, 10, 1000),
               item(key_on((id + 1) % 3, 3, "bp", 1), Algorithm::kFixedWindow, 10, 1000)});
    }
    Setup setup = three_shards;
    setup.max_pending = 1;
    add("backlog_bound", setup, out);
    setup.pauses = true;
    setup.resume = true;
    setup.runs = 2;
    setup.pieces = 2;
    setup.peers = 2;
    setup.seed = 3;
    add("backlog_bound_pauses", setup, out);
    // Clients that go away with frames still on other shards (with seed 2, one such peer).
    setup = three_shards;
    setup.peers = 3;
    setup.pieces = 2;
    setup.runs = 3;
    setup.closes = true;
    setup.seed = 2;
    add("peers_close", setup, out);
  }

  // A table at its cap: many keys and sliding logs on 12 KiB shards.
  {
    Bytes out;
    for (std::uint32_t id = 1; id <= 4; ++id) {
      std::vector<std::string> keys;
      for (int n = 0; n < 8; ++n) keys.push_back("cap" + std::to_string(id * 100 + n));
      std::vector<AcquireItem> items;
      for (const std::string& key : keys) {
        items.push_back(item(key, Algorithm::kSlidingLog, 4000, 60'000, 0, 4000));
      }
      acquire(out, id, items);
    }
    Setup setup = three_shards;
    setup.small_table = true;
    add("table_at_cap", setup, out);
  }
  {
    // More keys than a 12 KiB table holds (38 homes): exhausted keys, then a flood of fresh
    // ones, then the exhausted keys again.
    std::vector<std::string> keys;
    for (int n = 0; n < 60; ++n) keys.push_back("e" + std::to_string(n));
    Bytes out;
    const auto frame = [&](std::uint32_t id, int from, int to, std::uint32_t limit) {
      std::vector<AcquireItem> items;
      for (int n = from; n < to; ++n) {
        items.push_back(item(keys[n], Algorithm::kGcra, limit, 60'000));
      }
      acquire(out, id, items);
    };
    frame(1, 0, 20, 1);
    frame(2, 20, 40, 100);
    frame(3, 40, 60, 100);
    frame(4, 0, 20, 1);
    Setup setup;
    setup.small_table = true;
    add("table_evicts", setup, out);
  }

  // The ways a stream goes wrong, each after a good frame (and a reply handed over, dropped
  // when the ERROR comes first).
  {
    Bytes good;
    acquire(good, 1, {item(three[1], Algorithm::kFixedWindow, 1, 1000)});
    ping(good, 2, "ok");
    Bytes bad;
    ping(bad, 3, "bad");
    const auto broken = [&](std::string name, std::size_t offset, std::uint8_t value,
                            Setup setup = Setup{}) {
      Bytes out = good;
      Bytes frame = bad;
      frame[offset] = value;
      out.insert(out.end(), frame.begin(), frame.end());
      setup.shards = 3;
      add(std::move(name), setup, out);
    };
    broken("bad_magic", 0, 'G');
    broken("bad_magic_second_byte", 1, 0);
    broken("bad_version", 2, 2);
    broken("unknown_opcode", 3, 0x06);
    broken("reserved_flag_bit", 4, 0x02);
    broken("reply_flag", 4, 0x01);
    broken("error_opcode_without_reply_flag", 3, 0x7F);
    broken("reserved_header_field", 7, 1);
    Setup small = Setup{};
    small.max_frame = 1;
    broken("body_over_max_frame", 12, 40, small);
    broken("body_length_4_gib", 15, 0xFF);

    Bytes out = good;
    encode_error(out, 4, WireErrorCode::kInternal, "a client sent an ERROR");
    add("error_frame_sent", three_shards, out);
    out = good;
    out.insert(out.end(), bad.begin(), bad.end() - 1);
    add("truncated_frame", three_shards, out);
    out = good;
    out.push_back('S');
    add("half_a_header", three_shards, out);
  }
  {
    // Bodies that do not parse, and a batch over the max (max_batch 2).
    Bytes out;
    acquire(out, 1, {item("x", Algorithm::kGcra, 1, 1000)});
    out.push_back(0);
    out[12] = static_cast<std::uint8_t>(out.size() - kHeaderSize);
    add("acquire_trailing_byte", Setup{}, out);
    out.clear();
    reset(out, 1, {"x", "y"});
    out[kHeaderSize + 2] = 1;
    add("reset_reserved_bytes", Setup{}, out);
    out.clear();
    encode_stats_request(out, 1);
    out.push_back(0);
    out[12] = 1;
    add("stats_with_body", Setup{}, out);
    out.clear();
    hello(out, 1, 2, kToken);
    out.pop_back();
    out[12] = static_cast<std::uint8_t>(out.size() - kHeaderSize);
    add("hello_token_cut", with_token, out);
    out.clear();
    acquire(out, 1,
            {item("a", Algorithm::kGcra, 1, 1000), item("b", Algorithm::kGcra, 1, 1000),
             item("c", Algorithm::kGcra, 1, 1000)});
    Setup batch = Setup{};
    batch.max_batch = 2;
    add("batch_over_max", batch, out);
  }
  return s;
}

}  // namespace

int main(int argc, char* argv[]) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  for (const Seed& seed : seeds()) {
    const Bytes setup = seed.setup.bytes();
    std::ofstream file(dir / seed.name, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(setup.data()),
               static_cast<std::streamsize>(setup.size()));
    file.write(reinterpret_cast<const char*>(seed.stream.data()),
               static_cast<std::streamsize>(seed.stream.size()));
    if (!file) {
      std::fprintf(stderr, "cannot write %s\n", (dir / seed.name).c_str());
      return 1;
    }
  }
  return 0;
}
