// Protocol 6's INSPECT: round trips, the layout of docs/PROTOCOL.md section 12, and the bodies
// its parsers refuse.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string_view>
#include <vector>

#include "protocol/cluster_messages.h"
#include "protocol/frame.h"
#include "tests/protocol/frame_support.h"

namespace sluice::protocol {
namespace {

using testing::decode_whole;

InspectReply stored_sliding_log() {
  InspectReply reply;
  reply.status = InspectStatus::kStored;
  reply.role = InspectRole::kReplica;
  reply.shard = 3;
  reply.now_ns = 5'000;
  reply.record.fp_lo = 0x1111;
  reply.record.fp_hi = 0x2222;
  reply.record.algorithm = 3;  // sliding log
  reply.record.capacity_class = 9;
  reply.record.idle_at_ns = 9'000;
  return reply;
}

TEST_CASE("an INSPECT request carries its key, and a body that does not hold it is refused") {
  Bytes request;
  encode_inspect_request(request, 4, "user:1", Framing{kFrameVersionEpoch, 8});
  const Frame frame = decode_whole(request);
  CHECK(frame.header.opcode == Opcode::kInspect);
  CHECK(frame.header.epoch == 8);
  std::string_view key;
  REQUIRE(parse_inspect_request(frame.body, key));
  CHECK(key == "user:1");
  CHECK(std::vector<std::uint8_t>(frame.body.begin(), frame.body.end()) ==
        std::vector<std::uint8_t>{6, 0, 'u', 's', 'e', 'r', ':', '1'});

  // An empty key parses: the server answers it INVALID_KEY, not as a malformed frame.
  const std::uint8_t empty[] = {0, 0};
  REQUIRE(parse_inspect_request(empty, key));
  CHECK(key.empty());
  const std::uint8_t short_key[] = {3, 0, 'a', 'b'};
  CHECK_FALSE(parse_inspect_request(short_key, key));
  const std::uint8_t extra[] = {1, 0, 'a', 0};
  CHECK_FALSE(parse_inspect_request(extra, key));
  const std::uint8_t one_byte[] = {1};
  CHECK_FALSE(parse_inspect_request(one_byte, key));
}

TEST_CASE("an INSPECT reply round-trips a stored record with its log, and absent with none") {
  const std::vector<std::uint64_t> log = {100, 200, 300};
  Bytes bytes;
  encode_inspect_reply(bytes, 4, stored_sliding_log(), log);
  const Frame frame = decode_whole(bytes);
  CHECK(frame.header.is_reply());
  CHECK(frame.body.size() == 16 + kRecordFixedSize + 3 * 8);
  InspectReply parsed;
  REQUIRE(parse_inspect_reply(frame.body, parsed));
  CHECK(parsed.status == InspectStatus::kStored);
  CHECK(parsed.role == InspectRole::kReplica);
  CHECK(parsed.shard == 3);
  CHECK(parsed.now_ns == 5'000);
  CHECK(parsed.record.fp_lo == 0x1111);
  CHECK(parsed.record.fp_hi == 0x2222);
  CHECK(parsed.record.capacity_class == 9);
  CHECK(parsed.record.idle_at_ns == 9'000);
  REQUIRE(parsed.record.log_count == 3);
  CHECK(parsed.record.log_at(2) == 300);

  InspectReply absent;
  absent.role = InspectRole::kPrimary;
  absent.partition_state = 1;  // pulling
  absent.now_ns = 7;
  Bytes none;
  encode_inspect_reply(none, 5, absent, {});
  const Frame none_frame = decode_whole(none);
  CHECK(none_frame.body.size() == 16);
  REQUIRE(parse_inspect_reply(none_frame.body, parsed));
  CHECK(parsed.status == InspectStatus::kAbsent);
  CHECK(parsed.partition_state == 1);
  CHECK(parsed.record.log_count == 0);
}

TEST_CASE("an INSPECT reply with a bad status, role, state, reserved byte or record is refused") {
  Bytes bytes;
  encode_inspect_reply(bytes, 4, stored_sliding_log(), std::vector<std::uint64_t>{1});
  const Bytes good(bytes.begin() + kHeaderSize, bytes.end());
  InspectReply parsed;
  REQUIRE(parse_inspect_reply(good, parsed));
  const auto refused = [&](auto change) {
    Bytes body = good;
    change(body);
    return !parse_inspect_reply(body, parsed);
  };
  CHECK(refused([](Bytes& b) { b[0] = 2; }));        // an unused status value
  CHECK(refused([](Bytes& b) { b[0] = 0; }));        // ABSENT with a record after it
  CHECK(refused([](Bytes& b) { b[1] = 4; }));        // an unknown role
  CHECK(refused([](Bytes& b) { b[2] = 1; }));        // a partition state for a replica
  CHECK(refused([](Bytes& b) { b[3] = 1; }));        // reserved
  CHECK(refused([](Bytes& b) { b[6] = 1; }));        // reserved
  CHECK(refused([](Bytes& b) { b[16 + 16] = 0; }));  // a reset record
  CHECK(refused([](Bytes& b) { b.pop_back(); }));    // the log cut short
  CHECK(refused([](Bytes& b) { b.push_back(0); }));  // a byte after the record
  CHECK(refused([](Bytes& b) { b.resize(15); }));    // the fixed part cut short

  // A primary may be pulling or fenced, nothing beyond.
  InspectReply primary;
  primary.role = InspectRole::kPrimary;
  primary.partition_state = 2;
  Bytes fenced;
  encode_inspect_reply(fenced, 1, primary, {});
  Bytes body(fenced.begin() + kHeaderSize, fenced.end());
  REQUIRE(parse_inspect_reply(body, parsed));
  body[2] = 3;
  CHECK_FALSE(parse_inspect_reply(body, parsed));
}

}  // namespace
}  // namespace sluice::protocol
