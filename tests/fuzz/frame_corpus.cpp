// Writes frame_fuzz's seed corpus (tests/fuzz/corpus/frame_fuzz/) from the protocol's own
// encoders, so the seeds follow the format: a valid frame of every opcode and direction, a
// pipeline, and the ways a stream goes wrong (truncated, oversized length, bad magic, bad
// version, unknown opcode, set reserved bits, a batch over the limit, trailing garbage).
// Each file is frame_fuzz's input: one config byte (see frame_fuzz.cpp), then the stream.
// Usage: frame_corpus DIR  (rewrites DIR's seeds; tools/fuzz.sh --seeds runs it)
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/rule.h"
#include "core/verdict.h"
#include "protocol/cluster_messages.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace {

using namespace sluice;
using namespace sluice::protocol;

// Config byte: 0 keeps the default limits; low nibble n sets max frame 16n bytes, high nibble
// m sets max batch m.
constexpr std::uint8_t kDefaults = 0x00;
constexpr std::uint8_t kMaxFrame16 = 0x01;
constexpr std::uint8_t kMaxBatch2 = 0x20;

struct Seed {
  std::string name;
  std::uint8_t config;
  Bytes stream;
};

AcquireItem item(std::string_view key, Algorithm algorithm, std::uint32_t limit,
                 std::uint64_t period_ms, std::uint32_t burst, std::uint32_t cost, bool peek) {
  AcquireItem result;
  result.key = key;
  result.rule = Rule{algorithm, limit, period_ms, burst};
  result.cost = cost;
  result.peek = peek;
  return result;
}

Bytes hello_request() {
  Bytes out;
  encode_hello_request(out, 1, HelloRequest{kVersion, "sluice-fuzz/1", "fuzz-token"});
  return out;
}

