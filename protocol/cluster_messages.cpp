#include "protocol/cluster_messages.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>

#include "core/rule.h"
#include "protocol/coding.h"

namespace sluice::protocol {

namespace {

[[maybe_unused]] constexpr std::size_t kU8Max =
    std::numeric_limits<std::uint8_t>::max();  // asserts
constexpr std::size_t kU16Max = std::numeric_limits<std::uint16_t>::max();
constexpr std::size_t kClusterFixedSize = 16;
constexpr std::size_t kPullRequestFixedSize = 14;
constexpr std::size_t kPullReplyFixedSize = 12;
constexpr std::size_t kInspectFixedSize = 16;

std::uint8_t* grow(Bytes& out, std::size_t size) {
  const std::size_t old_size = out.size();
  out.resize(old_size + size);
  return out.data() + old_size;
}

void put_text(std::uint8_t*& p, std::string_view text) {
  *p++ = static_cast<std::uint8_t>(text.size());
  if (!text.empty()) std::memcpy(p, text.data(), text.size());
  p += text.size();
}

bool is_node_id_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

bool valid_node_id(std::string_view id) {
  return !id.empty() && id.size() <= kMaxNodeIdLength &&
         std::all_of(id.begin(), id.end(), is_node_id_char);
}

ParseResult empty_body(std::span<const std::uint8_t> body, std::string_view what) {
  if (!body.empty()) return ParseResult::failure(what);
  return {};
}

// Reads one record (10.4), its timestamps left in the body.
ParseResult read_record(ByteReader& in, WireRecord& r) {
  std::uint8_t reserved[2] = {};
  if (!in.read_u64(r.fp_lo) || !in.read_u64(r.fp_hi) || !in.read_u8(r.algorithm) ||
      !in.read_u8(r.capacity_class) || !in.read_u8(reserved[0]) || !in.read_u8(reserved[1]) ||
      !in.read_u32(r.log_count) || !in.read_u64(r.state_a) || !in.read_u64(r.state_b) ||
      !in.read_u64(r.idle_at_ns)) {
    return ParseResult::failure("record runs past the body");
  }
  if (reserved[0] != 0 || reserved[1] != 0) {
    return ParseResult::failure("reserved record bytes not zero");
  }
  if (r.capacity_class > kMaxCapacityClass) {
    return ParseResult::failure("record capacity class above 15");
  }
  if (r.algorithm != kRecordReset && !is_known_algorithm(r.algorithm)) {
    return ParseResult::failure("record with an unknown algorithm");
  }
  const bool sliding_log = r.algorithm == static_cast<std::uint8_t>(Algorithm::kSlidingLog);
  if (r.log_count != 0 && !sliding_log) {
    return ParseResult::failure("timestamps in a record that is not a sliding log");
  }
  if (sliding_log && (r.state_a != 0 || r.state_b != 0)) {
    return ParseResult::failure("a sliding-log record with state fields set");
  }
  if (!in.read_bytes(8 * std::size_t{r.log_count}, r.log_bytes)) {
    return ParseResult::failure("record timestamps run past the body");
  }
  return {};
}

// Reads `count` records; each is at least kRecordFixedSize bytes, checked up front so that the
// vector cannot be grown by a count the body does not hold.
ParseResult read_records(ByteReader& in, std::uint16_t count, std::vector<WireRecord>& out) {
  out.clear();
  if (in.remaining() < std::size_t{count} * kRecordFixedSize) {
    return ParseResult::failure("records run past the body");
  }
  out.reserve(count);
  for (std::uint16_t i = 0; i < count; ++i) {
    WireRecord r;
    if (ParseResult one = read_record(in, r); !one) return one;
    out.push_back(r);
  }
  return {};
}

// Appends one record (10.4) with its timestamps.
void put_record(Bytes& out, const WireRecord& record, std::span<const std::uint64_t> log) {
  assert(log.size() <= std::numeric_limits<std::uint32_t>::max());
  const auto log_count = static_cast<std::uint32_t>(log.size());
  std::uint8_t* p = grow(out, record_size(log_count));
  encode_fixed64(p, record.fp_lo);
  encode_fixed64(p + 8, record.fp_hi);
  assert(record.capacity_class <= kMaxCapacityClass);
  p[16] = record.algorithm;
  p[17] = record.capacity_class;
  p[18] = p[19] = 0;
  encode_fixed32(p + 20, log_count);
  encode_fixed64(p + 24, record.state_a);
  encode_fixed64(p + 32, record.state_b);
  encode_fixed64(p + 40, record.idle_at_ns);
  p += kRecordFixedSize;
  for (const std::uint64_t t : log) {
    encode_fixed64(p, t);
    p += 8;
  }
}

}  // namespace

std::uint64_t WireRecord::log_at(std::uint32_t i) const {
  assert(i < log_count);
  return decode_fixed64(log_bytes.data() + 8 * std::size_t{i});
}

// ---- CLUSTER -------------------------------------------------------------------------------

void encode_cluster_request(Bytes& out, std::uint32_t request_id, const Framing& framing) {
  finish_frame(out, begin_frame(out, Opcode::kCluster, 0, request_id, framing));
}

ParseResult parse_cluster_request(std::span<const std::uint8_t> body) {
  return empty_body(body, "CLUSTER request body not empty");
}

void encode_cluster_reply(Bytes& out, std::uint32_t request_id, const ClusterMapMessage& map,
                          const Framing& framing) {
  assert(map.nodes.size() <= kMaxClusterNodes);
  const std::size_t start = begin_frame(out, Opcode::kCluster, kFlagReply, request_id, framing);
  std::size_t size = kClusterFixedSize;
  for (const WireNode& node : map.nodes) {
    assert(node.id.size() <= kMaxNodeIdLength && node.host.size() <= kU8Max);
    size += 1 + 1 + node.id.size() + 1 + node.host.size() + 2;
  }
  std::uint8_t* p = grow(out, size);
  encode_fixed64(p, map.epoch);
  p[8] = map.ring_version;
  p[9] = map.partition_bits;
  encode_fixed16(p + 10, map.vnodes);
  encode_fixed16(p + 12, map.self);
  encode_fixed16(p + 14, static_cast<std::uint16_t>(map.nodes.size()));
  p += kClusterFixedSize;
  for (const WireNode& node : map.nodes) {
    *p++ = static_cast<std::uint8_t>(node.state);
    put_text(p, node.id);
    put_text(p, node.host);
    encode_fixed16(p, node.port);
    p += 2;
  }
  finish_frame(out, start);
}

ParseResult parse_cluster_reply(std::span<const std::uint8_t> body, ClusterMapMessage& out) {
  ByteReader in(body);
  std::uint16_t count = 0;
  if (!in.read_u64(out.epoch) || !in.read_u8(out.ring_version) || !in.read_u8(out.partition_bits) ||
      !in.read_u16(out.vnodes) || !in.read_u16(out.self) || !in.read_u16(count)) {
    return ParseResult::failure("CLUSTER reply too short");
  }
  if (count > kMaxClusterNodes) return ParseResult::failure("CLUSTER reply lists too many nodes");
  if (out.self != kNotAMember && out.self >= count) {
    return ParseResult::failure("CLUSTER reply self outside the node list");
  }
  // Each node is at least 6 bytes: state, two lengths, one id byte, the port.
  if (in.remaining() < std::size_t{count} * 6) {
    return ParseResult::failure("CLUSTER reply nodes run past the body");
  }
  out.nodes.resize(count);
  for (WireNode& node : out.nodes) {
    std::uint8_t state = 0, id_len = 0, host_len = 0;
    std::string_view id, host;
    if (!in.read_u8(state) || !in.read_u8(id_len) || !in.read_string(id_len, id) ||
        !in.read_u8(host_len) || !in.read_string(host_len, host) || !in.read_u16(node.port)) {
      return ParseResult::failure("CLUSTER reply node runs past the body");
    }
    if (state > static_cast<std::uint8_t>(WireNodeState::kDown)) {
      return ParseResult::failure("CLUSTER reply node with an unknown state");
    }
    if (!valid_node_id(id)) return ParseResult::failure("CLUSTER reply node with a bad id");
    if (host.empty()) return ParseResult::failure("CLUSTER reply node without a host");
    node.state = static_cast<WireNodeState>(state);
    node.id.assign(id);
    node.host.assign(host);
  }
  for (std::size_t i = 1; i < out.nodes.size(); ++i) {
    if (!(out.nodes[i - 1].id < out.nodes[i].id)) {
      return ParseResult::failure("CLUSTER reply nodes not sorted by id, or repeated");
    }
  }
  if (!in.at_end()) return ParseResult::failure("bytes left after the CLUSTER reply nodes");
  return {};
}

// ---- records -------------------------------------------------------------------------------

void add_record(Bytes& out, const RecordFrame& frame, const WireRecord& record,
                std::span<const std::uint64_t> log) {
  const std::uint16_t count = decode_fixed16(out.data() + frame.count_at);
  assert(count < kU16Max);
  encode_fixed16(out.data() + frame.count_at, static_cast<std::uint16_t>(count + 1));
  put_record(out, record, log);
}

std::uint16_t record_count(const Bytes& out, const RecordFrame& frame) {
  return decode_fixed16(out.data() + frame.count_at);
}

void finish_records(Bytes& out, const RecordFrame& frame) { finish_frame(out, frame.frame_start); }

// ---- REPLICATE -----------------------------------------------------------------------------

RecordFrame begin_replicate_request(Bytes& out, std::uint32_t request_id, const Framing& framing) {
  RecordFrame frame;
  frame.frame_start = begin_frame(out, Opcode::kReplicate, 0, request_id, framing);
  frame.count_at = out.size();
  std::uint8_t* p = grow(out, 4);
  encode_fixed16(p, 0);
  encode_fixed16(p + 2, 0);
  return frame;
}

ParseResult parse_replicate_request(std::span<const std::uint8_t> body,
                                    std::vector<WireRecord>& out) {
  ByteReader in(body);
  std::uint16_t count = 0, reserved = 0;
  if (!in.read_u16(count) || !in.read_u16(reserved)) {
    return ParseResult::failure("REPLICATE body too short");
  }
  if (reserved != 0) return ParseResult::failure("reserved REPLICATE bytes not zero");
  if (ParseResult records = read_records(in, count, out); !records) return records;
  if (!in.at_end()) return ParseResult::failure("bytes left after the last record");
  return {};
}

void encode_replicate_reply(Bytes& out, std::uint32_t request_id, const ReplicateReply& reply,
                            const Framing& framing) {
  const std::size_t start = begin_frame(out, Opcode::kReplicate, kFlagReply, request_id, framing);
  std::uint8_t* p = grow(out, 4);
  encode_fixed16(p, reply.applied);
  encode_fixed16(p + 2, reply.refused);
  finish_frame(out, start);
}

ParseResult parse_replicate_reply(std::span<const std::uint8_t> body, ReplicateReply& out) {
  ByteReader in(body);
  if (!in.read_u16(out.applied) || !in.read_u16(out.refused)) {
    return ParseResult::failure("REPLICATE reply too short");
  }
  if (!in.at_end()) return ParseResult::failure("bytes left after the REPLICATE reply");
  return {};
}

// ---- PULL ----------------------------------------------------------------------------------

namespace {

std::uint8_t pull_reply_flags(const PullReplyHeader& header) {
  return static_cast<std::uint8_t>((header.fenced ? kPullFenced : 0) |
                                   (header.done ? kPullDone : 0) |
                                   (header.now_ns ? kPullClock : 0));
}

}  // namespace

void encode_pull_request(Bytes& out, std::uint32_t request_id, const PullRequest& request,
                         const Framing& framing) {
  assert(!request.partitions.empty() && request.partitions.size() <= kU16Max);
  const std::size_t start = begin_frame(out, Opcode::kPull, 0, request_id, framing);
  std::uint8_t* p =
      grow(out, kPullRequestFixedSize + 2 * request.partitions.size() + (request.since_ns ? 8 : 0));
  p[0] = static_cast<std::uint8_t>((request.fence ? kPullFence : 0) |
                                   (request.since_ns ? kPullSince : 0));
  p[1] = 0;
  encode_fixed16(p + 2, request.max_records);
  encode_fixed64(p + 4, request.cursor);
  encode_fixed16(p + 12, static_cast<std::uint16_t>(request.partitions.size()));
  p += kPullRequestFixedSize;
  for (const std::uint16_t partition : request.partitions) {
    encode_fixed16(p, partition);
    p += 2;
  }
  if (request.since_ns) encode_fixed64(p, *request.since_ns);
  finish_frame(out, start);
}

ParseResult parse_pull_request(std::span<const std::uint8_t> body, PullRequest& out) {
  ByteReader in(body);
  std::uint8_t flags = 0, reserved = 0;
  std::uint16_t count = 0;
  if (!in.read_u8(flags) || !in.read_u8(reserved) || !in.read_u16(out.max_records) ||
      !in.read_u64(out.cursor) || !in.read_u16(count)) {
    return ParseResult::failure("PULL request too short");
  }
  if ((flags & ~(kPullFence | kPullSince)) != 0 || reserved != 0) {
    return ParseResult::failure("reserved PULL request bits not zero");
  }
  if (out.max_records == 0 || out.max_records > kMaxPullRecords) {
    return ParseResult::failure("PULL max_records outside 1..4096");
  }
  if (count == 0) return ParseResult::failure("PULL request names no partition");
  const bool since = (flags & kPullSince) != 0;
  if (in.remaining() != 2 * std::size_t{count} + (since ? 8 : 0)) {
    return ParseResult::failure("PULL partitions (and since) do not fill the body exactly");
  }
  out.fence = (flags & kPullFence) != 0;
  out.partitions.resize(count);
  for (std::uint16_t& partition : out.partitions) in.read_u16(partition);
  out.since_ns.reset();
  if (since) {
    std::uint64_t since_ns = 0;
    in.read_u64(since_ns);
    out.since_ns = since_ns;
  }
  return {};
}

RecordFrame begin_pull_reply(Bytes& out, std::uint32_t request_id, const PullReplyHeader& header,
                             const Framing& framing) {
  RecordFrame frame;
  frame.frame_start = begin_frame(out, Opcode::kPull, kFlagReply, request_id, framing);
  frame.count_at = out.size() + 2;
  std::uint8_t* p = grow(out, kPullReplyFixedSize + (header.now_ns ? 8 : 0));
  p[0] = pull_reply_flags(header);
  p[1] = 0;
  encode_fixed16(p + 2, 0);
  encode_fixed64(p + 4, header.next_cursor);
  if (header.now_ns) encode_fixed64(p + kPullReplyFixedSize, *header.now_ns);
  return frame;
}

void set_pull_reply_header(Bytes& out, const RecordFrame& frame, const PullReplyHeader& header) {
  std::uint8_t* p = out.data() + frame.count_at - 2;  // flags, reserved, then the count
  // The clock's presence was settled by begin_pull_reply: the records follow it.
  assert(((p[0] & kPullClock) != 0) == header.now_ns.has_value());
  p[0] = pull_reply_flags(header);
  encode_fixed64(p + 4, header.next_cursor);
  if (header.now_ns) encode_fixed64(p + kPullReplyFixedSize, *header.now_ns);
}

ParseResult parse_pull_reply(std::span<const std::uint8_t> body, PullReplyHeader& header,
                             std::vector<WireRecord>& out) {
  ByteReader in(body);
  std::uint8_t flags = 0, reserved = 0;
  std::uint16_t count = 0;
  if (!in.read_u8(flags) || !in.read_u8(reserved) || !in.read_u16(count) ||
      !in.read_u64(header.next_cursor)) {
    return ParseResult::failure("PULL reply too short");
  }
  if ((flags & ~(kPullFenced | kPullDone | kPullClock)) != 0 || reserved != 0) {
    return ParseResult::failure("reserved PULL reply bits not zero");
  }
  header.fenced = (flags & kPullFenced) != 0;
  header.done = (flags & kPullDone) != 0;
  header.now_ns.reset();
  if ((flags & kPullClock) != 0) {
    std::uint64_t now_ns = 0;
    if (!in.read_u64(now_ns)) return ParseResult::failure("PULL reply too short for its clock");
    header.now_ns = now_ns;
  }
  if (ParseResult records = read_records(in, count, out); !records) return records;
  if (!in.at_end()) return ParseResult::failure("bytes left after the last record");
  return {};
}

// ---- RELOAD --------------------------------------------------------------------------------

void encode_reload_request(Bytes& out, std::uint32_t request_id, const Framing& framing) {
  finish_frame(out, begin_frame(out, Opcode::kReload, 0, request_id, framing));
}

ParseResult parse_reload_request(std::span<const std::uint8_t> body) {
  return empty_body(body, "RELOAD request body not empty");
}

namespace {

// RELOAD's and DRAIN's replies: u64 epoch, u16 message_len, message.
void encode_epoch_message(Bytes& out, Opcode opcode, std::uint32_t request_id,
                          const ReloadReply& reply, const Framing& framing) {
  const std::string_view message =
      reply.message.size() <= kU16Max ? reply.message : reply.message.substr(0, kU16Max);
  const std::size_t start = begin_frame(out, opcode, kFlagReply, request_id, framing);
  std::uint8_t* p = grow(out, 10 + message.size());
  encode_fixed64(p, reply.epoch);
  encode_fixed16(p + 8, static_cast<std::uint16_t>(message.size()));
  if (!message.empty()) std::memcpy(p + 10, message.data(), message.size());
  finish_frame(out, start);
}

ParseResult parse_epoch_message(std::span<const std::uint8_t> body, ReloadReply& out,
                                const char* too_short, const char* left_over) {
  ByteReader in(body);
  std::uint16_t length = 0;
  if (!in.read_u64(out.epoch) || !in.read_u16(length) || !in.read_string(length, out.message)) {
    return ParseResult::failure(too_short);
  }
  if (!in.at_end()) return ParseResult::failure(left_over);
  return {};
}

}  // namespace

void encode_reload_reply(Bytes& out, std::uint32_t request_id, const ReloadReply& reply,
                         const Framing& framing) {
  encode_epoch_message(out, Opcode::kReload, request_id, reply, framing);
}

ParseResult parse_reload_reply(std::span<const std::uint8_t> body, ReloadReply& out) {
  return parse_epoch_message(body, out, "RELOAD reply too short",
                             "bytes left after the RELOAD reply message");
}

// ---- DRAIN ---------------------------------------------------------------------------------

void encode_drain_request(Bytes& out, std::uint32_t request_id, std::string_view node_id,
                          const Framing& framing) {
  const std::size_t start = begin_frame(out, Opcode::kDrain, 0, request_id, framing);
  std::uint8_t* p = grow(out, 1 + node_id.size());
  put_text(p, node_id);
  finish_frame(out, start);
}

ParseResult parse_drain_request(std::span<const std::uint8_t> body, std::string_view& node_id) {
  ByteReader in(body);
  std::uint8_t length = 0;
  if (!in.read_u8(length) || !in.read_string(length, node_id)) {
    return ParseResult::failure("DRAIN request too short");
  }
  if (!in.at_end()) return ParseResult::failure("bytes left after the DRAIN request's node id");
  if (!valid_node_id(node_id)) return ParseResult::failure("DRAIN request with a bad node id");
  return {};
}

void encode_drain_reply(Bytes& out, std::uint32_t request_id, const ReloadReply& reply,
                        const Framing& framing) {
  encode_epoch_message(out, Opcode::kDrain, request_id, reply, framing);
}

ParseResult parse_drain_reply(std::span<const std::uint8_t> body, ReloadReply& out) {
  return parse_epoch_message(body, out, "DRAIN reply too short",
                             "bytes left after the DRAIN reply message");
}

// ---- INSPECT -------------------------------------------------------------------------------

void encode_inspect_request(Bytes& out, std::uint32_t request_id, std::string_view key,
                            const Framing& framing) {
  assert(key.size() <= kU16Max);
  const std::size_t start = begin_frame(out, Opcode::kInspect, 0, request_id, framing);
  std::uint8_t* p = grow(out, 2 + key.size());
  encode_fixed16(p, static_cast<std::uint16_t>(key.size()));
  if (!key.empty()) std::memcpy(p + 2, key.data(), key.size());
  finish_frame(out, start);
}

ParseResult parse_inspect_request(std::span<const std::uint8_t> body, std::string_view& key) {
  ByteReader in(body);
  std::uint16_t length = 0;
  if (!in.read_u16(length) || !in.read_string(length, key)) {
    return ParseResult::failure("INSPECT request too short");
  }
  if (!in.at_end()) return ParseResult::failure("bytes left after the INSPECT request's key");
  return {};
}

void encode_inspect_reply(Bytes& out, std::uint32_t request_id, const InspectReply& reply,
                          std::span<const std::uint64_t> log, const Framing& framing) {
  const std::size_t start = begin_frame(out, Opcode::kInspect, kFlagReply, request_id, framing);
  std::uint8_t* p = grow(out, kInspectFixedSize);
  p[0] = static_cast<std::uint8_t>(reply.status);
  p[1] = static_cast<std::uint8_t>(reply.role);
  p[2] = reply.partition_state;
  p[3] = 0;
  encode_fixed16(p + 4, reply.shard);
  encode_fixed16(p + 6, 0);
  encode_fixed64(p + 8, reply.now_ns);
  if (reply.status == InspectStatus::kStored) put_record(out, reply.record, log);
  finish_frame(out, start);
}

ParseResult parse_inspect_reply(std::span<const std::uint8_t> body, InspectReply& out) {
  ByteReader in(body);
  std::uint8_t status = 0, role = 0, reserved = 0;
  std::uint16_t reserved16 = 0;
  if (!in.read_u8(status) || !in.read_u8(role) || !in.read_u8(out.partition_state) ||
      !in.read_u8(reserved) || !in.read_u16(out.shard) || !in.read_u16(reserved16) ||
      !in.read_u64(out.now_ns)) {
    return ParseResult::failure("INSPECT reply too short");
  }
  if (reserved != 0 || reserved16 != 0) {
    return ParseResult::failure("reserved INSPECT reply bytes not zero");
  }
  if (status != static_cast<std::uint8_t>(InspectStatus::kAbsent) &&
      status != static_cast<std::uint8_t>(InspectStatus::kStored) &&
      status != static_cast<std::uint8_t>(InspectStatus::kInvalidKey)) {
    return ParseResult::failure("INSPECT reply with an unknown status");
  }
  if (role > static_cast<std::uint8_t>(InspectRole::kOther)) {
    return ParseResult::failure("INSPECT reply with an unknown role");
  }
  out.status = static_cast<InspectStatus>(status);
  out.role = static_cast<InspectRole>(role);
  if (out.partition_state > kMaxPartitionState ||
      (out.partition_state != 0 && out.role != InspectRole::kPrimary)) {
    return ParseResult::failure("INSPECT reply with a bad partition state");
  }
  out.record = WireRecord{};
  if (out.status == InspectStatus::kStored) {
    if (ParseResult record = read_record(in, out.record); !record) return record;
    if (out.record.algorithm == kRecordReset) {
      return ParseResult::failure("INSPECT reply with a reset record");
    }
  }
  if (!in.at_end()) return ParseResult::failure("bytes left after the INSPECT reply");
  return {};
}

}  // namespace sluice::protocol
