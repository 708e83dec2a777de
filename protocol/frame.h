// Sluice wire format: a little-endian header followed by a body. docs/PROTOCOL.md documents
// every byte; this header is the single source of the constants.
//
//   offset size field
//   0      2    magic        0x4C53 (bytes 'S' 'L')
//   2      1    version      the framing's version (1 or 2), not the protocol's
//   3      1    opcode       Opcode
//   4      2    flags        bit 0: reply; other bits must be 0
//   6      2    reserved     must be 0
//   8      4    request_id   chosen by the client, echoed in the reply
//   12     4    body_length  bytes of body after the header (<= the configured max frame)
//   16     8    epoch        framing version 2 only: the sender's cluster map epoch
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace sluice::protocol {

inline constexpr std::uint16_t kMagic = 0x4C53;
// The header's version byte: the framing. Version 1 is the 16-byte header of protocol versions
// 1 and 2; version 2 (protocol 3) appends the sender's cluster epoch. A receiver accepts both
// and answers each request in its framing.
inline constexpr std::uint8_t kFrameVersion = 1;
inline constexpr std::uint8_t kFrameVersionEpoch = 2;
// The protocol version a HELLO negotiates (the highest this code speaks). Version 2 added the
// token to the HELLO request; version 3 the cluster (framing version 2, CLUSTER, REPLICATE,
// PULL, RELOAD, the REDIRECT and UNAVAILABLE statuses); version 4 leases (the lease and
// give-back flags of ACQUIRE items, and the `granted` field of their results); version 5 the
// `since` flag of PULL and the source's clock in its reply (a pull of what changed since);
// version 6 INSPECT (what a node stores for one key).
inline constexpr std::uint8_t kVersion = 6;
inline constexpr std::size_t kHeaderSize = 16;       // framing version 1
inline constexpr std::size_t kHeaderSizeEpoch = 24;  // framing version 2
inline constexpr std::size_t kMaxHeaderSize = kHeaderSizeEpoch;

constexpr std::size_t header_size(std::uint8_t frame_version) {
  return frame_version == kFrameVersionEpoch ? kHeaderSizeEpoch : kHeaderSize;
}

inline constexpr std::uint32_t kDefaultMaxFrame = 1u << 20;  // max body bytes (1 MiB)
inline constexpr std::uint16_t kDefaultMaxKey = 256;         // max key bytes
inline constexpr std::uint16_t kDefaultMaxBatch = 4096;      // max items per ACQUIRE / RESET

enum class Opcode : std::uint8_t {
  kHello = 0x01,
  kPing = 0x02,
  kAcquire = 0x03,
  kReset = 0x04,
  kStats = 0x05,
  kCluster = 0x06,    // protocol 3: the node's cluster map
  kReplicate = 0x07,  // protocol 3, node to node: records a primary changed
  kPull = 0x08,       // protocol 3, node to node: a page of a shard's records of some partitions
  kReload = 0x09,     // protocol 3: reread the static cluster file
  kDrain = 0x0A,      // protocol 3, etcd mode: the node hands its ranges over and leaves the ring
  kInspect = 0x0B,    // protocol 6: what the node stores for one key (read-only)
  kError = 0x7F,      // reply only
};

inline constexpr std::uint16_t kFlagReply = 0x0001;

// The code an ERROR frame carries on the wire: why a connection is refused or closed (the server
// closes the connection after sending one). Not client::ErrorCode, which says why a client call
// failed.
enum class WireErrorCode : std::uint16_t {
  kMalformedFrame = 1,      // bad magic, reserved bits set, or a body that does not parse
  kUnsupportedVersion = 2,  // header version or HELLO version the server does not speak
  kUnknownOpcode = 3,
  kFrameTooLarge = 4,  // body_length above the max frame
  kBatchTooLarge = 5,  // more items than the max batch
  kTooManyConnections = 6,
  kShuttingDown = 7,
  kIdleTimeout = 8,
  kInternal = 9,
  kUnauthenticated = 10,  // the server requires a token: a wrong or missing one, or no HELLO yet
  kOverloaded = 11,  // the node is out of a shared resource (buffer memory) and sheds this peer
};

std::string_view error_code_name(WireErrorCode code);

struct FrameHeader {
  std::uint8_t version = kFrameVersion;  // the framing
  Opcode opcode = Opcode::kPing;
  std::uint16_t flags = 0;
  std::uint32_t request_id = 0;
  std::uint32_t body_length = 0;
  std::uint64_t epoch = 0;  // framing version 2; 0 in version 1
  constexpr bool is_reply() const { return (flags & kFlagReply) != 0; }
};

// How an encoder writes a frame's header: the framing version and, in version 2, the epoch.
struct Framing {
  std::uint8_t version = kFrameVersion;
  std::uint64_t epoch = 0;
  static constexpr Framing with_epoch(std::uint64_t epoch) {
    return Framing{kFrameVersionEpoch, epoch};
  }
};

struct Frame {
  FrameHeader header;
  std::span<const std::uint8_t> body;  // points into the decoder's input
};

enum class DecodeStatus : std::uint8_t { kOk, kNeedMore, kMalformed };

struct DecodeResult {
  DecodeStatus status = DecodeStatus::kNeedMore;
  std::size_t frame_size = 0;                            // header + body bytes, when kOk
  Frame frame;                                           // when kOk
  WireErrorCode error = WireErrorCode::kMalformedFrame;  // when kMalformed
  std::string_view reason;                               // static text, when kMalformed
  // When kOk, or kMalformed with the magic matched and bytes 8..11 present; else 0. An
  // ERROR reply echoes it so the client can tell which request was refused.
  std::uint32_t request_id = 0;
};

// Splits a byte stream into frames. Stateless: call decode() on the unconsumed input; it
// returns the first frame, kNeedMore, or kMalformed. Never throws, never reads past `input`,
// and rejects a body_length above `max_frame` as soon as the header is complete, before any
// of the body is buffered.
class FrameDecoder {
 public:
  explicit FrameDecoder(std::uint32_t max_frame = kDefaultMaxFrame) : max_frame_(max_frame) {}
  DecodeResult decode(std::span<const std::uint8_t> input) const noexcept;
  std::uint32_t max_frame() const { return max_frame_; }

 private:
  std::uint32_t max_frame_;
};

}  // namespace sluice::protocol
