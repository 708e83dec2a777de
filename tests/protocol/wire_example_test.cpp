// The worked examples in docs/PROTOCOL.md, asserted byte for byte so the document stays exact.
#include <xxhash.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/key_hash.h"
#include "core/verdict.h"
#include "protocol/cluster_messages.h"
#include "protocol/messages.h"

namespace sluice::protocol {

TEST_CASE("docs example: a version 2 HELLO with a token encodes to the documented bytes") {
  Bytes out;
  encode_hello_request(out, 0, HelloRequest{2, "sluicectl", "s3cret"});

  const Bytes expected = {
      0x53, 0x4c, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // header
      0x13, 0x00, 0x00, 0x00,                                                  // body_length 19
      0x02, 0x09,                                            // version 2, name_len 9
      0x73, 0x6c, 0x75, 0x69, 0x63, 0x65, 0x63, 0x74, 0x6c,  // "sluicectl"
      0x06, 0x00,                                            // token_len 6
      0x73, 0x33, 0x63, 0x72, 0x65, 0x74,                    // "s3cret"
  };
  CHECK(out == expected);
  HelloRequest parsed;
  REQUIRE(parse_hello_request(std::span(expected).subspan(kHeaderSize), parsed));
  CHECK(parsed.token == "s3cret");
}

TEST_CASE("docs example: the same HELLO without a token, in version 2 and in version 1") {
  Bytes v2;
  encode_hello_request(v2, 1, HelloRequest{2, "sluicectl", ""});
  REQUIRE(v2.size() == kHeaderSize + 13);
  CHECK(v2[12] == 13);
  CHECK(Bytes(v2.end() - 2, v2.end()) == Bytes{0x00, 0x00});

  Bytes v1;
  encode_hello_request(v1, 1, HelloRequest{1, "sluicectl", ""});
  REQUIRE(v1.size() == kHeaderSize + 11);
  CHECK(v1[12] == 11);
  CHECK(v1[kHeaderSize] == 0x01);
  // After the version byte, version 1's body is version 2's without the final token_len.
  CHECK(Bytes(v1.begin() + kHeaderSize + 1, v1.end()) ==
        Bytes(v2.begin() + kHeaderSize + 1, v2.end() - 2));
}

TEST_CASE("docs example: one ACQUIRE item for user:42 encodes to the documented bytes") {
  AcquireItem item;
  item.key = "user:42";
  item.rule = Rule{Algorithm::kTokenBucket, 10, 1000, 20};  // 10 per second, bursts of 20
  item.cost = 1;
  Bytes out;
  encode_acquire_request(out, 7, std::span(&item, 1));

  const Bytes expected = {
      0x53, 0x4c, 0x01, 0x03, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,  // header
      0x23, 0x00, 0x00, 0x00,                                                  // body_length 35
      0x01, 0x00, 0x00, 0x00,                                                  // 1 item
      0x04, 0x00, 0x07, 0x00,                          // token bucket, no flags, key 7
      0x0a, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,  // limit 10, burst 20
      0x01, 0x00, 0x00, 0x00,                          // cost 1
      0xe8, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // period_ms 1000
      0x75, 0x73, 0x65, 0x72, 0x3a, 0x34, 0x32,        // "user:42"
  };
  CHECK(out == expected);
}

TEST_CASE("docs example: the allowed reply to that ACQUIRE encodes to the documented bytes") {
  const AcquireResult result{ItemStatus::kAllowed, 20, 19, 100, 0};
  Bytes out;
  encode_acquire_reply(out, 7, std::span(&result, 1));

  const Bytes expected = {
      0x53, 0x4c, 0x01, 0x03, 0x01, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,  // header, reply
      0x20, 0x00, 0x00, 0x00,                                                  // body_length 32
      0x01, 0x00, 0x00, 0x00,                                                  // 1 item
      0x01, 0x00, 0x00, 0x00,                                                  // allowed, reserved
      0x14, 0x00, 0x00, 0x00, 0x13, 0x00, 0x00, 0x00,  // limit 20, remaining 19
      0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // reset_after_ms 100
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // retry_after_ms 0
  };
  CHECK(out == expected);
}

TEST_CASE("docs example: a request that can never be allowed encodes retry_after as all ones") {
  const AcquireResult result{ItemStatus::kDenied, 20, 20, 0, kNever};
  Bytes out;
  encode_acquire_reply(out, 7, std::span(&result, 1));
  const Bytes expected_result = {
      0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,  // denied, 20, 20
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                          // reset 0
      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,                          // never
  };
  REQUIRE(out.size() == kHeaderSize + 4 + 28);
  CHECK(Bytes(out.begin() + kHeaderSize + 4, out.end()) == expected_result);
}

TEST_CASE("docs example: user:42 routes to shard 2 of 4 and shard 5 of 8") {
  const std::string_view key = "user:42";
  const XXH128_hash_t hash = XXH3_128bits(key.data(), key.size());
  CHECK(hash.low64 == 0x54c6a0eba0ce373full);
  const KeyHash key_hash{hash.low64, hash.high64};
  CHECK(hash_key(key) == key_hash);  // the documented recipe is the one the server uses
  CHECK(shard_for(key_hash, 4) == 2);
  CHECK(shard_for(key_hash, 8) == 5);
  CHECK(shard_for(key_hash, 1) == 0);
}

TEST_CASE("docs example: a PULL of what changed since an instant encodes to the documented body") {
  PullRequest request;
  request.max_records = 64;
  request.partitions = {9, 10};
  request.since_ns = 0x1122334455667788ull;
  Bytes out;
  encode_pull_request(out, 1, request, Framing::with_epoch(1));
  const Bytes body(out.begin() + kHeaderSizeEpoch, out.end());
  const Bytes expected = {
      0x02, 0x00, 0x40, 0x00,                          // flags since, reserved, max_records 64
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // cursor 0
      0x02, 0x00,                                      // count 2
      0x09, 0x00, 0x0a, 0x00,                          // partitions 9, 10
      0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,  // since_ns
  };
  CHECK(body == expected);
}

TEST_CASE("docs example: INSPECT of user:42 and its reply encode to the documented bytes") {
  Bytes request;
  encode_inspect_request(request, 7, "user:42");
  const Bytes expected_request = {
      0x53, 0x4c, 0x01, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,  // header
      0x09, 0x00, 0x00, 0x00,                                                  // body_length 9
      0x07, 0x00, 0x75, 0x73, 0x65, 0x72, 0x3a, 0x34, 0x32,                    // 7, "user:42"
  };
  CHECK(request == expected_request);

  // A fixed window of 10 a minute, 3 taken, read 1.5 s into the minute from 1,700,000,040 s.
  constexpr std::uint64_t kPeriodNs = 60'000'000'000;
  constexpr std::uint64_t kNowNs = 1'700'000'041'500'000'000;
  const KeyHash hash = hash_key("user:42");
  InspectReply reply;
  reply.status = InspectStatus::kStored;
  reply.role = InspectRole::kPrimary;
  reply.shard = static_cast<std::uint16_t>(shard_for(hash, 4));
  reply.now_ns = kNowNs;
  reply.record.fp_lo = hash.lo;
  reply.record.fp_hi = hash.hi;
  reply.record.algorithm = static_cast<std::uint8_t>(Algorithm::kFixedWindow);
  reply.record.capacity_class = 15 * 7 / 10;
  reply.record.state_a = kNowNs / kPeriodNs + 1;
  reply.record.state_b = 3;
  // The window's end, rounded up to 2^19 ns as the table stores expiries.
  const std::uint64_t end = (kNowNs / kPeriodNs + 1) * kPeriodNs;
  reply.record.idle_at_ns = (end + (1u << 19) - 1) / (1u << 19) * (1u << 19);
  Bytes out;
  encode_inspect_reply(out, 7, reply, {});
  const Bytes body(out.begin() + kHeaderSize, out.end());
  const Bytes expected_body = {
      0x01, 0x01, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,  // STORED, primary, serving, shard 2
      0x00, 0xbf, 0xc1, 0xdf, 0x07, 0x9d, 0x97, 0x17,  // now_ns
      0x3f, 0x37, 0xce, 0xa0, 0xeb, 0xa0, 0xc6, 0x54,  // fp_lo
      0x7b, 0x22, 0xdd, 0xe8, 0xe7, 0xcf, 0x63, 0x87,  // fp_hi
      0x01, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // fixed_window, class 10, no log
      0x17, 0x55, 0xb0, 0x01, 0x00, 0x00, 0x00, 0x00,  // state_a
      0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // state_b
      0x00, 0x00, 0xa8, 0x7e, 0x15, 0x9d, 0x97, 0x17,  // idle_at_ns
  };
  CHECK(body == expected_body);
  CHECK(out[3] == 0x0b);  // the opcode, with the reply flag set in the flags after it
  CHECK(out[4] == 0x01);
}

}  // namespace sluice::protocol
