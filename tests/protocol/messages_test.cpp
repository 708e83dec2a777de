// Message bodies: every message round-trips, malformed bodies fail with a reason, and parsers
// reuse their out-params.
#include "protocol/messages.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/rule.h"
#include "core/verdict.h"
#include "protocol/frame.h"
#include "tests/protocol/frame_support.h"

namespace sluice::protocol {

inline std::ostream& operator<<(std::ostream& os, WireErrorCode code) {
  return os << error_code_name(code);
}

inline std::ostream& operator<<(std::ostream& os, ItemStatus status) {
  return os << item_status_name(status);
}

namespace {

using testing::decode_whole;

std::span<const std::uint8_t> body_of(const Bytes& bytes) { return decode_whole(bytes).body; }

Bytes bytes_of(std::string_view text) { return Bytes(text.begin(), text.end()); }

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

void check_same_items(const std::vector<AcquireItem>& got, const std::vector<AcquireItem>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("item " << i);
    CHECK(got[i].key == want[i].key);
    CHECK(got[i].rule == want[i].rule);
    CHECK(got[i].cost == want[i].cost);
    CHECK(got[i].peek == want[i].peek);
    CHECK(got[i].lease == want[i].lease);
    CHECK(got[i].give_back == want[i].give_back);
    CHECK(got[i].stamp == want[i].stamp);
  }
}

// An ACQUIRE body written by hand: `count` in the list header, then the given item bytes.
Bytes acquire_body(std::uint16_t count, const Bytes& items, std::uint16_t reserved = 0) {
  Bytes body(4 + items.size());
  body[0] = static_cast<std::uint8_t>(count);
  body[1] = static_cast<std::uint8_t>(count >> 8);
  body[2] = static_cast<std::uint8_t>(reserved);
  body[3] = static_cast<std::uint8_t>(reserved >> 8);
  std::copy(items.begin(), items.end(), body.begin() + 4);
  return body;
}

// One ACQUIRE item written by hand: fixed part with the given key length, then `key`.
Bytes acquire_item_bytes(std::uint16_t key_len, std::string_view key, std::uint8_t flags = 0) {
  Bytes bytes(24 + key.size(), 0);
  bytes[0] = 4;  // algorithm
  bytes[1] = flags;
  bytes[2] = static_cast<std::uint8_t>(key_len);
  bytes[3] = static_cast<std::uint8_t>(key_len >> 8);
  bytes[4] = 10;    // limit
  bytes[12] = 1;    // cost
  bytes[16] = 100;  // period_ms
  std::copy(key.begin(), key.end(), bytes.begin() + 24);
  return bytes;
}

}  // namespace

// ---- HELLO ---------------------------------------------------------------------------------

TEST_CASE("a HELLO request round-trips") {
  Bytes out;
  encode_hello_request(out, 1, HelloRequest{1, "sluice-py/0.3", ""});
  const Frame frame = decode_whole(out);
  CHECK(frame.header.opcode == Opcode::kHello);
  CHECK_FALSE(frame.header.is_reply());

  HelloRequest parsed{0, "stale", "stale"};
  REQUIRE(parse_hello_request(frame.body, parsed));
  CHECK(parsed.version == 1);
  CHECK(parsed.client_name == "sluice-py/0.3");
}

TEST_CASE("a HELLO request with an empty client name round-trips") {
  Bytes out;
  encode_hello_request(out, 1, HelloRequest{1, "", ""});
  HelloRequest parsed;
  REQUIRE(parse_hello_request(body_of(out), parsed));
  CHECK(parsed.client_name.empty());
}

TEST_CASE("a client name longer than 255 bytes is cut to 255") {
  const std::string name(300, 'n');
  Bytes out;
  encode_hello_request(out, 1, HelloRequest{1, name, ""});
  HelloRequest parsed;
  REQUIRE(parse_hello_request(body_of(out), parsed));
  CHECK(parsed.client_name == std::string(255, 'n'));
}

TEST_CASE("a malformed HELLO request body fails to parse") {
  HelloRequest parsed;
  CHECK_FALSE(parse_hello_request(Bytes{}, parsed));
  CHECK_FALSE(parse_hello_request(Bytes{1}, parsed));
  CHECK_FALSE(parse_hello_request(Bytes{1, 3, 'a', 'b'}, parsed));  // name past the end
  CHECK_FALSE(parse_hello_request(Bytes{1, 1, 'a', 'b'}, parsed));  // trailing byte
  const ParseResult result = parse_hello_request(Bytes{1, 2, 'a'}, parsed);
  CHECK(result.error == WireErrorCode::kMalformedFrame);
  CHECK_FALSE(result.reason.empty());
}

