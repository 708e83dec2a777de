// Protocol 3's cluster messages (docs/PROTOCOL.md, section 10): CLUSTER (the map), REPLICATE
// and PULL (records between nodes), RELOAD, DRAIN; and protocol 6's INSPECT (section 12), whose
// reply carries a record. Same conventions as protocol/messages.h: encoders
// append to a reused buffer, parsers never read past the body and accept one encoding only,
// views point into the body. These are wire structs: cluster/ turns them into its own types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/frame.h"
#include "protocol/messages.h"

namespace sluice::protocol {

// ---- CLUSTER -------------------------------------------------------------------------------

inline constexpr std::size_t kMaxClusterNodes = 1024;
inline constexpr std::size_t kMaxNodeIdLength = 64;   // [A-Za-z0-9._-]
inline constexpr std::uint16_t kNotAMember = 0xFFFF;  // ClusterMapMessage::self

enum class WireNodeState : std::uint8_t { kJoining = 0, kActive = 1, kDraining = 2, kDown = 3 };

struct WireNode {
  WireNodeState state = WireNodeState::kActive;
  std::string id;    // 1..kMaxNodeIdLength bytes
  std::string host;  // 1..255 bytes
  std::uint16_t port = 0;
  friend bool operator==(const WireNode&, const WireNode&) = default;
};

struct ClusterMapMessage {
  std::uint64_t epoch = 0;
  std::uint8_t ring_version = 0;
  std::uint8_t partition_bits = 0;
  std::uint16_t vnodes = 0;
  std::uint16_t self = kNotAMember;  // the answering node's index in `nodes`
  std::vector<WireNode> nodes;       // sorted by id
  friend bool operator==(const ClusterMapMessage&, const ClusterMapMessage&) = default;
};

void encode_cluster_request(Bytes& out, std::uint32_t request_id, const Framing& framing = {});
ParseResult parse_cluster_request(std::span<const std::uint8_t> body);  // the body must be empty
// REQUIRES: at most kMaxClusterNodes nodes, ids and hosts within their limits.
void encode_cluster_reply(Bytes& out, std::uint32_t request_id, const ClusterMapMessage& map,
                          const Framing& framing = {});
// Checks the limits, the node states, that ids are sorted and distinct, and `self`.
ParseResult parse_cluster_reply(std::span<const std::uint8_t> body, ClusterMapMessage& out);

// ---- records (REPLICATE, PULL) -------------------------------------------------------------

inline constexpr std::size_t kRecordFixedSize = 48;  // before the sliding log's timestamps
inline constexpr std::uint8_t kMaxCapacityClass = 15;
inline constexpr std::uint8_t kRecordReset = 0;  // WireRecord::algorithm of a reset key

// One record's full state. A parsed record's timestamps stay in the body (`log_bytes`, u64
// little-endian each, oldest first); log_at() reads one.
struct WireRecord {
  std::uint64_t fp_lo = 0;
  std::uint64_t fp_hi = 0;
  std::uint8_t algorithm = kRecordReset;  // core's Algorithm value, or kRecordReset
  // 15 * remaining / limit at the key's last decision (0..15): how much forgetting the record
  // would give away, for eviction at the receiver's cap.
  std::uint8_t capacity_class = 0;
  std::uint64_t state_a = 0;
  std::uint64_t state_b = 0;
  std::uint64_t idle_at_ns = 0;
  std::uint32_t log_count = 0;
  std::span<const std::uint8_t> log_bytes;  // parsed only
  std::uint64_t log_at(std::uint32_t i) const;
};

// The encoded size of a record with `log_count` timestamps.
constexpr std::size_t record_size(std::uint32_t log_count) {
  return kRecordFixedSize + 8 * std::size_t{log_count};
}

// ---- REPLICATE -----------------------------------------------------------------------------

// A REPLICATE request or PULL reply being written: records are added one at a time (at most
// 65535), then finish_records() completes the frame. REQUIRES: nothing else is appended to the
// buffer in between.
struct RecordFrame {
  std::size_t frame_start = 0;
  std::size_t count_at = 0;  // offset of the u16 record count in the buffer
};
// `log` is a sliding log's timestamps (empty for the other algorithms and for a reset).
void add_record(Bytes& out, const RecordFrame& frame, const WireRecord& record,
                std::span<const std::uint64_t> log);
std::uint16_t record_count(const Bytes& out, const RecordFrame& frame);
void finish_records(Bytes& out, const RecordFrame& frame);

RecordFrame begin_replicate_request(Bytes& out, std::uint32_t request_id,
                                    const Framing& framing = {});
ParseResult parse_replicate_request(std::span<const std::uint8_t> body,
                                    std::vector<WireRecord>& out);

struct ReplicateReply {
  std::uint16_t applied = 0;
  std::uint16_t refused = 0;  // records of partitions the sender is not the primary of
  friend bool operator==(const ReplicateReply&, const ReplicateReply&) = default;
};
void encode_replicate_reply(Bytes& out, std::uint32_t request_id, const ReplicateReply& reply,
                            const Framing& framing = {});
ParseResult parse_replicate_reply(std::span<const std::uint8_t> body, ReplicateReply& out);

// ---- PULL ----------------------------------------------------------------------------------

inline constexpr std::uint8_t kPullFence = 0x01;   // request flag
inline constexpr std::uint8_t kPullSince = 0x02;   // request flag, protocol 5
inline constexpr std::uint8_t kPullFenced = 0x01;  // reply flag
inline constexpr std::uint8_t kPullDone = 0x02;    // reply flag
inline constexpr std::uint8_t kPullClock = 0x04;   // reply flag, protocol 5
inline constexpr std::uint16_t kMaxPullRecords = 4096;
// The first protocol version whose PULL takes `since` (and answers with the source's clock).
inline constexpr std::uint8_t kFirstPullSinceVersion = 5;

struct PullRequest {
  bool fence = false;
  std::uint16_t max_records = 1;          // 1..kMaxPullRecords
  std::uint64_t cursor = 0;               // 0 first, then the reply's next_cursor
  std::vector<std::uint16_t> partitions;  // 1..65535 indices
  // Protocol 5: only the records changed at or after this instant of the source's clock (to
  // its last-used stamp's 268 ms: it may send more); 0 = all. Set, the reply carries the
  // source's clock (PullReplyHeader::now_ns), which a later pull gives back here.
  std::optional<std::uint64_t> since_ns;
  friend bool operator==(const PullRequest&, const PullRequest&) = default;
};
void encode_pull_request(Bytes& out, std::uint32_t request_id, const PullRequest& request,
                         const Framing& framing = {});
ParseResult parse_pull_request(std::span<const std::uint8_t> body, PullRequest& out);

struct PullReplyHeader {
  bool fenced = false;
  bool done = false;
  std::uint64_t next_cursor = 0;
  // The source's clock when it read the page: in the reply to a request with since_ns.
  std::optional<std::uint64_t> now_ns;
};
// Records are added as for REPLICATE (add_record, finish_records).
RecordFrame begin_pull_reply(Bytes& out, std::uint32_t request_id, const PullReplyHeader& header,
                             const Framing& framing = {});
// Rewrites the header of a PULL reply being written (once the page's end is known).
void set_pull_reply_header(Bytes& out, const RecordFrame& frame, const PullReplyHeader& header);
ParseResult parse_pull_reply(std::span<const std::uint8_t> body, PullReplyHeader& header,
                             std::vector<WireRecord>& out);

// ---- RELOAD --------------------------------------------------------------------------------

struct ReloadReply {
  std::uint64_t epoch = 0;   // the map in force afterwards
  std::string_view message;  // empty on success; else why the file was refused
};
void encode_reload_request(Bytes& out, std::uint32_t request_id, const Framing& framing = {});
ParseResult parse_reload_request(std::span<const std::uint8_t> body);  // the body must be empty
void encode_reload_reply(Bytes& out, std::uint32_t request_id, const ReloadReply& reply,
                         const Framing& framing = {});
ParseResult parse_reload_reply(std::span<const std::uint8_t> body, ReloadReply& out);

// ---- DRAIN ---------------------------------------------------------------------------------

// The request names the node it is meant for (a node refuses a DRAIN for another id, so that a
// stale address cannot drain the wrong node); the reply has RELOAD's layout, its message
// empty when the node is draining (or was already), else why not.
void encode_drain_request(Bytes& out, std::uint32_t request_id, std::string_view node_id,
                          const Framing& framing = {});
ParseResult parse_drain_request(std::span<const std::uint8_t> body, std::string_view& node_id);
void encode_drain_reply(Bytes& out, std::uint32_t request_id, const ReloadReply& reply,
                        const Framing& framing = {});
ParseResult parse_drain_reply(std::span<const std::uint8_t> body, ReloadReply& out);

// ---- INSPECT (protocol 6) ------------------------------------------------------------------

enum class InspectStatus : std::uint8_t {
  kAbsent = 0,      // no live record for the key on this node
  kStored = 1,      // a record follows
  kInvalidKey = 3,  // empty, or longer than the node's max_key
};

inline constexpr std::uint8_t kMaxPartitionState = 2;  // InspectReply::partition_state

// The answering node's place for the key in its own map.
enum class InspectRole : std::uint8_t {
  kStandalone = 0,  // outside any cluster: the node decides every key
  kPrimary = 1,
  kReplica = 2,
  kOther = 3,  // neither (or the map has no active node)
};

struct InspectReply {
  InspectStatus status = InspectStatus::kAbsent;
  InspectRole role = InspectRole::kStandalone;
  // The node's serving state of the key's partition (0 serving, 1 pulling, 2 fenced, as
  // server/cluster_view.h's PartitionServing); 0 unless role is kPrimary.
  std::uint8_t partition_state = 0;
  std::uint16_t shard = 0;   // the shard whose table holds the key
  std::uint64_t now_ns = 0;  // the node's clock when it read the record (its times are on it)
  WireRecord record;         // kStored only; a parsed one's timestamps stay in the body
};

// The key is not checked here: the server answers an empty or overlong key kInvalidKey.
void encode_inspect_request(Bytes& out, std::uint32_t request_id, std::string_view key,
                            const Framing& framing = {});
ParseResult parse_inspect_request(std::span<const std::uint8_t> body, std::string_view& key);
// `log`: a sliding log's timestamps, oldest first (empty otherwise). REQUIRES: a record only
// with kStored.
void encode_inspect_reply(Bytes& out, std::uint32_t request_id, const InspectReply& reply,
                          std::span<const std::uint64_t> log, const Framing& framing = {});
// Checks the status and role values, that a record comes exactly with kStored (and is not a
// reset image), that partition_state is 0 unless primary, and the reserved bytes.
ParseResult parse_inspect_reply(std::span<const std::uint8_t> body, InspectReply& out);

}  // namespace sluice::protocol
