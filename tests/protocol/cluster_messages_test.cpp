// Protocol 3's cluster messages: round trips, the layouts of docs/PROTOCOL.md section 10, and
// the malformed bodies each parser refuses.
#include "protocol/cluster_messages.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/frame.h"
#include "protocol/messages.h"
#include "tests/protocol/frame_support.h"

namespace sluice::protocol {
namespace {

using testing::decode_whole;

ClusterMapMessage three_nodes() {
  ClusterMapMessage map;
  map.epoch = 42;
  map.ring_version = 1;
  map.partition_bits = 16;
  map.vnodes = 4096;
  map.self = 1;
  map.nodes = {{WireNodeState::kActive, "a", "10.0.0.1", 7420},
               {WireNodeState::kDraining, "b", "[::1]", 7421},
               {WireNodeState::kJoining, "c.example", "sluice-3.internal", 7422}};
  return map;
}

TEST_CASE("a CLUSTER reply round-trips the map, in framing version 2 with the epoch") {
  Bytes out;
  encode_cluster_reply(out, 3, three_nodes(), Framing::with_epoch(42));
  const Frame frame = decode_whole(out);
  CHECK(frame.header.opcode == Opcode::kCluster);
  CHECK(frame.header.is_reply());
  CHECK(frame.header.epoch == 42);
  ClusterMapMessage parsed;
  REQUIRE(parse_cluster_reply(frame.body, parsed));
  CHECK(parsed == three_nodes());
  // 16 fixed bytes, then per node: state, id_len, id, host_len, host, port.
  CHECK(frame.body.size() ==
        16 + (1 + 1 + 1 + 1 + 8 + 2) + (1 + 1 + 1 + 1 + 5 + 2) + (1 + 1 + 9 + 1 + 17 + 2));
  CHECK(frame.body[16] == 1);  // the first node's state: active
}

TEST_CASE("a CLUSTER reply with nodes out of order, a bad id, a bad state or self is refused") {
  const auto refused = [](ClusterMapMessage map) {
    Bytes out;
    encode_cluster_reply(out, 1, map);
    ClusterMapMessage parsed;
    return !parse_cluster_reply(decode_whole(out).body, parsed);
  };
  ClusterMapMessage unsorted = three_nodes();
  std::swap(unsorted.nodes[0], unsorted.nodes[1]);
  CHECK(refused(unsorted));
  ClusterMapMessage repeated = three_nodes();
  repeated.nodes[1].id = "a";
  CHECK(refused(repeated));
  ClusterMapMessage bad_id = three_nodes();
  bad_id.nodes[2].id = "c d";
  CHECK(refused(bad_id));
  ClusterMapMessage no_host = three_nodes();
  no_host.nodes[0].host.clear();
  CHECK(refused(no_host));
  ClusterMapMessage bad_self = three_nodes();
  bad_self.self = 3;
  CHECK(refused(bad_self));
  ClusterMapMessage outsider = three_nodes();
  outsider.self = kNotAMember;
  CHECK_FALSE(refused(outsider));

  Bytes out;
  encode_cluster_reply(out, 1, three_nodes());
  out[kHeaderSize + 16] = 4;  // the first node's state
  ClusterMapMessage parsed;
  CHECK_FALSE(parse_cluster_reply(decode_whole(out).body, parsed));
  Bytes longer;
  encode_cluster_reply(longer, 1, three_nodes());
  longer.push_back(0);
  finish_frame(longer, 0);
  CHECK_FALSE(parse_cluster_reply(decode_whole(longer).body, parsed));
}

TEST_CASE("an empty cluster map is a node outside any cluster") {
  Bytes out;
  encode_cluster_reply(out, 1, ClusterMapMessage{});
  ClusterMapMessage parsed = three_nodes();
  REQUIRE(parse_cluster_reply(decode_whole(out).body, parsed));
  CHECK(parsed.epoch == 0);
  CHECK(parsed.nodes.empty());
  CHECK(parsed.self == kNotAMember);
}

WireRecord bucket_record() {
  WireRecord r;
  r.fp_lo = 0x1111;
  r.fp_hi = 0x2222;
  r.algorithm = static_cast<std::uint8_t>(Algorithm::kTokenBucket);
  r.state_a = 123456789;
  r.state_b = 0x0000000500000003ull;
  r.idle_at_ns = 999;
  return r;
}

TEST_CASE("REPLICATE carries records with their state and a sliding log's timestamps") {
  Bytes out;
  const RecordFrame frame = begin_replicate_request(out, 8, Framing::with_epoch(5));
  add_record(out, frame, bucket_record(), {});
  WireRecord log;
  log.fp_lo = 7;
  log.fp_hi = 8;
  log.algorithm = static_cast<std::uint8_t>(Algorithm::kSlidingLog);
  log.idle_at_ns = 5000;
  const std::vector<std::uint64_t> timestamps = {100, 200, 300};
  add_record(out, frame, log, timestamps);
  WireRecord reset;
  reset.fp_lo = 9;
  add_record(out, frame, reset, {});
  CHECK(record_count(out, frame) == 3);
  finish_records(out, frame);

  const Frame decoded = decode_whole(out);
  CHECK(decoded.header.opcode == Opcode::kReplicate);
  CHECK(decoded.header.epoch == 5);
  CHECK(decoded.body.size() == 4 + record_size(0) + record_size(3) + record_size(0));
  std::vector<WireRecord> records;
  REQUIRE(parse_replicate_request(decoded.body, records));
  REQUIRE(records.size() == 3);
  CHECK(records[0].fp_lo == 0x1111);
  CHECK(records[0].fp_hi == 0x2222);
  CHECK(records[0].state_a == 123456789);
  CHECK(records[0].state_b == 0x0000000500000003ull);
  CHECK(records[0].idle_at_ns == 999);
  CHECK(records[0].log_count == 0);
  REQUIRE(records[1].log_count == 3);
  CHECK(records[1].log_at(0) == 100);
  CHECK(records[1].log_at(2) == 300);
  CHECK(records[2].algorithm == kRecordReset);
}

TEST_CASE("a malformed record is refused") {
  const auto with = [](auto change) {
    Bytes out;
    const RecordFrame frame = begin_replicate_request(out, 1);
    add_record(out, frame, bucket_record(), {});
    finish_records(out, frame);
    change(out);
    std::vector<WireRecord> records;
    return static_cast<bool>(parse_replicate_request(decode_whole(out).body, records));
  };
  const std::size_t record = kHeaderSize + 4;
  CHECK(with([](Bytes&) {}));
  CHECK_FALSE(with([&](Bytes& b) { b[record + 16] = 6; }));   // unknown algorithm
  CHECK_FALSE(with([&](Bytes& b) { b[record + 18] = 1; }));   // reserved
  CHECK_FALSE(with([&](Bytes& b) { b[record + 17] = 16; }));  // capacity class above 15
  CHECK(with([&](Bytes& b) { b[record + 17] = 15; }));
  CHECK_FALSE(with([&](Bytes& b) { b[record + 20] = 1; }));  // timestamps outside a sliding log
  CHECK_FALSE(with([&](Bytes& b) {                           // a sliding log with state fields
    b[record + 16] = static_cast<std::uint8_t>(Algorithm::kSlidingLog);
  }));
  CHECK_FALSE(with([&](Bytes& b) { b[kHeaderSize] = 2; }));  // count above the records there
  CHECK_FALSE(with([&](Bytes& b) {
    b.push_back(0);
    finish_frame(b, 0);
  }));
}

TEST_CASE("a PULL request and its paged reply round-trip") {
  PullRequest request;
  request.fence = true;
  request.max_records = 512;
  request.cursor = 0x0123456789abcdefull;
  request.partitions = {0, 7, 65535};
  Bytes out;
  encode_pull_request(out, 11, request, Framing::with_epoch(9));
  const Frame frame = decode_whole(out);
  CHECK(frame.header.opcode == Opcode::kPull);
  CHECK(frame.body.size() == 14 + 2 * 3);
  PullRequest parsed;
  REQUIRE(parse_pull_request(frame.body, parsed));
  CHECK(parsed == request);

  Bytes reply;
  const RecordFrame page =
      begin_pull_reply(reply, 11, PullReplyHeader{true, false, 0x1234'0000'5678ull, std::nullopt},
                       Framing::with_epoch(9));
  add_record(reply, page, bucket_record(), {});
  finish_records(reply, page);
  PullReplyHeader header;
  std::vector<WireRecord> records;
  REQUIRE(parse_pull_reply(decode_whole(reply).body, header, records));
  CHECK(header.fenced);
  CHECK_FALSE(header.done);
  CHECK(header.next_cursor == 0x1234'0000'5678ull);
  REQUIRE(records.size() == 1);
  CHECK(records[0].state_a == 123456789);
}

TEST_CASE("a PULL request outside its limits is refused") {
  const auto refused = [](PullRequest request) {
    Bytes out;
    encode_pull_request(out, 1, request);
    PullRequest parsed;
    return !parse_pull_request(decode_whole(out).body, parsed);
  };
  PullRequest ok{false, 1, 0, {3}, std::nullopt};
  CHECK_FALSE(refused(ok));
  PullRequest zero = ok;
  zero.max_records = 0;
  CHECK(refused(zero));
  PullRequest many = ok;
  many.max_records = kMaxPullRecords + 1;
  CHECK(refused(many));
  PullRequest top = ok;
  top.max_records = kMaxPullRecords;
  CHECK_FALSE(refused(top));
  Bytes out;
  encode_pull_request(out, 1, ok);
  out[kHeaderSize] = 0x04;  // an unknown flag
  PullRequest parsed;
  CHECK_FALSE(parse_pull_request(decode_whole(out).body, parsed));
  // The since flag without its eight bytes, and since bytes without the flag.
  Bytes flagged;
  encode_pull_request(flagged, 1, ok);
  flagged[kHeaderSize] = kPullSince;
  CHECK_FALSE(parse_pull_request(decode_whole(flagged).body, parsed));
  PullRequest since = ok;
  since.since_ns = 5;
  Bytes unflagged;
  encode_pull_request(unflagged, 1, since);
  unflagged[kHeaderSize] = 0;
  CHECK_FALSE(parse_pull_request(decode_whole(unflagged).body, parsed));
}

TEST_CASE("a PULL with since carries it after the partitions, and its reply the source's clock") {
  PullRequest request;
  request.max_records = 64;
  request.partitions = {9, 10};
  request.since_ns = 0x1122'3344'5566'7788ull;
  Bytes out;
  encode_pull_request(out, 12, request, Framing::with_epoch(3));
  const Frame frame = decode_whole(out);
  REQUIRE(frame.body.size() == 14 + 2 * 2 + 8);
  CHECK(frame.body[0] == kPullSince);
  CHECK(frame.body[18] == 0x88);  // since_ns, little-endian, right after the partitions
  CHECK(frame.body[25] == 0x11);
  PullRequest parsed;
  REQUIRE(parse_pull_request(frame.body, parsed));
  CHECK(parsed == request);
  // since 0 is "every record", still with the clock in the reply.
  request.since_ns = 0;
  Bytes zero;
  encode_pull_request(zero, 13, request);
  REQUIRE(parse_pull_request(decode_whole(zero).body, parsed));
  REQUIRE(parsed.since_ns.has_value());
  CHECK(*parsed.since_ns == 0);

  Bytes reply;
  PullReplyHeader sent{false, false, 0, 777};
  const RecordFrame page = begin_pull_reply(reply, 12, sent, Framing::with_epoch(3));
  add_record(reply, page, bucket_record(), {});
  sent.done = true;
  sent.now_ns = 0xabcdef;
  set_pull_reply_header(reply, page, sent);
  finish_records(reply, page);
  const Frame reply_frame = decode_whole(reply);
  CHECK(reply_frame.body[0] == (kPullDone | kPullClock));
  PullReplyHeader header;
  std::vector<WireRecord> records;
  REQUIRE(parse_pull_reply(reply_frame.body, header, records));
  CHECK(header.done);
  REQUIRE(header.now_ns.has_value());
  CHECK(*header.now_ns == 0xabcdef);
  REQUIRE(records.size() == 1);
  CHECK(records[0].state_a == 123456789);
  // A clock flag without its eight bytes is refused.
  Bytes cut;
  const RecordFrame empty = begin_pull_reply(cut, 14, PullReplyHeader{});
  finish_records(cut, empty);
  cut[kHeaderSize] = kPullClock;
  CHECK_FALSE(parse_pull_reply(decode_whole(cut).body, header, records));
}

TEST_CASE("REPLICATE and RELOAD replies round-trip, and their requests must be empty") {
  Bytes out;
  encode_replicate_reply(out, 2, ReplicateReply{250, 6});
  ReplicateReply replicate;
  REQUIRE(parse_replicate_reply(decode_whole(out).body, replicate));
  CHECK(replicate == ReplicateReply{250, 6});

  Bytes reload;
  encode_reload_reply(reload, 3, ReloadReply{17, "cluster.txt:4: duplicate id"});
  ReloadReply parsed;
  REQUIRE(parse_reload_reply(decode_whole(reload).body, parsed));
  CHECK(parsed.epoch == 17);
  CHECK(parsed.message == "cluster.txt:4: duplicate id");

  Bytes request;
  encode_cluster_request(request, 4);
  encode_reload_request(request, 5);
  const DecodeResult first = FrameDecoder().decode(request);
  REQUIRE(first.status == DecodeStatus::kOk);
  CHECK(parse_cluster_request(first.frame.body));
  const std::uint8_t junk[] = {1};
  CHECK_FALSE(parse_cluster_request(junk));
  CHECK_FALSE(parse_reload_request(junk));
}

TEST_CASE("DRAIN names its node, and its reply round-trips apart from RELOAD's") {
  Bytes request;
  encode_drain_request(request, 6, "node-2");
  const DecodeResult decoded = FrameDecoder().decode(request);
  REQUIRE(decoded.status == DecodeStatus::kOk);
  CHECK(decoded.frame.header.opcode == Opcode::kDrain);
  std::string_view node;
  REQUIRE(parse_drain_request(decoded.frame.body, node));
  CHECK(node == "node-2");
  // Byte by byte (PROTOCOL.md 10.7): u8 id_len, id.
  const std::vector<std::uint8_t> body(decoded.frame.body.begin(), decoded.frame.body.end());
  CHECK(body == std::vector<std::uint8_t>{6, 'n', 'o', 'd', 'e', '-', '2'});

  const std::uint8_t empty_id[] = {0};
  CHECK_FALSE(parse_drain_request(empty_id, node));
  const std::uint8_t bad_id[] = {2, 'a', ' '};
  CHECK_FALSE(parse_drain_request(bad_id, node));
  const std::uint8_t short_id[] = {3, 'a', 'b'};
  CHECK_FALSE(parse_drain_request(short_id, node));
  const std::uint8_t extra[] = {1, 'a', 0};
  CHECK_FALSE(parse_drain_request(extra, node));
  CHECK_FALSE(parse_drain_request({}, node));

  Bytes reply;
  encode_drain_reply(reply, 6, ReloadReply{42, ""});
  const DecodeResult answer = FrameDecoder().decode(reply);
  REQUIRE(answer.status == DecodeStatus::kOk);
  CHECK(answer.frame.header.opcode == Opcode::kDrain);
  ReloadReply parsed;
  REQUIRE(parse_drain_reply(answer.frame.body, parsed));
  CHECK(parsed.epoch == 42);
  CHECK(parsed.message.empty());
  const std::uint8_t truncated[] = {0, 0, 0};
  CHECK_FALSE(parse_drain_reply(truncated, parsed));
}

TEST_CASE("REDIRECT and UNAVAILABLE are known statuses in ACQUIRE and RESET replies") {
  Bytes out;
  AcquireResult redirect;
  redirect.status = ItemStatus::kRedirect;
  redirect.limit = 2;
  AcquireResult unavailable;
  unavailable.status = ItemStatus::kUnavailable;
  const AcquireResult results[] = {redirect, unavailable};
  encode_acquire_reply(out, 1, results, Framing::with_epoch(3));
  std::vector<AcquireResult> parsed;
  REQUIRE(parse_acquire_reply(decode_whole(out).body, parsed));
  REQUIRE(parsed.size() == 2);
  CHECK(parsed[0] == redirect);
  CHECK(parsed[1].status == ItemStatus::kUnavailable);
  CHECK(item_status_name(ItemStatus::kRedirect) == "redirect");

  Bytes reset;
  const ResetStatus statuses[] = {ResetStatus::kRedirect, ResetStatus::kUnavailable};
  encode_reset_reply(reset, 1, statuses);
  std::vector<ResetStatus> parsed_statuses;
  REQUIRE(parse_reset_reply(decode_whole(reset).body, parsed_statuses));
  CHECK(parsed_statuses == std::vector<ResetStatus>(std::begin(statuses), std::end(statuses)));
}

}  // namespace
}  // namespace sluice::protocol
