// Message bodies: encoding into a byte vector and parsing from a frame body.
// Encoders append to `out` (a reused buffer: no allocation once it has grown). Parsers never
// throw and never read past the body; views they return point into the body. A parser accepts
// exactly one encoding: reserved bytes must be zero and no bytes may follow the last field. On
// failure the out-param holds unspecified (but valid) contents.
//
// Text that does not fit its length field (client name, stat name, node id, ERROR message) is
// cut to fit. A key longer than 65535 bytes is sent as an empty key, which the server answers
// with kInvalidKey, as it would any key above its max key. Item counts must fit in a u16.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/rule.h"
#include "core/verdict.h"
#include "protocol/frame.h"

namespace sluice::protocol {

using Bytes = std::vector<std::uint8_t>;

// ---- framing -------------------------------------------------------------------------------

// Every encoder writes its frame's header in `framing` (default: version 1, no epoch).

// Appends a header with body_length 0 and returns its offset in `out`; finish_frame() patches
// the length once the body has been appended.
std::size_t begin_frame(Bytes& out, Opcode opcode, std::uint16_t flags, std::uint32_t request_id,
                        const Framing& framing = {});
void finish_frame(Bytes& out, std::size_t frame_start);

struct ParseResult {
  bool ok = true;
  WireErrorCode error = WireErrorCode::kMalformedFrame;
  std::string_view reason;  // static text when !ok
  explicit operator bool() const { return ok; }
  static ParseResult failure(std::string_view why,
                             WireErrorCode code = WireErrorCode::kMalformedFrame) {
    return {false, code, why};
  }
};

// ---- HELLO ---------------------------------------------------------------------------------

// The longest token a HELLO request may carry; a longer token_len is kMalformedFrame.
inline constexpr std::size_t kMaxTokenLength = 1024;
// The first protocol version whose HELLO request carries a token.
inline constexpr std::uint8_t kFirstTokenVersion = 2;

// The layout follows the version byte: versions 0 and 1 end after the name; version 2 and
// later add token_len (u16) and the token, so there is one valid encoding per version. (A
// client cannot know the server's version before the reply, so a client of a later version
// still sends this layout.)
struct HelloRequest {
  std::uint8_t version = kVersion;  // highest version the client speaks
  std::string_view client_name;     // for logs; at most 255 bytes
  // Version 2 and later: the shared secret, 0..kMaxTokenLength bytes; empty = none. Not sent
  // with versions 0 and 1 (REQUIRES: empty there). REQUIRES: at most kMaxTokenLength bytes.
  std::string_view token;
};

inline constexpr std::uint16_t kPublicPort = 0xFFFF;  // HelloReply::this_shard on the public port

struct HelloReply {
  std::uint8_t version = kVersion;  // the version this connection will use
  std::uint16_t this_shard = kPublicPort;
  std::uint32_t max_frame = kDefaultMaxFrame;
  std::uint16_t max_key = kDefaultMaxKey;
  std::uint16_t max_batch = kDefaultMaxBatch;
  std::vector<std::uint16_t> shard_ports;  // index = shard; size = shard count
  std::string node_id;
  friend bool operator==(const HelloReply&, const HelloReply&) = default;
};

void encode_hello_request(Bytes& out, std::uint32_t request_id, const HelloRequest& hello,
                          const Framing& framing = {});
ParseResult parse_hello_request(std::span<const std::uint8_t> body, HelloRequest& out);
void encode_hello_reply(Bytes& out, std::uint32_t request_id, const HelloReply& hello,
                        const Framing& framing = {});
ParseResult parse_hello_reply(std::span<const std::uint8_t> body, HelloReply& out);

// ---- PING: the body is an opaque payload, echoed in the reply ------------------------------

void encode_ping(Bytes& out, std::uint32_t request_id, std::span<const std::uint8_t> payload,
                 bool reply, const Framing& framing = {});

// ---- ACQUIRE -------------------------------------------------------------------------------

inline constexpr std::uint8_t kItemFlagPeek = 0x01;
// Protocol 4 (docs/PROTOCOL.md, "Leases"): at most one of these, never with peek.
inline constexpr std::uint8_t kItemFlagLease = 0x02;     // take up to `cost` units
inline constexpr std::uint8_t kItemFlagGiveBack = 0x04;  // give back `cost` units of a lease
inline constexpr std::uint8_t kFirstLeaseVersion = 4;
// The most units one lease item may ask for (its result's `granted` has 24 bits).
inline constexpr std::uint32_t kMaxLeaseUnits = (1u << 24) - 1;

struct AcquireItem {
  std::string_view key;
  Rule rule;
  std::uint32_t cost = 1;
  bool peek = false;
  bool lease = false;      // take up to `cost` units, as many as are available
  bool give_back = false;  // give back `cost` unspent units of the lease stamped `stamp`
  std::uint32_t stamp = 0;
};

enum class ItemStatus : std::uint8_t {
  kDenied = 0,
  kAllowed = 1,
  kInvalidRule = 2,  // unknown algorithm, bad period, zero cost, sliding log over its cap
  kInvalidKey = 3,   // empty or longer than the max key
  kNoMemory = 4,     // the shard could not store the key (memory cap, nothing evictable)
  // Protocol 3 (a cluster): nothing was counted.
  kRedirect = 5,     // not the key's primary at the reply's epoch; `limit` = the primary's index
  kUnavailable = 6,  // the key's primary, but not serving it now (pulling, lease): retry
};

std::string_view item_status_name(ItemStatus status);

struct AcquireResult {
  ItemStatus status = ItemStatus::kDenied;
  std::uint32_t limit = 0;
  std::uint32_t remaining = 0;
  std::uint64_t reset_after_ms = 0;
  std::uint64_t retry_after_ms = 0;  // kNever (UINT64_MAX) = never
  // A lease item: the units granted (when at least 1, retry_after_ms holds the lease's stamp);
  // a give-back item: the units credited. 0 for any other item.
  std::uint32_t granted = 0;
  friend constexpr bool operator==(const AcquireResult&, const AcquireResult&) = default;
};

// A Verdict in protocol units (milliseconds, rounded up).
AcquireResult to_result(const Verdict& decision);

// Incremental encoding (natural batching): begin, add items, finish. REQUIRES: between begin
// and finish only add_acquire_item() for that frame appends to `out`; at most 65535 items.
std::size_t begin_acquire_request(Bytes& out, std::uint32_t request_id,
                                  const Framing& framing = {});
void add_acquire_item(Bytes& out, std::size_t frame_start, const AcquireItem& item);
void finish_acquire_request(Bytes& out, std::size_t frame_start);
void encode_acquire_request(Bytes& out, std::uint32_t request_id,
                            std::span<const AcquireItem> items, const Framing& framing = {});

// Changes the opcode of the frame that starts at out[frame_start] (the client's probe sends an
// encoded ACQUIRE as a PING with the same body). REQUIRES: a whole frame starts there.
void set_opcode(Bytes& out, std::size_t frame_start, Opcode opcode);

// Items reuse `out`'s capacity; key views point into `body`. Keys are not checked against the
// max key here (the server answers kInvalidKey per item); item count is checked against
// max_batch (WireErrorCode::kBatchTooLarge).
ParseResult parse_acquire_request(std::span<const std::uint8_t> body, std::uint16_t max_batch,
                                  std::vector<AcquireItem>& out);

void encode_acquire_reply(Bytes& out, std::uint32_t request_id,
                          std::span<const AcquireResult> results, const Framing& framing = {});
ParseResult parse_acquire_reply(std::span<const std::uint8_t> body,
                                std::vector<AcquireResult>& out);

// ---- RESET ---------------------------------------------------------------------------------

enum class ResetStatus : std::uint8_t {
  kAbsent = 0,
  kRemoved = 1,
  kInvalidKey = 3,
  kRedirect = 5,     // as ItemStatus::kRedirect; nothing was reset
  kUnavailable = 6,  // as ItemStatus::kUnavailable
};

void encode_reset_request(Bytes& out, std::uint32_t request_id,
                          std::span<const std::string_view> keys, const Framing& framing = {});
ParseResult parse_reset_request(std::span<const std::uint8_t> body, std::uint16_t max_batch,
                                std::vector<std::string_view>& out);
void encode_reset_reply(Bytes& out, std::uint32_t request_id, std::span<const ResetStatus> statuses,
                        const Framing& framing = {});
ParseResult parse_reset_reply(std::span<const std::uint8_t> body, std::vector<ResetStatus>& out);

// ---- STATS: request has an empty body; reply is a list of named counters ------------------

struct StatEntry {
  std::string name;  // at most 255 bytes, e.g. "total.keys", "shard.0.allowed"
  std::uint64_t value = 0;
  friend bool operator==(const StatEntry&, const StatEntry&) = default;
};

void encode_stats_request(Bytes& out, std::uint32_t request_id, const Framing& framing = {});
ParseResult parse_stats_request(std::span<const std::uint8_t> body);  // the body must be empty
void encode_stats_reply(Bytes& out, std::uint32_t request_id, std::span<const StatEntry> stats,
                        const Framing& framing = {});
// The same reply in two steps, so a server can encode the body once and answer many requests
// with it: encode_stats_body() appends the body alone, encode_stats_reply_with_body() a whole
// reply frame around a body made by it.
void encode_stats_body(Bytes& out, std::span<const StatEntry> stats);
void encode_stats_reply_with_body(Bytes& out, std::uint32_t request_id,
                                  std::span<const std::uint8_t> body, const Framing& framing = {});
ParseResult parse_stats_reply(std::span<const std::uint8_t> body, std::vector<StatEntry>& out);

// ---- ERROR ---------------------------------------------------------------------------------

struct ErrorReply {
  WireErrorCode code = WireErrorCode::kInternal;
  std::string_view message;  // at most 65535 bytes
};

void encode_error(Bytes& out, std::uint32_t request_id, WireErrorCode code,
                  std::string_view message, const Framing& framing = {});
ParseResult parse_error(std::span<const std::uint8_t> body, ErrorReply& out);

}  // namespace sluice::protocol