TEST_CASE("a version 1 HELLO request ends after the name and carries no token") {
  Bytes out;
  encode_hello_request(out, 1, HelloRequest{1, "old-client", ""});
  const std::span<const std::uint8_t> body = body_of(out);
  CHECK(body.size() == 2 + 10);
  HelloRequest parsed{0, "stale", "stale-token"};
  REQUIRE(parse_hello_request(body, parsed));
  CHECK(parsed.version == 1);
  CHECK(parsed.client_name == "old-client");
  CHECK(parsed.token.empty());
  // Version 1 has one encoding: a token length after the name is a leftover.
  Bytes with_token_len(body.begin(), body.end());
  with_token_len.push_back(0);
  with_token_len.push_back(0);
  CHECK_FALSE(parse_hello_request(with_token_len, parsed));
}

TEST_CASE("a version 2 HELLO request round-trips its token") {
  Bytes out;
  encode_hello_request(out, 1, HelloRequest{2, "sluice-py/0.3", "t0ken"});
  const std::span<const std::uint8_t> body = body_of(out);
  CHECK(body.size() == 2 + 13 + 2 + 5);
  HelloRequest parsed;
  REQUIRE(parse_hello_request(body, parsed));
  CHECK(parsed.version == 2);
  CHECK(parsed.client_name == "sluice-py/0.3");
  CHECK(parsed.token == "t0ken");
  CHECK(parsed.token.data() == reinterpret_cast<const char*>(body.data()) + 17);  // a view
}

TEST_CASE("a version 2 HELLO request takes a token of 0 to kMaxTokenLength bytes") {
  const std::size_t length = GENERATE(std::size_t{0}, std::size_t{1}, kMaxTokenLength);
  CAPTURE(length);
  const std::string token(length, 'x');
  Bytes out;
  encode_hello_request(out, 1, HelloRequest{2, "n", token});
  HelloRequest parsed;
  REQUIRE(parse_hello_request(body_of(out), parsed));
  CHECK(parsed.token == token);
}

// A version 2 body built by hand: version, name "n", then the given token_len and bytes.
Bytes hello_v2_body(std::uint16_t token_len, std::size_t token_bytes) {
  Bytes body = {2, 1, 'n', static_cast<std::uint8_t>(token_len),
                static_cast<std::uint8_t>(token_len >> 8)};
  body.insert(body.end(), token_bytes, 'x');
  return body;
}

TEST_CASE("a HELLO token one byte above kMaxTokenLength is malformed from its length alone") {
  constexpr auto kOver = static_cast<std::uint16_t>(kMaxTokenLength + 1);
  HelloRequest parsed;
  const ParseResult whole = parse_hello_request(hello_v2_body(kOver, kOver), parsed);
  CHECK_FALSE(whole);
  CHECK(whole.error == WireErrorCode::kMalformedFrame);
  CHECK(whole.reason == "HELLO token too long");
  // The same verdict with no token byte present: the length is checked first.
  CHECK(parse_hello_request(hello_v2_body(kOver, 0), parsed).reason == "HELLO token too long");
  CHECK(parse_hello_request(hello_v2_body(0xFFFF, 0), parsed).reason == "HELLO token too long");
}

TEST_CASE("a malformed version 2 HELLO request fails to parse") {
  HelloRequest parsed;
  CHECK(parse_hello_request(hello_v2_body(3, 3), parsed));
  CHECK_FALSE(parse_hello_request(Bytes{2, 1, 'n'}, parsed));     // no token_len
  CHECK_FALSE(parse_hello_request(Bytes{2, 1, 'n', 0}, parsed));  // half a token_len
  CHECK_FALSE(parse_hello_request(hello_v2_body(3, 2), parsed));  // token past the end
  const ParseResult leftover = parse_hello_request(hello_v2_body(3, 4), parsed);
  CHECK_FALSE(leftover);
  CHECK(leftover.error == WireErrorCode::kMalformedFrame);
  CHECK(leftover.reason == "bytes left after the HELLO token");
}

TEST_CASE("a HELLO version above 2 uses the version 2 layout") {
  Bytes out;
  encode_hello_request(out, 1, HelloRequest{9, "future", "tok"});
  const std::span<const std::uint8_t> body = body_of(out);
  CHECK(body.size() == 2 + 6 + 2 + 3);
  HelloRequest parsed;
  REQUIRE(parse_hello_request(body, parsed));
  CHECK(parsed.version == 9);
  CHECK(parsed.token == "tok");
}

