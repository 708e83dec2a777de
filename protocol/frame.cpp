#include "protocol/frame.h"

#include "protocol/coding.h"

namespace sluice::protocol {

namespace {

// Byte offsets of the header fields (see the table in frame.h).
constexpr std::size_t kOffsetVersion = 2;
constexpr std::size_t kOffsetOpcode = 3;
constexpr std::size_t kOffsetFlags = 4;
constexpr std::size_t kOffsetReserved = 6;
constexpr std::size_t kOffsetRequestId = 8;
constexpr std::size_t kOffsetBodyLength = 12;

constexpr std::uint8_t kMagicByte0 = static_cast<std::uint8_t>(kMagic);       // 'S'
constexpr std::uint8_t kMagicByte1 = static_cast<std::uint8_t>(kMagic >> 8);  // 'L'

constexpr bool is_known_opcode(std::uint8_t value) {
  switch (static_cast<Opcode>(value)) {
    case Opcode::kHello:
    case Opcode::kPing:
    case Opcode::kAcquire:
    case Opcode::kReset:
    case Opcode::kStats:
    case Opcode::kCluster:
    case Opcode::kReplicate:
    case Opcode::kPull:
    case Opcode::kReload:
    case Opcode::kDrain:
    case Opcode::kInspect:
    case Opcode::kError:
      return true;
  }
  return false;
}

DecodeResult malformed(WireErrorCode code, std::string_view reason, std::uint32_t request_id) {
  DecodeResult result;
  result.status = DecodeStatus::kMalformed;
  result.error = code;
  result.reason = reason;
  result.request_id = request_id;
  return result;
}

}  // namespace

std::string_view error_code_name(WireErrorCode code) {
  switch (code) {
    case WireErrorCode::kMalformedFrame:
      return "malformed_frame";
    case WireErrorCode::kUnsupportedVersion:
      return "unsupported_version";
    case WireErrorCode::kUnknownOpcode:
      return "unknown_opcode";
    case WireErrorCode::kFrameTooLarge:
      return "frame_too_large";
    case WireErrorCode::kBatchTooLarge:
      return "batch_too_large";
    case WireErrorCode::kTooManyConnections:
      return "too_many_connections";
    case WireErrorCode::kShuttingDown:
      return "shutting_down";
    case WireErrorCode::kIdleTimeout:
      return "idle_timeout";
    case WireErrorCode::kInternal:
      return "internal";
    case WireErrorCode::kUnauthenticated:
      return "unauthenticated";
    case WireErrorCode::kOverloaded:
      return "overloaded";
  }
  return "unknown";
}

// Each check runs as soon as the bytes it needs are present, so garbage is refused after as
// few bytes as possible and an oversized body is refused before any of it is buffered.
DecodeResult FrameDecoder::decode(std::span<const std::uint8_t> input) const noexcept {
  const std::size_t size = input.size();
  const std::uint8_t* p = input.data();
  DecodeResult need_more;  // status kNeedMore

  if (size < 1) return need_more;
  if (p[0] != kMagicByte0) return malformed(WireErrorCode::kMalformedFrame, "bad magic", 0);
  if (size < 2) return need_more;
  if (p[1] != kMagicByte1) return malformed(WireErrorCode::kMalformedFrame, "bad magic", 0);

  // Once the magic matched, the request id is echoed in any ERROR reply if it has arrived.
  const std::uint32_t request_id = size >= kOffsetRequestId + 4 ? decode_fixed32(p + 8) : 0;

  if (size < kOffsetVersion + 1) return need_more;
  const std::uint8_t version = p[kOffsetVersion];
  if (version != kFrameVersion && version != kFrameVersionEpoch) {
    return malformed(WireErrorCode::kUnsupportedVersion, "unsupported version", request_id);
  }
  const std::size_t header = header_size(version);
  if (size < kOffsetOpcode + 1) return need_more;
  const std::uint8_t opcode = p[kOffsetOpcode];
  if (!is_known_opcode(opcode)) {
    return malformed(WireErrorCode::kUnknownOpcode, "unknown opcode", request_id);
  }
  if (size < kOffsetFlags + 2) return need_more;
  const std::uint16_t flags = decode_fixed16(p + kOffsetFlags);
  if ((flags & ~kFlagReply) != 0) {
    return malformed(WireErrorCode::kMalformedFrame, "unknown flag bits set", request_id);
  }
  if (static_cast<Opcode>(opcode) == Opcode::kError && (flags & kFlagReply) == 0) {
    return malformed(WireErrorCode::kMalformedFrame, "ERROR frame without the reply flag",
                     request_id);
  }
  if (size < kOffsetReserved + 2) return need_more;
  if (decode_fixed16(p + kOffsetReserved) != 0) {
    return malformed(WireErrorCode::kMalformedFrame, "reserved header bytes not zero", request_id);
  }
  if (size < kHeaderSize) return need_more;
  const std::uint32_t body_length = decode_fixed32(p + kOffsetBodyLength);
  if (body_length > max_frame_) {
    return malformed(WireErrorCode::kFrameTooLarge, "body length above the max frame", request_id);
  }
  if (size < header) return need_more;
  // Compared as a difference so no sum can overflow.
  if (size - header < body_length) return need_more;

  DecodeResult result;
  result.status = DecodeStatus::kOk;
  result.frame_size = header + body_length;
  result.frame.header.version = version;
  result.frame.header.opcode = static_cast<Opcode>(opcode);
  result.frame.header.flags = flags;
  result.frame.header.request_id = request_id;
  result.frame.header.body_length = body_length;
  if (version == kFrameVersionEpoch) result.frame.header.epoch = decode_fixed64(p + kHeaderSize);
  result.frame.body = input.subspan(header, body_length);
  result.request_id = request_id;
  return result;
}

}  // namespace sluice::protocol