Bytes acquire_request() {
  const std::vector<AcquireItem> items = {
      item("user:1", Algorithm::kFixedWindow, 10, 1000, 0, 1, false),
      item("user:2", Algorithm::kSlidingWindow, 100, 60'000, 0, 3, false),
      item("ip:10.0.0.1", Algorithm::kSlidingLog, 5, 1000, 0, 1, true),
      item("api", Algorithm::kTokenBucket, 50, 1000, 80, 2, false),
      item("g", Algorithm::kGcra, 1, kMaxPeriodMs, 0, 1, false),
  };
  Bytes out;
  encode_acquire_request(out, 3, items);
  return out;
}

std::vector<Seed> seeds() {
  std::vector<Seed> s;
  const auto add = [&s](std::string name, std::uint8_t config, Bytes stream) {
    s.push_back({std::move(name), config, std::move(stream)});
  };

  // One valid frame of every opcode, request and reply.
  add("hello_request", kDefaults, hello_request());
  {
    Bytes out;
    encode_hello_request(out, 1, HelloRequest{1, "sluice-fuzz/1", ""});
    add("hello_request_v1", kDefaults, out);
  }
  {
    HelloReply reply;
    reply.this_shard = 1;
    reply.shard_ports = {7421, 7422};
    reply.node_id = "node-a";
    Bytes out;
    encode_hello_reply(out, 1, reply);
    add("hello_reply", kDefaults, out);
  }
  {
    const Bytes payload = {'p', 'i', 'n', 'g'};
    Bytes out;
    encode_ping(out, 2, payload, false);
    add("ping_request", kDefaults, out);
    out.clear();
    encode_ping(out, 2, payload, true);
    add("ping_reply", kDefaults, out);
    out.clear();
    encode_ping(out, 2, {}, false);
    add("ping_empty", kDefaults, out);
  }
  add("acquire_request", kDefaults, acquire_request());
  {
    const std::vector<AcquireResult> results = {
        {ItemStatus::kAllowed, 10, 9, 1000, 0}, {ItemStatus::kDenied, 5, 0, 400, 400},
        {ItemStatus::kDenied, 0, 0, 0, kNever}, {ItemStatus::kInvalidRule, 0, 0, 0, 0},
        {ItemStatus::kInvalidKey, 0, 0, 0, 0},  {ItemStatus::kNoMemory, 0, 0, 0, 0},
    };
    Bytes out;
    encode_acquire_reply(out, 3, results);
    add("acquire_reply", kDefaults, out);
  }
  {
    const std::vector<std::string_view> keys = {"user:1", "ip:10.0.0.1"};
    Bytes out;
    encode_reset_request(out, 4, keys);
    add("reset_request", kDefaults, out);
    const std::vector<ResetStatus> statuses = {ResetStatus::kRemoved, ResetStatus::kAbsent,
                                               ResetStatus::kInvalidKey};
    out.clear();
    encode_reset_reply(out, 4, statuses);
    add("reset_reply", kDefaults, out);
  }
  {
    Bytes out;
    encode_stats_request(out, 5);
    add("stats_request", kDefaults, out);
    const std::vector<StatEntry> stats = {{"total.keys", 12}, {"shard.0.allowed", 1u << 31}};
    out.clear();
    encode_stats_reply(out, 5, stats);
    add("stats_reply", kDefaults, out);
  }
  {
    Bytes out;
    encode_error(out, 6, WireErrorCode::kFrameTooLarge, "frame too large");
    add("error_reply", kDefaults, out);
  }
  {
    Bytes out;
    encode_inspect_request(out, 11, "user:1");
    add("inspect_request", kDefaults, out);
    InspectReply stored;
    stored.status = InspectStatus::kStored;
    stored.role = InspectRole::kPrimary;
    stored.shard = 1;
    stored.now_ns = 1'700'000'000'000'000'000;
    stored.record.fp_lo = 0x0102030405060708;
    stored.record.fp_hi = 0x1112131415161718;
    stored.record.algorithm = static_cast<std::uint8_t>(Algorithm::kSlidingLog);
    stored.record.capacity_class = 7;
    stored.record.idle_at_ns = stored.now_ns + 1'000'000'000;
    const std::vector<std::uint64_t> log = {stored.now_ns - 2, stored.now_ns - 1};
    out.clear();
    encode_inspect_reply(out, 11, stored, log);
    add("inspect_reply_log", kDefaults, out);
    InspectReply absent;
    absent.role = InspectRole::kReplica;
    out.clear();
    encode_inspect_reply(out, 12, absent, {});
    add("inspect_reply_absent", kDefaults, out);
  }

  // A pipeline: several frames back to back, as a client sends them.
  {
    Bytes out = hello_request();
    const Bytes acquire = acquire_request();
    out.insert(out.end(), acquire.begin(), acquire.end());
    encode_stats_request(out, 7);
    encode_ping(out, 8, {}, false);
    add("pipeline", kDefaults, out);
  }

  // Truncated: half a header, and a whole header whose body lacks its last byte.
  {
    Bytes out = hello_request();
    out.resize(kHeaderSize / 2);
    add("truncated_header", kDefaults, out);
    out = acquire_request();
    out.pop_back();
    add("truncated_body", kDefaults, out);
  }

  // Length fields: a header claiming 4 GiB, and a body one byte above a 16-byte max frame.
  {
    Bytes out;
    encode_ping(out, 9, {}, false);
    out[12] = out[13] = out[14] = out[15] = 0xFF;
    add("oversized_length", kDefaults, out);
    const Bytes payload(17, 'x');
    out.clear();
    encode_ping(out, 9, payload, false);
    add("body_over_max_frame", kMaxFrame16, out);
  }

  // A bad header field, each refused by its own check.
  {
    const Bytes good = hello_request();
    Bytes out = good;
    out[0] = 'G';  // "GET / HTTP/1.1" sent to the wrong port
    add("bad_magic", kDefaults, out);
    out = good;
    out[1] = 0;
    add("bad_magic_second_byte", kDefaults, out);
    out = good;
    out[2] = 2;
    add("bad_version", kDefaults, out);
    out = good;
    out[3] = 0x06;
    add("unknown_opcode", kDefaults, out);
    out = good;
    out[4] = 0x02;
    add("reserved_flag_bit", kDefaults, out);
    out = good;
    out[6] = 1;
    add("reserved_header_field", kDefaults, out);
  }

  // An ACQUIRE with more items than a max batch of 2, and a good frame followed by garbage.
  {
    add("batch_over_max", kMaxBatch2, acquire_request());
    Bytes out;
    encode_stats_request(out, 10);
    const std::string_view garbage = "garbage\r\n";
    out.insert(out.end(), garbage.begin(), garbage.end());
    add("frame_then_garbage", kDefaults, out);
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
    std::ofstream file(dir / seed.name, std::ios::binary | std::ios::trunc);
    file.put(static_cast<char>(seed.config));
    file.write(reinterpret_cast<const char*>(seed.stream.data()),
               static_cast<std::streamsize>(seed.stream.size()));
    if (!file) {
      std::fprintf(stderr, "cannot write %s\n", (dir / seed.name).c_str());
      return 1;
    }
  }
  return 0;
}
