// Corrupted and truncated input: the decoder and parsers never crash, never read outside their
// input (run under -fsanitize=address to check), and whatever they accept re-encodes to the
// very same bytes.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "protocol/frame.h"
#include "protocol/messages.h"

namespace sluice::protocol {

namespace {

bool within(std::span<const std::uint8_t> outer, const void* data, std::size_t size) {
  const auto* begin = static_cast<const std::uint8_t*>(data);
  return size == 0 || (begin >= outer.data() && begin + size <= outer.data() + outer.size());
}

bool encoded_body_is(const Bytes& frame, std::span<const std::uint8_t> body) {
  return frame.size() >= kHeaderSize &&
         std::equal(frame.begin() + kHeaderSize, frame.end(), body.begin(), body.end());
}

// Every parser runs on the body, whatever the opcode; what parses must re-encode identically.
void check_parsers(std::span<const std::uint8_t> body, std::uint16_t max_batch) {
  Bytes again;

  HelloRequest hello;
  if (parse_hello_request(body, hello)) {
    REQUIRE(within(body, hello.client_name.data(), hello.client_name.size()));
    REQUIRE(within(body, hello.token.data(), hello.token.size()));
    encode_hello_request(again, 0, hello);
    REQUIRE(encoded_body_is(again, body));
  }

  HelloReply hello_reply;
  if (parse_hello_reply(body, hello_reply)) {
    again.clear();
    encode_hello_reply(again, 0, hello_reply);
    REQUIRE(encoded_body_is(again, body));
  }

  std::vector<AcquireItem> items;
  const ParseResult acquire = parse_acquire_request(body, max_batch, items);
  if (acquire) {
    REQUIRE(items.size() <= max_batch);
    for (const AcquireItem& item : items) REQUIRE(within(body, item.key.data(), item.key.size()));
    again.clear();
    encode_acquire_request(again, 0, items);
    REQUIRE(encoded_body_is(again, body));
  } else {
    REQUIRE_FALSE(acquire.reason.empty());
  }

  std::vector<AcquireResult> results;
  if (parse_acquire_reply(body, results)) {
    again.clear();
    encode_acquire_reply(again, 0, results);
    REQUIRE(encoded_body_is(again, body));
  }

  std::vector<std::string_view> keys;
  if (parse_reset_request(body, max_batch, keys)) {
    REQUIRE(keys.size() <= max_batch);
    for (const std::string_view key : keys) REQUIRE(within(body, key.data(), key.size()));
    again.clear();
    encode_reset_request(again, 0, keys);
    REQUIRE(encoded_body_is(again, body));
  }

  std::vector<ResetStatus> statuses;
  if (parse_reset_reply(body, statuses)) {
    again.clear();
    encode_reset_reply(again, 0, statuses);
    REQUIRE(encoded_body_is(again, body));
  }

  std::vector<StatEntry> stats;
  if (parse_stats_reply(body, stats)) {
    again.clear();
    encode_stats_reply(again, 0, stats);
    REQUIRE(encoded_body_is(again, body));
  }

  ErrorReply error;
  if (parse_error(body, error)) {
    REQUIRE(within(body, error.message.data(), error.message.size()));
    again.clear();
    encode_error(again, 0, error.code, error.message);
    REQUIRE(encoded_body_is(again, body));
  }

  REQUIRE(static_cast<bool>(parse_stats_request(body)) == body.empty());
}

// Decodes frames off the front of `input` until it needs more or refuses, checking each one.
void check_stream(std::span<const std::uint8_t> input, const FrameDecoder& decoder,
                  std::uint16_t max_batch) {
  std::span<const std::uint8_t> rest = input;
  for (;;) {
    const DecodeResult result = decoder.decode(rest);
    if (result.status == DecodeStatus::kNeedMore) return;
    if (result.status == DecodeStatus::kMalformed) {
      REQUIRE_FALSE(result.reason.empty());
      return;
    }
    REQUIRE(result.frame_size >= kHeaderSize);
    REQUIRE(result.frame_size <= rest.size());
    REQUIRE(result.frame.body.size() == result.frame.header.body_length);
    REQUIRE(result.frame.header.body_length <= decoder.max_frame());
    REQUIRE(within(rest, result.frame.body.data(), result.frame.body.size()));
    check_parsers(result.frame.body, max_batch);
    rest = rest.subspan(result.frame_size);
  }
}

std::vector<Bytes> sample_frames() {
  std::vector<Bytes> frames;
  auto add = [&frames](auto encode) {
    Bytes out;
    encode(out);
    frames.push_back(std::move(out));
  };

  add([](Bytes& out) { encode_hello_request(out, 1, HelloRequest{1, "robust", ""}); });
  add([](Bytes& out) { encode_hello_request(out, 1, HelloRequest{2, "robust", "t0ken"}); });
  add([](Bytes& out) {
    HelloReply hello;
    hello.this_shard = 1;
    hello.shard_ports = {7101, 7102, 7103};
    hello.node_id = "node-1";
    encode_hello_reply(out, 1, hello);
  });
  add([](Bytes& out) { encode_ping(out, 2, Bytes{1, 2, 3, 4}, false); });
  add([](Bytes& out) {
    const std::vector<AcquireItem> items = {
        {"user:1", Rule{Algorithm::kGcra, 10, 1000, 5}, 1, false},
        {"user:2", Rule{Algorithm::kSlidingLog, 3, 60'000, 0}, 2, true},
        {"", Rule{static_cast<Algorithm>(9), 1, 1, 1}, 1, false},
    };
    encode_acquire_request(out, 3, items);
  });
  add([](Bytes& out) {
    const std::vector<AcquireResult> results = {{ItemStatus::kAllowed, 10, 9, 100, 0},
                                                {ItemStatus::kDenied, 3, 0, 60'000, kNever}};
    encode_acquire_reply(out, 3, results);
  });
  add([](Bytes& out) {
    const std::string_view keys[] = {"user:1", "user:2"};
    encode_reset_request(out, 4, keys);
  });
  add([](Bytes& out) {
    const ResetStatus statuses[] = {ResetStatus::kRemoved, ResetStatus::kAbsent};
    encode_reset_reply(out, 4, statuses);
  });
  add([](Bytes& out) { encode_stats_request(out, 5); });
  add([](Bytes& out) {
    const std::vector<StatEntry> stats = {{"total.keys", 3}, {"shard.0.allowed", 42}};
    encode_stats_reply(out, 5, stats);
  });
  add([](Bytes& out) { encode_error(out, 6, WireErrorCode::kMalformedFrame, "bad magic"); });
  return frames;
}

}  // namespace

TEST_CASE("every sample frame decodes whole and parses as what it is") {
  const FrameDecoder decoder;
  for (const Bytes& frame : sample_frames()) {
    const DecodeResult result = decoder.decode(frame);
    REQUIRE(result.status == DecodeStatus::kOk);
    REQUIRE(result.frame_size == frame.size());
    check_parsers(result.frame.body, kDefaultMaxBatch);
  }
}

TEST_CASE("every truncation of every sample frame needs more bytes") {
  const FrameDecoder decoder;
  for (const Bytes& frame : sample_frames()) {
    for (std::size_t size = 0; size < frame.size(); ++size) {
      const Bytes prefix(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(size));
      INFO("opcode " << int{frame[3]} << ", prefix of " << size << " bytes");
      REQUIRE(decoder.decode(prefix).status == DecodeStatus::kNeedMore);
    }
  }
}

TEST_CASE("a body_length one short or one long is caught by the parser or the decoder") {
  const FrameDecoder decoder;
  Bytes stream;
  const std::string_view keys[] = {"abc"};
  encode_reset_request(stream, 1, keys);
  encode_stats_request(stream, 2);

  SECTION("one short: the frame decodes but its body no longer parses") {
    Bytes bad = stream;
    bad[12] -= 1;
    const DecodeResult result = decoder.decode(bad);
    REQUIRE(result.status == DecodeStatus::kOk);
    std::vector<std::string_view> parsed;
    const ParseResult parse = parse_reset_request(result.frame.body, kDefaultMaxBatch, parsed);
    CHECK_FALSE(parse);
    CHECK(parse.error == WireErrorCode::kMalformedFrame);
  }
  SECTION("one long: the body swallows the next frame's first byte and no longer parses") {
    Bytes bad = stream;
    bad[12] += 1;
    const DecodeResult result = decoder.decode(bad);
    REQUIRE(result.status == DecodeStatus::kOk);
    std::vector<std::string_view> parsed;
    CHECK_FALSE(parse_reset_request(result.frame.body, kDefaultMaxBatch, parsed));
    // What follows starts mid-header and is refused by its magic.
    const DecodeResult next = decoder.decode(std::span(bad).subspan(result.frame_size));
    CHECK(next.status == DecodeStatus::kMalformed);
  }
}

TEST_CASE("randomly corrupted and truncated frames never crash the decoder or the parsers") {
  const std::vector<Bytes> frames = sample_frames();
  std::mt19937_64 rng(20240601);  // fixed: a failure reproduces
  auto pick = [&rng](std::size_t bound) {
    return static_cast<std::size_t>(std::uniform_int_distribution<std::size_t>(0, bound - 1)(rng));
  };
  const std::uint16_t batches[] = {0, 1, 2, kDefaultMaxBatch};
  const std::uint32_t max_frames[] = {0, 8, 64, kDefaultMaxFrame};

  int kinds[7] = {};
  for (int round = 0; round < 20'000; ++round) {
    Bytes input = frames[pick(frames.size())];
    if (pick(4) == 0) {  // pipelined with a second frame
      const Bytes& second = frames[pick(frames.size())];
      input.insert(input.end(), second.begin(), second.end());
    }
    const std::size_t kind = pick(7);
    ++kinds[kind];
    switch (kind) {
      case 0:  // flip a few bits
        for (std::size_t n = 1 + pick(3); n > 0; --n) {
          input[pick(input.size())] ^= static_cast<std::uint8_t>(1u << pick(8));
        }
        break;
      case 1:  // overwrite a byte
        input[pick(input.size())] = static_cast<std::uint8_t>(pick(256));
        break;
      case 2:  // truncate
        input.resize(pick(input.size()));
        break;
      case 3:  // corrupt a body byte (past the header: lengths, counts, statuses)
        if (input.size() > kHeaderSize) {
          input[kHeaderSize + pick(input.size() - kHeaderSize)] =
              static_cast<std::uint8_t>(pick(2) == 0 ? 0xFF : pick(256));
        }
        break;
      case 4: {  // grow or shrink body_length, keeping the bytes
        const int delta = static_cast<int>(pick(9)) - 4;
        input[12] = static_cast<std::uint8_t>(input[12] + delta);
        break;
      }
      case 5:  // append random bytes
        for (std::size_t n = 1 + pick(24); n > 0; --n) {
          input.push_back(static_cast<std::uint8_t>(pick(256)));
        }
        break;
      case 6:  // erase a byte
        input.erase(input.begin() + static_cast<std::ptrdiff_t>(pick(input.size())));
        break;
    }
    // An exactly sized copy, so a sanitizer build catches a read one past the end.
    const Bytes exact(input.begin(), input.end());
    const FrameDecoder decoder(max_frames[pick(4)]);
    check_stream(exact, decoder, batches[pick(4)]);
    // The body parsers also see the raw bytes, headers and all.
    check_parsers(exact, batches[pick(4)]);
  }
  for (const int count : kinds) CHECK(count > 0);
}

}  // namespace sluice::protocol