TEST_CASE("a HELLO reply round-trips") {
  HelloReply hello;
  hello.version = 1;
  hello.this_shard = 2;
  hello.max_frame = 65536;
  hello.max_key = 128;
  hello.max_batch = 512;
  hello.shard_ports = {7101, 7102, 7103, 7104};
  hello.node_id = "node-a.example:7100";

  Bytes out;
  encode_hello_reply(out, 99, hello);
  const Frame frame = decode_whole(out);
  CHECK(frame.header.opcode == Opcode::kHello);
  CHECK(frame.header.is_reply());
  CHECK(frame.header.request_id == 99);
  CHECK(frame.body.size() == 16 + 2 * 4 + hello.node_id.size());

  HelloReply parsed;
  parsed.shard_ports = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  parsed.node_id = "something old and longer than the new one";
  REQUIRE(parse_hello_reply(frame.body, parsed));
  CHECK(parsed == hello);
}

TEST_CASE("a HELLO reply from the public port with one shard and no node id round-trips") {
  HelloReply hello;
  hello.shard_ports = {7100};
  Bytes out;
  encode_hello_reply(out, 1, hello);
  HelloReply parsed;
  REQUIRE(parse_hello_reply(body_of(out), parsed));
  CHECK(parsed == hello);
  CHECK(parsed.this_shard == kPublicPort);
}

TEST_CASE("a HELLO reply with an inconsistent body fails to parse") {
  HelloReply hello;
  hello.this_shard = 1;
  hello.shard_ports = {7101, 7102};
  hello.node_id = "n1";
  Bytes good;
  encode_hello_reply(good, 1, hello);
  const Bytes body(good.begin() + kHeaderSize, good.end());
  HelloReply parsed;
  REQUIRE(parse_hello_reply(body, parsed));

  SECTION("reserved byte set") {
    Bytes bad = body;
    bad[1] = 1;
    CHECK_FALSE(parse_hello_reply(bad, parsed));
  }
  SECTION("no shards") {
    Bytes bad = body;
    bad[12] = 0;  // shard_count
    CHECK_FALSE(parse_hello_reply(bad, parsed));
  }
  SECTION("this shard outside the list") {
    Bytes bad = body;
    bad[2] = 2;  // this_shard = 2 of 2
    CHECK_FALSE(parse_hello_reply(bad, parsed));
  }
  SECTION("shard ports past the end") {
    Bytes bad = body;
    bad[12] = 200;
    CHECK_FALSE(parse_hello_reply(bad, parsed));
  }
  SECTION("node id past the end") {
    const Bytes bad(body.begin(), body.end() - 1);
    CHECK_FALSE(parse_hello_reply(bad, parsed));
  }
  SECTION("trailing byte") {
    Bytes bad = body;
    bad.push_back(0);
    CHECK_FALSE(parse_hello_reply(bad, parsed));
  }
  SECTION("every truncation") {
    for (std::size_t size = 0; size < body.size(); ++size) {
      const Bytes cut(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(size));
      CHECK_FALSE(parse_hello_reply(cut, parsed));
    }
  }
}

// ---- PING ----------------------------------------------------------------------------------

TEST_CASE("a PING carries its payload and the reply echoes it with the reply flag") {
  const Bytes payload = {0xDE, 0xAD, 0xBE, 0xEF, 0x00};
  Bytes request;
  encode_ping(request, 5, payload, false);
  const Frame ping = decode_whole(request);
  CHECK(ping.header.opcode == Opcode::kPing);
  CHECK_FALSE(ping.header.is_reply());
  CHECK(Bytes(ping.body.begin(), ping.body.end()) == payload);

  Bytes reply;
  encode_ping(reply, ping.header.request_id, ping.body, true);
  const Frame pong = decode_whole(reply);
  CHECK(pong.header.is_reply());
  CHECK(pong.header.request_id == 5);
  CHECK(Bytes(pong.body.begin(), pong.body.end()) == payload);
}

TEST_CASE("a PING with an empty payload is just a header") {
  Bytes out;
  encode_ping(out, 1, {}, false);
  CHECK(out.size() == kHeaderSize);
}

// ---- ACQUIRE -------------------------------------------------------------------------------

