// The frame decoder: header checks in order, early refusal, kNeedMore on short input,
// pipelining.
#include "protocol/frame.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <ostream>
#include <vector>

#include "protocol/messages.h"

namespace sluice::protocol {

inline std::ostream& operator<<(std::ostream& os, DecodeStatus status) {
  switch (status) {
    case DecodeStatus::kOk:
      return os << "kOk";
    case DecodeStatus::kNeedMore:
      return os << "kNeedMore";
    case DecodeStatus::kMalformed:
      return os << "kMalformed";
  }
  return os << "DecodeStatus(" << static_cast<int>(status) << ")";
}

inline std::ostream& operator<<(std::ostream& os, WireErrorCode code) {
  return os << error_code_name(code);
}

namespace {

Bytes frame_with_body(Opcode opcode, std::uint16_t flags, std::uint32_t request_id,
                      const Bytes& body) {
  Bytes out;
  const std::size_t start = begin_frame(out, opcode, flags, request_id);
  out.insert(out.end(), body.begin(), body.end());
  finish_frame(out, start);
  return out;
}

// Decodes a copy of the first `size` bytes held in a buffer of exactly that size, so an
// address sanitizer build catches any read past the input.
DecodeResult decode_prefix(const FrameDecoder& decoder, const Bytes& bytes, std::size_t size) {
  const Bytes exact(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(size));
  DecodeResult result = decoder.decode(exact);
  result.frame.body = {};  // it pointed into `exact`
  return result;
}

}  // namespace

TEST_CASE("decodes the header fields and body of a whole frame") {
  const Bytes bytes = frame_with_body(Opcode::kPing, kFlagReply, 0xA1B2C3D4, {1, 2, 3});
  REQUIRE(bytes.size() == kHeaderSize + 3);

  const DecodeResult result = FrameDecoder().decode(bytes);
  REQUIRE(result.status == DecodeStatus::kOk);
  CHECK(result.frame_size == bytes.size());
  CHECK(result.frame.header.opcode == Opcode::kPing);
  CHECK(result.frame.header.flags == kFlagReply);
  CHECK(result.frame.header.is_reply());
  CHECK(result.frame.header.request_id == 0xA1B2C3D4);
  CHECK(result.frame.header.body_length == 3);
  CHECK(result.request_id == 0xA1B2C3D4);
  REQUIRE(result.frame.body.size() == 3);
  CHECK(result.frame.body.data() == bytes.data() + kHeaderSize);
}

TEST_CASE("writes the header little-endian, byte by byte as documented") {
  const Bytes bytes = frame_with_body(Opcode::kAcquire, 0, 0x04030201, {0xEE});
  const Bytes expected = {0x53, 0x4C, 0x01, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01,
                          0x02, 0x03, 0x04, 0x01, 0x00, 0x00, 0x00, 0xEE};
  CHECK(bytes == expected);
}

TEST_CASE("an empty body is a complete frame once the header is in") {
  const Bytes bytes = frame_with_body(Opcode::kStats, 0, 9, {});
  const DecodeResult result = FrameDecoder().decode(bytes);
  REQUIRE(result.status == DecodeStatus::kOk);
  CHECK(result.frame_size == kHeaderSize);
  CHECK(result.frame.body.empty());
}

TEST_CASE("every proper prefix of a frame needs more bytes") {
  const FrameDecoder decoder;
  const Bytes bytes = frame_with_body(Opcode::kPing, 0, 77, Bytes(40, 0x5A));
  for (std::size_t size = 0; size < bytes.size(); ++size) {
    INFO("prefix of " << size << " bytes");
    CHECK(decode_prefix(decoder, bytes, size).status == DecodeStatus::kNeedMore);
  }
  CHECK(decode_prefix(decoder, bytes, bytes.size()).status == DecodeStatus::kOk);
}

TEST_CASE("a wrong magic is refused as soon as its byte arrives, without a request id") {
  const FrameDecoder decoder;
  Bytes bytes = frame_with_body(Opcode::kPing, 0, 5, {});

  SECTION("first byte") {
    bytes[0] = 'G';  // e.g. an HTTP client: "GET /"
    for (std::size_t size = 1; size <= bytes.size(); ++size) {
      const DecodeResult result = decode_prefix(decoder, bytes, size);
      CHECK(result.status == DecodeStatus::kMalformed);
      CHECK(result.error == WireErrorCode::kMalformedFrame);
      CHECK(result.request_id == 0);
    }
  }
  SECTION("second byte") {
    bytes[1] = 0x00;
    CHECK(decode_prefix(decoder, bytes, 1).status == DecodeStatus::kNeedMore);
    for (std::size_t size = 2; size <= bytes.size(); ++size) {
      const DecodeResult result = decode_prefix(decoder, bytes, size);
      CHECK(result.status == DecodeStatus::kMalformed);
      CHECK(result.error == WireErrorCode::kMalformedFrame);
      CHECK(result.request_id == 0);
    }
  }
}

TEST_CASE("a framing version other than 1 and 2 is refused with kUnsupportedVersion") {
  const FrameDecoder decoder;
  for (const std::uint8_t version : {0, 3, 0xFF}) {
    Bytes bytes = frame_with_body(Opcode::kHello, 0, 42, {1, 0});
    bytes[2] = version;
    const DecodeResult early = decode_prefix(decoder, bytes, 3);
    CHECK(early.status == DecodeStatus::kMalformed);
    CHECK(early.error == WireErrorCode::kUnsupportedVersion);
    CHECK(early.request_id == 0);  // not arrived yet

    const DecodeResult full = decoder.decode(bytes);
    CHECK(full.status == DecodeStatus::kMalformed);
    CHECK(full.error == WireErrorCode::kUnsupportedVersion);
    CHECK(full.request_id == 42);  // echoed in the ERROR reply
  }
}

TEST_CASE("an unknown opcode is refused with kUnknownOpcode") {
  const FrameDecoder decoder;
  for (const std::uint8_t opcode : {0x00, 0x0C, 0x10, 0x7E, 0x80, 0xFF}) {
    Bytes bytes = frame_with_body(Opcode::kPing, 0, 3, {});
    bytes[3] = opcode;
    INFO("opcode " << int{opcode});
    const DecodeResult early = decode_prefix(decoder, bytes, 4);
    CHECK(early.status == DecodeStatus::kMalformed);
    CHECK(early.error == WireErrorCode::kUnknownOpcode);
    const DecodeResult full = decoder.decode(bytes);
    CHECK(full.error == WireErrorCode::kUnknownOpcode);
    CHECK(full.request_id == 3);
  }
}

TEST_CASE("every known opcode is accepted") {
  const FrameDecoder decoder;
  for (const Opcode opcode :
       {Opcode::kHello, Opcode::kPing, Opcode::kAcquire, Opcode::kReset, Opcode::kStats,
        Opcode::kCluster, Opcode::kReplicate, Opcode::kPull, Opcode::kReload, Opcode::kDrain}) {
    CHECK(decoder.decode(frame_with_body(opcode, 0, 1, {})).status == DecodeStatus::kOk);
    CHECK(decoder.decode(frame_with_body(opcode, kFlagReply, 1, {})).status == DecodeStatus::kOk);
  }
  CHECK(decoder.decode(frame_with_body(Opcode::kError, kFlagReply, 1, {})).status ==
        DecodeStatus::kOk);
}

TEST_CASE("any flag bit other than reply is refused as malformed") {
  const FrameDecoder decoder;
  for (int bit = 1; bit < 16; ++bit) {
    Bytes bytes = frame_with_body(Opcode::kPing, 0, 11, {});
    const auto flags = static_cast<std::uint16_t>(1u << bit);
    bytes[4] = static_cast<std::uint8_t>(flags);
    bytes[5] = static_cast<std::uint8_t>(flags >> 8);
    INFO("flag bit " << bit);
    const DecodeResult early = decode_prefix(decoder, bytes, 6);
    CHECK(early.status == DecodeStatus::kMalformed);
    CHECK(early.error == WireErrorCode::kMalformedFrame);
    CHECK(decoder.decode(bytes).request_id == 11);
  }
}

TEST_CASE("an ERROR frame without the reply flag is refused as malformed") {
  const Bytes bytes = frame_with_body(Opcode::kError, 0, 1, {});
  const DecodeResult result = FrameDecoder().decode(bytes);
  CHECK(result.status == DecodeStatus::kMalformed);
  CHECK(result.error == WireErrorCode::kMalformedFrame);
}

TEST_CASE("non-zero reserved header bytes are refused as malformed") {
  const FrameDecoder decoder;
  for (const std::size_t offset : {6, 7}) {
    Bytes bytes = frame_with_body(Opcode::kPing, 0, 12, {});
    bytes[offset] = 0x01;
    const DecodeResult early = decode_prefix(decoder, bytes, 8);
    CHECK(early.status == DecodeStatus::kMalformed);
    CHECK(early.error == WireErrorCode::kMalformedFrame);
    CHECK(decoder.decode(bytes).request_id == 12);
  }
}

TEST_CASE("checks run in the documented order") {
  // Bad version, opcode, flags and reserved at once: the version is reported.
  Bytes bytes = frame_with_body(Opcode::kPing, 0, 1, {});
  bytes[2] = 9;
  bytes[3] = 0x55;
  bytes[4] = 0x80;
  bytes[6] = 1;
  CHECK(FrameDecoder().decode(bytes).error == WireErrorCode::kUnsupportedVersion);
  bytes[2] = kFrameVersion;
  CHECK(FrameDecoder().decode(bytes).error == WireErrorCode::kUnknownOpcode);
  bytes[3] = static_cast<std::uint8_t>(Opcode::kPing);
  CHECK(FrameDecoder().decode(bytes).error == WireErrorCode::kMalformedFrame);
}

TEST_CASE("a body length above max frame is refused with only the 16 header bytes present") {
  const FrameDecoder decoder(100);
  Bytes header = frame_with_body(Opcode::kAcquire, 0, 21, {});

  SECTION("one byte over") {
    header[12] = 101;
    const DecodeResult result = decoder.decode(header);
    CHECK(result.status == DecodeStatus::kMalformed);
    CHECK(result.error == WireErrorCode::kFrameTooLarge);
    CHECK(result.request_id == 21);
  }
  SECTION("the largest u32") {
    header[12] = header[13] = header[14] = header[15] = 0xFF;
    const DecodeResult result = FrameDecoder().decode(header);
    CHECK(result.status == DecodeStatus::kMalformed);
    CHECK(result.error == WireErrorCode::kFrameTooLarge);
  }
  SECTION("exactly max frame waits for the body, then decodes") {
    header[12] = 100;
    CHECK(decoder.decode(header).status == DecodeStatus::kNeedMore);
    header.resize(kHeaderSize + 100);
    const DecodeResult result = decoder.decode(header);
    REQUIRE(result.status == DecodeStatus::kOk);
    CHECK(result.frame_size == kHeaderSize + 100);
  }
  SECTION("the header prefix before the length is complete still needs more") {
    header[12] = 0xFF;
    for (std::size_t size = 0; size < kHeaderSize; ++size) {
      CHECK(decode_prefix(decoder, header, size).status == DecodeStatus::kNeedMore);
    }
  }
}

TEST_CASE("the default decoder accepts up to the default max frame") {
  CHECK(FrameDecoder().max_frame() == kDefaultMaxFrame);
  Bytes header = frame_with_body(Opcode::kPing, 0, 1, {});
  header[12] = 0x00;
  header[13] = 0x00;
  header[14] = 0x10;  // 1 MiB
  CHECK(FrameDecoder().decode(header).status == DecodeStatus::kNeedMore);
  header[12] = 0x01;  // 1 MiB + 1
  CHECK(FrameDecoder().decode(header).error == WireErrorCode::kFrameTooLarge);
}

TEST_CASE("several pipelined frames in one buffer decode one after another") {
  Bytes stream;
  encode_ping(stream, 1, Bytes{0xAA}, false);
  encode_stats_request(stream, 2);
  const std::string_view keys[] = {"a", "bb"};
  encode_reset_request(stream, 3, keys);
  encode_ping(stream, 4, Bytes(100, 0x01), false);
  const std::size_t complete = stream.size();
  encode_ping(stream, 5, Bytes(10, 0x02), false);
  stream.resize(stream.size() - 4);  // the last frame is still arriving

  const FrameDecoder decoder;
  std::span<const std::uint8_t> rest(stream);
  std::vector<std::uint32_t> ids;
  std::size_t consumed = 0;
  for (;;) {
    const DecodeResult result = decoder.decode(rest);
    if (result.status != DecodeStatus::kOk) {
      CHECK(result.status == DecodeStatus::kNeedMore);
      break;
    }
    ids.push_back(result.frame.header.request_id);
    CHECK(result.frame.body.data() == rest.data() + kHeaderSize);
    rest = rest.subspan(result.frame_size);
    consumed += result.frame_size;
  }
  CHECK(ids == std::vector<std::uint32_t>{1, 2, 3, 4});
  CHECK(consumed == complete);
}

TEST_CASE("a frame followed by garbage decodes, then the garbage is refused") {
  Bytes stream;
  encode_stats_request(stream, 8);
  stream.push_back('x');
  const FrameDecoder decoder;
  const DecodeResult first = decoder.decode(stream);
  REQUIRE(first.status == DecodeStatus::kOk);
  const DecodeResult second = decoder.decode(std::span(stream).subspan(first.frame_size));
  CHECK(second.status == DecodeStatus::kMalformed);
  CHECK(second.error == WireErrorCode::kMalformedFrame);
}

TEST_CASE("error codes have stable names") {
  CHECK(error_code_name(WireErrorCode::kMalformedFrame) == "malformed_frame");
  CHECK(error_code_name(WireErrorCode::kFrameTooLarge) == "frame_too_large");
  CHECK(error_code_name(WireErrorCode::kBatchTooLarge) == "batch_too_large");
  CHECK(error_code_name(WireErrorCode::kInternal) == "internal");
  CHECK(error_code_name(static_cast<WireErrorCode>(999)) == "unknown");
}

TEST_CASE("framing version 2 carries the epoch after the 16 bytes of version 1") {
  Bytes bytes;
  const std::uint8_t payload[] = {7, 8, 9};
  encode_ping(bytes, 5, payload, /*reply=*/true, Framing::with_epoch(0x0102030405060708ull));
  REQUIRE(bytes.size() == kHeaderSizeEpoch + 3);
  CHECK(bytes[2] == kFrameVersionEpoch);
  CHECK(bytes[16] == 0x08);  // little-endian epoch
  CHECK(bytes[23] == 0x01);
  const DecodeResult result = FrameDecoder().decode(bytes);
  REQUIRE(result.status == DecodeStatus::kOk);
  CHECK(result.frame_size == bytes.size());
  CHECK(result.frame.header.version == kFrameVersionEpoch);
  CHECK(result.frame.header.epoch == 0x0102030405060708ull);
  CHECK(result.frame.header.request_id == 5);
  CHECK(result.frame.body.size() == 3);
  CHECK(result.frame.body[0] == 7);
  // Version 1 frames decode with epoch 0, as before.
  Bytes v1;
  encode_ping(v1, 5, payload, true);
  CHECK(FrameDecoder().decode(v1).frame.header.epoch == 0);
  CHECK(FrameDecoder().decode(v1).frame.header.version == kFrameVersion);
}

TEST_CASE("a version 2 header needs all 24 bytes, and an oversized body is refused at 16") {
  Bytes bytes;
  encode_ping(bytes, 9, {}, false, Framing::with_epoch(77));
  const FrameDecoder decoder;
  for (std::size_t size = 0; size < kHeaderSizeEpoch; ++size) {
    INFO("prefix " << size);
    CHECK(decode_prefix(decoder, bytes, size).status == DecodeStatus::kNeedMore);
  }
  CHECK(decoder.decode(bytes).status == DecodeStatus::kOk);
  Bytes big;
  const Bytes body(100, 1);
  encode_ping(big, 9, body, false, Framing::with_epoch(77));
  const FrameDecoder small(64);
  const DecodeResult refused = decode_prefix(small, big, kHeaderSize);
  CHECK(refused.status == DecodeStatus::kMalformed);
  CHECK(refused.error == WireErrorCode::kFrameTooLarge);
}

}  // namespace sluice::protocol
