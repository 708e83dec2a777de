// Shared by the protocol tests: a buffer that must hold exactly one frame, decoded.
#pragma once

#include <catch2/catch.hpp>

#include "protocol/frame.h"

namespace sluice::protocol::testing {

// Decodes a buffer that must hold exactly one frame; the frame's body points into `bytes`.
inline Frame decode_whole(const Bytes& bytes) {
  const DecodeResult result = FrameDecoder().decode(bytes);
  REQUIRE(result.status == DecodeStatus::kOk);
  REQUIRE(result.frame_size == bytes.size());
  return result.frame;
}

}  // namespace sluice::protocol::testing