TEST_CASE("an ACQUIRE request round-trips every field of every item") {
  const std::string long_key(kDefaultMaxKey, 'k');
  const std::vector<AcquireItem> items = {
      item("user:42", Algorithm::kTokenBucket, 10, 1000, 20),
      item("ip:10.0.0.1", Algorithm::kFixedWindow, 100, 60'000),
      item("a", Algorithm::kSlidingWindow, 5, 1, 0, 3),
      item("log", Algorithm::kSlidingLog, 10'000, kMaxPeriodMs, 0, 1, true),
      item(long_key, Algorithm::kGcra, UINT32_MAX, UINT64_MAX, UINT32_MAX, UINT32_MAX),
      item("zero", Algorithm::kGcra, 0, 0, 0, 0),
  };
  Bytes out;
  encode_acquire_request(out, 1234, items);
  const Frame frame = decode_whole(out);
  CHECK(frame.header.opcode == Opcode::kAcquire);
  CHECK_FALSE(frame.header.is_reply());
  CHECK(frame.header.request_id == 1234);

  std::vector<AcquireItem> parsed;
  REQUIRE(parse_acquire_request(frame.body, kDefaultMaxBatch, parsed));
  check_same_items(parsed, items);
  // Keys are views into the body, not copies.
  CHECK(reinterpret_cast<const std::uint8_t*>(parsed[0].key.data()) > frame.body.data());
  CHECK(reinterpret_cast<const std::uint8_t*>(parsed[0].key.data()) <
        frame.body.data() + frame.body.size());
}

TEST_CASE("an ACQUIRE request with no items round-trips") {
  Bytes out;
  encode_acquire_request(out, 1, {});
  std::vector<AcquireItem> parsed(3);
  REQUIRE(parse_acquire_request(body_of(out), kDefaultMaxBatch, parsed));
  CHECK(parsed.empty());
}

TEST_CASE("an unknown algorithm byte is kept as is, not refused") {
  for (const std::uint8_t algorithm : {0, 6, 200, 255}) {
    AcquireItem unknown = item("k", Algorithm::kGcra, 1, 1);
    unknown.rule.algorithm = static_cast<Algorithm>(algorithm);
    Bytes out;
    encode_acquire_request(out, 1, std::span(&unknown, 1));
    std::vector<AcquireItem> parsed;
    REQUIRE(parse_acquire_request(body_of(out), kDefaultMaxBatch, parsed));
    REQUIRE(parsed.size() == 1);
    CHECK(static_cast<std::uint8_t>(parsed[0].rule.algorithm) == algorithm);
    CHECK_FALSE(is_known_algorithm(static_cast<std::uint8_t>(parsed[0].rule.algorithm)));
  }
}

TEST_CASE("an empty key and a key over the max key are passed through for the server") {
  const std::string long_key(kDefaultMaxKey + 1, 'x');
  const std::vector<AcquireItem> items = {item("", Algorithm::kGcra, 1, 1),
                                          item(long_key, Algorithm::kGcra, 1, 1)};
  Bytes out;
  encode_acquire_request(out, 1, items);
  std::vector<AcquireItem> parsed;
  REQUIRE(parse_acquire_request(body_of(out), kDefaultMaxBatch, parsed));
  check_same_items(parsed, items);
}

TEST_CASE("a key longer than a u16 length is sent empty so the server answers kInvalidKey") {
  const std::string huge(70'000, 'h');
  const AcquireItem huge_item = item(huge, Algorithm::kGcra, 1, 1);
  Bytes out;
  encode_acquire_request(out, 1, std::span(&huge_item, 1));
  std::vector<AcquireItem> parsed;
  REQUIRE(parse_acquire_request(body_of(out), kDefaultMaxBatch, parsed));
  REQUIRE(parsed.size() == 1);
  CHECK(parsed[0].key.empty());

  const std::string_view keys[] = {huge};
  Bytes reset;
  encode_reset_request(reset, 2, keys);
  std::vector<std::string_view> parsed_keys;
  REQUIRE(parse_reset_request(body_of(reset), kDefaultMaxBatch, parsed_keys));
  REQUIRE(parsed_keys.size() == 1);
  CHECK(parsed_keys[0].empty());
}

TEST_CASE("incremental ACQUIRE encoding produces the same bytes as the one-shot encoder") {
  const std::vector<AcquireItem> items = {item("a", Algorithm::kGcra, 1, 1),
                                          item("bb", Algorithm::kTokenBucket, 2, 2, 4, 1, true),
                                          item("ccc", Algorithm::kSlidingLog, 3, 3)};
  Bytes one_shot;
  encode_acquire_request(one_shot, 77, items);

  Bytes incremental = {0xFF, 0xFE};  // frames may follow other bytes in the buffer
  const std::size_t start = begin_acquire_request(incremental, 77);
  CHECK(start == 2);
  for (const AcquireItem& each : items) add_acquire_item(incremental, start, each);
  finish_acquire_request(incremental, start);
  CHECK(Bytes(incremental.begin() + 2, incremental.end()) == one_shot);
}

TEST_CASE("an ACQUIRE request with more items than the max batch is refused as kBatchTooLarge") {
  std::vector<AcquireItem> items(9, item("k", Algorithm::kGcra, 1, 1));
  Bytes out;
  encode_acquire_request(out, 1, items);
  std::vector<AcquireItem> parsed;
  CHECK(parse_acquire_request(body_of(out), 9, parsed));
  const ParseResult result = parse_acquire_request(body_of(out), 8, parsed);
  CHECK_FALSE(result);
  CHECK(result.error == WireErrorCode::kBatchTooLarge);

  // The count alone decides: the check runs before any item is read.
  const ParseResult count_only = parse_acquire_request(acquire_body(9, {}), 8, parsed);
  CHECK(count_only.error == WireErrorCode::kBatchTooLarge);
}

TEST_CASE("a malformed ACQUIRE request body fails to parse as kMalformedFrame") {
  std::vector<AcquireItem> parsed;
  auto fails = [&](const Bytes& body) {
    const ParseResult result = parse_acquire_request(body, kDefaultMaxBatch, parsed);
    CHECK_FALSE(result.ok);
    CHECK(result.error == WireErrorCode::kMalformedFrame);
    CHECK_FALSE(result.reason.empty());
  };
  REQUIRE(parse_acquire_request(acquire_body(1, acquire_item_bytes(3, "abc")), kDefaultMaxBatch,
                                parsed));

  SECTION("body shorter than the list header") {
    fails({});
    fails({1, 0, 0});
  }
  SECTION("reserved list bytes set") { fails(acquire_body(1, acquire_item_bytes(3, "abc"), 1)); }
  SECTION("more items announced than present") {
    fails(acquire_body(2, acquire_item_bytes(3, "abc")));
  }
  SECTION("fixed part of an item past the end") {
    Bytes item_bytes = acquire_item_bytes(3, "abc");
    item_bytes.resize(20);
    fails(acquire_body(1, item_bytes));
  }
  SECTION("key past the end") { fails(acquire_body(1, acquire_item_bytes(4, "abc"))); }
  SECTION("key length claims the next item's bytes") {
    Bytes items = acquire_item_bytes(30, "abc");
    const Bytes second = acquire_item_bytes(3, "def");
    items.insert(items.end(), second.begin(), second.end());
    fails(acquire_body(2, items));
  }
  SECTION("trailing bytes after the last item") {
    fails(acquire_body(1, acquire_item_bytes(2, "abc")));
  }
  SECTION("unknown item flag bits") {
    for (int bit = 3; bit < 8; ++bit) {
      fails(acquire_body(1, acquire_item_bytes(3, "abc", static_cast<std::uint8_t>(1u << bit))));
    }
  }
  SECTION("two of peek, lease and give back") {
    for (const std::uint8_t flags : {0x03, 0x05, 0x06, 0x07}) {
      Bytes item_bytes = acquire_item_bytes(3, "abc", flags);
      item_bytes.insert(item_bytes.end(), {0, 0, 0, 0});  // a stamp, in case it is read
      fails(acquire_body(1, item_bytes));
    }
  }
  SECTION("a give-back item without its stamp") {
    fails(acquire_body(1, acquire_item_bytes(3, "abc", kItemFlagGiveBack)));
    Bytes short_stamp = acquire_item_bytes(3, "abc", kItemFlagGiveBack);
    short_stamp.insert(short_stamp.end(), {1, 2, 3});
    fails(acquire_body(1, short_stamp));
  }
}

TEST_CASE("lease and give-back items round-trip, a give-back with its stamp after the key") {
  AcquireItem lease = item("hot", Algorithm::kTokenBucket, 1000, 1000, 0, kMaxLeaseUnits);
  lease.lease = true;
  AcquireItem back = item("hot", Algorithm::kFixedWindow, 1000, 1000, 0, 7);
  back.give_back = true;
  back.stamp = 0xA1B2C3D4;
  const std::vector<AcquireItem> items = {lease, back, item("plain", Algorithm::kGcra, 1, 1)};
  Bytes out;
  encode_acquire_request(out, 9, items);
  const Frame frame = decode_whole(out);
  // 4 (list) + 24 + 3 + 24 + 3 + 4 (the stamp) + 24 + 5.
  CHECK(frame.body.size() == 4 + 27 + 31 + 29);
  std::vector<AcquireItem> parsed;
  REQUIRE(parse_acquire_request(frame.body, kDefaultMaxBatch, parsed));
  check_same_items(parsed, items);
  // The stamp's bytes, least significant first, right after the key.
  const std::size_t stamp_at = 4 + 27 + 24 + 3;
  CHECK(frame.body[stamp_at] == 0xD4);
  CHECK(frame.body[stamp_at + 3] == 0xA1);
  // The item flags byte.
  CHECK(frame.body[4 + 1] == kItemFlagLease);
  CHECK(frame.body[4 + 27 + 1] == kItemFlagGiveBack);
  // Incremental encoding writes the same bytes.
  Bytes incremental;
  const std::size_t start = begin_acquire_request(incremental, 9);
  for (const AcquireItem& each : items) add_acquire_item(incremental, start, each);
  finish_acquire_request(incremental, start);
  CHECK(incremental == out);
}

TEST_CASE("a result's granted units travel in 24 bits after its status") {
  const std::vector<AcquireResult> results = {
      {ItemStatus::kAllowed, 100, 90, 500, 42, 10},
      {ItemStatus::kAllowed, 100, 0, 500, 0, kMaxLeaseUnits},
      {ItemStatus::kDenied, 100, 0, 500, 80, 0},
  };
  Bytes out;
  encode_acquire_reply(out, 1, results);
  const Frame frame = decode_whole(out);
  CHECK(frame.body[4 + 1] == 10);
  CHECK(frame.body[4 + 28 + 1] == 0xFF);
  CHECK(frame.body[4 + 28 + 3] == 0xFF);
  std::vector<AcquireResult> parsed;
  REQUIRE(parse_acquire_reply(frame.body, parsed));
  CHECK(parsed == results);
}

TEST_CASE("an ACQUIRE reply round-trips, including never") {
  const std::vector<AcquireResult> results = {
      {ItemStatus::kAllowed, 20, 19, 100, 0},
      {ItemStatus::kDenied, 20, 0, 2000, 100},
      {ItemStatus::kDenied, 5, 0, 0, kNever},
      {ItemStatus::kInvalidRule, 0, 0, 0, 0},
      {ItemStatus::kInvalidKey, 0, 0, 0, 0},
      {ItemStatus::kNoMemory, UINT32_MAX, UINT32_MAX, UINT64_MAX - 1, UINT64_MAX - 1},
  };
  Bytes out;
  encode_acquire_reply(out, 4321, results);
  const Frame frame = decode_whole(out);
  CHECK(frame.header.opcode == Opcode::kAcquire);
  CHECK(frame.header.is_reply());
  CHECK(frame.header.request_id == 4321);
  CHECK(frame.body.size() == 4 + 28 * results.size());

  std::vector<AcquireResult> parsed(10);
  REQUIRE(parse_acquire_reply(frame.body, parsed));
  CHECK(parsed == results);
}

TEST_CASE("a malformed ACQUIRE reply body fails to parse") {
  const std::vector<AcquireResult> results = {{ItemStatus::kAllowed, 1, 0, 1, 0}};
  Bytes out;
  encode_acquire_reply(out, 1, results);
  const Bytes body(out.begin() + kHeaderSize, out.end());
  std::vector<AcquireResult> parsed;
  REQUIRE(parse_acquire_reply(body, parsed));

  for (std::size_t size = 0; size < body.size(); ++size) {
    const Bytes cut(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(size));
    CHECK_FALSE(parse_acquire_reply(cut, parsed));
  }
  Bytes trailing = body;
  trailing.push_back(0);
  CHECK_FALSE(parse_acquire_reply(trailing, parsed));
  Bytes unknown_status = body;
  unknown_status[4] = 7;  // 5 and 6 are REDIRECT and UNAVAILABLE (protocol 3)
  CHECK_FALSE(parse_acquire_reply(unknown_status, parsed));
  for (const std::size_t offset : {2, 3}) {  // list reserved
    Bytes reserved = body;
    reserved[offset] = 1;
    CHECK_FALSE(parse_acquire_reply(reserved, parsed));
  }
}

TEST_CASE("a decision becomes a result in whole milliseconds, rounded up") {
  Verdict allowed;
  allowed.allowed = true;
  allowed.limit = 20;
  allowed.remaining = 19;
  allowed.reset_after_ns = 100'000'000;
  allowed.retry_after_ns = 0;
  CHECK(to_result(allowed) == AcquireResult{ItemStatus::kAllowed, 20, 19, 100, 0});

  Verdict denied;
  denied.limit = 20;
  denied.reset_after_ns = 1'999'999'999;
  denied.retry_after_ns = 1;
  CHECK(to_result(denied) == AcquireResult{ItemStatus::kDenied, 20, 0, 2000, 1});

  Verdict never;
  never.retry_after_ns = kNever;
  never.reset_after_ns = kNever;
  const AcquireResult result = to_result(never);
  CHECK(result.status == ItemStatus::kDenied);
  CHECK(result.retry_after_ms == kNever);
  CHECK(result.reset_after_ms == kNever);
}

TEST_CASE("item statuses have stable names") {
  CHECK(item_status_name(ItemStatus::kDenied) == "denied");
  CHECK(item_status_name(ItemStatus::kAllowed) == "allowed");
  CHECK(item_status_name(ItemStatus::kInvalidRule) == "invalid_rule");
  CHECK(item_status_name(ItemStatus::kInvalidKey) == "invalid_key");
  CHECK(item_status_name(ItemStatus::kNoMemory) == "no_memory");
  CHECK(item_status_name(static_cast<ItemStatus>(77)) == "unknown");
}

// ---- RESET ---------------------------------------------------------------------------------

TEST_CASE("a RESET request round-trips") {
  const std::string_view keys[] = {"user:1", "", "user:2", "x"};
  Bytes out;
  encode_reset_request(out, 6, keys);
  const Frame frame = decode_whole(out);
  CHECK(frame.header.opcode == Opcode::kReset);
  CHECK_FALSE(frame.header.is_reply());
  std::vector<std::string_view> parsed;
  REQUIRE(parse_reset_request(frame.body, kDefaultMaxBatch, parsed));
  CHECK(parsed == std::vector<std::string_view>(std::begin(keys), std::end(keys)));
}

TEST_CASE("a malformed RESET request body fails to parse") {
  const std::string_view keys[] = {"ab", "cd"};
  Bytes out;
  encode_reset_request(out, 1, keys);
  const Bytes body(out.begin() + kHeaderSize, out.end());
  std::vector<std::string_view> parsed;
  REQUIRE(parse_reset_request(body, kDefaultMaxBatch, parsed));

  CHECK(parse_reset_request(body, 1, parsed).error == WireErrorCode::kBatchTooLarge);
  for (std::size_t size = 0; size < body.size(); ++size) {
    const Bytes cut(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(size));
    const ParseResult result = parse_reset_request(cut, kDefaultMaxBatch, parsed);
    CHECK_FALSE(result);
    CHECK(result.error == WireErrorCode::kMalformedFrame);
  }
  Bytes trailing = body;
  trailing.push_back('z');
  CHECK_FALSE(parse_reset_request(trailing, kDefaultMaxBatch, parsed));
  Bytes reserved = body;
  reserved[3] = 1;
  CHECK_FALSE(parse_reset_request(reserved, kDefaultMaxBatch, parsed));
}

TEST_CASE("a RESET reply round-trips and refuses unknown statuses") {
  const std::vector<ResetStatus> statuses = {ResetStatus::kRemoved, ResetStatus::kAbsent,
                                             ResetStatus::kInvalidKey};
  Bytes out;
  encode_reset_reply(out, 6, statuses);
  const Frame frame = decode_whole(out);
  CHECK(frame.header.is_reply());
  CHECK(frame.body.size() == 4 + 3);
  std::vector<ResetStatus> parsed;
  REQUIRE(parse_reset_reply(frame.body, parsed));
  CHECK(parsed == statuses);

  const Bytes body(frame.body.begin(), frame.body.end());
  Bytes unknown = body;
  unknown[5] = 2;
  CHECK_FALSE(parse_reset_reply(unknown, parsed));
  Bytes trailing = body;
  trailing.push_back(1);
  CHECK_FALSE(parse_reset_reply(trailing, parsed));
  for (std::size_t size = 0; size < body.size(); ++size) {
    const Bytes cut(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(size));
    CHECK_FALSE(parse_reset_reply(cut, parsed));
  }
}

// ---- STATS ---------------------------------------------------------------------------------

TEST_CASE("a STATS request is a header with an empty body") {
  Bytes out;
  encode_stats_request(out, 3);
  const Frame frame = decode_whole(out);
  CHECK(frame.header.opcode == Opcode::kStats);
  CHECK(frame.body.empty());
  CHECK(parse_stats_request(frame.body));
  CHECK_FALSE(parse_stats_request(Bytes{0}));
}

TEST_CASE("a STATS reply round-trips") {
  const std::vector<StatEntry> stats = {
      {"total.keys", 12345}, {"shard.0.allowed", 0}, {"", UINT64_MAX}, {std::string(255, 's'), 7}};
  Bytes out;
  encode_stats_reply(out, 3, stats);
  const Frame frame = decode_whole(out);
  CHECK(frame.header.is_reply());
  std::vector<StatEntry> parsed = {{"old", 1}};
  REQUIRE(parse_stats_reply(frame.body, parsed));
  CHECK(parsed == stats);
}

TEST_CASE("a STATS reply around a body encoded once is byte for byte the one-step reply") {
  const std::vector<StatEntry> stats = {{"total.keys", 12345}, {"shard.0.allowed", 9}};
  Bytes body;
  encode_stats_body(body, stats);
  Bytes one_step;
  Bytes two_steps;
  encode_stats_reply(one_step, 41, stats);
  encode_stats_reply_with_body(two_steps, 41, body);
  CHECK(two_steps == one_step);
}

TEST_CASE("a stat name longer than 255 bytes is cut to 255") {
  const std::vector<StatEntry> stats = {{std::string(256, 'q'), 1}};
  Bytes out;
  encode_stats_reply(out, 3, stats);
  std::vector<StatEntry> parsed;
  REQUIRE(parse_stats_reply(body_of(out), parsed));
  REQUIRE(parsed.size() == 1);
  CHECK(parsed[0].name == std::string(255, 'q'));
}

TEST_CASE("a malformed STATS reply body fails to parse") {
  const std::vector<StatEntry> stats = {{"a", 1}, {"bc", 2}};
  Bytes out;
  encode_stats_reply(out, 1, stats);
  const Bytes body(out.begin() + kHeaderSize, out.end());
  std::vector<StatEntry> parsed;
  REQUIRE(parse_stats_reply(body, parsed));
  for (std::size_t size = 0; size < body.size(); ++size) {
    const Bytes cut(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(size));
    CHECK_FALSE(parse_stats_reply(cut, parsed));
  }
  Bytes trailing = body;
  trailing.push_back(0);
  CHECK_FALSE(parse_stats_reply(trailing, parsed));
  Bytes long_name = body;
  long_name[2] = 40;  // first name runs past the end
  CHECK_FALSE(parse_stats_reply(long_name, parsed));
}

// ---- ERROR ---------------------------------------------------------------------------------

TEST_CASE("an ERROR reply round-trips with the request id it refers to") {
  Bytes out;
  encode_error(out, 17, WireErrorCode::kBatchTooLarge, "4097 items, max batch is 4096");
  const Frame frame = decode_whole(out);
  CHECK(frame.header.opcode == Opcode::kError);
  CHECK(frame.header.is_reply());
  CHECK(frame.header.request_id == 17);
  ErrorReply parsed;
  REQUIRE(parse_error(frame.body, parsed));
  CHECK(parsed.code == WireErrorCode::kBatchTooLarge);
  CHECK(parsed.message == "4097 items, max batch is 4096");
}

TEST_CASE("an ERROR reply keeps an unknown code and cuts an overlong message") {
  Bytes body = {0xE8, 0x03, 0x02, 0x00, 'h', 'i'};  // code 1000
  ErrorReply parsed;
  REQUIRE(parse_error(body, parsed));
  CHECK(static_cast<std::uint16_t>(parsed.code) == 1000);
  CHECK(parsed.message == "hi");

  const std::string huge(70'000, 'm');
  Bytes out;
  encode_error(out, 1, WireErrorCode::kInternal, huge);
  REQUIRE(parse_error(body_of(out), parsed));
  CHECK(parsed.message.size() == 65535);
}

TEST_CASE("a malformed ERROR body fails to parse") {
  ErrorReply parsed;
  CHECK_FALSE(parse_error(Bytes{}, parsed));
  CHECK_FALSE(parse_error(Bytes{1, 0, 0}, parsed));
  CHECK_FALSE(parse_error(Bytes{1, 0, 3, 0, 'a', 'b'}, parsed));
  CHECK_FALSE(parse_error(Bytes{1, 0, 1, 0, 'a', 'b'}, parsed));
}

// ---- buffers -------------------------------------------------------------------------------

TEST_CASE("parsers reuse the out-param's storage once it is large enough") {
  std::vector<AcquireItem> items;
  std::vector<std::string> keys;
  for (int i = 0; i < 64; ++i) keys.push_back("tenant:" + std::to_string(i) + ":user");
  for (const std::string& key : keys) items.push_back(item(key, Algorithm::kGcra, 10, 1000));
  Bytes big;
  encode_acquire_request(big, 1, items);
  Bytes small;
  encode_acquire_request(small, 2, std::span(items).first(3));

  std::vector<AcquireItem> parsed;
  REQUIRE(parse_acquire_request(body_of(big), kDefaultMaxBatch, parsed));
  const AcquireItem* storage = parsed.data();
  REQUIRE(parse_acquire_request(body_of(small), kDefaultMaxBatch, parsed));
  CHECK(parsed.size() == 3);
  REQUIRE(parse_acquire_request(body_of(big), kDefaultMaxBatch, parsed));
  CHECK(parsed.data() == storage);

  std::vector<StatEntry> stats = {{std::string(100, 'a'), 1}};
  Bytes stats_bytes;
  encode_stats_reply(stats_bytes, 1, stats);
  std::vector<StatEntry> parsed_stats;
  REQUIRE(parse_stats_reply(body_of(stats_bytes), parsed_stats));
  const char* name_storage = parsed_stats[0].name.data();
  REQUIRE(parse_stats_reply(body_of(stats_bytes), parsed_stats));
  CHECK(parsed_stats[0].name.data() == name_storage);
}

TEST_CASE("encoders append to a reused buffer without disturbing what is already there") {
  Bytes out;
  encode_ping(out, 1, bytes_of("first"), false);
  const Bytes first = out;
  encode_error(out, 2, WireErrorCode::kShuttingDown, "bye");
  CHECK(Bytes(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(first.size())) == first);

  out.clear();
  encode_ping(out, 1, bytes_of("first"), false);
  CHECK(out == first);
}

}  // namespace sluice::protocol
