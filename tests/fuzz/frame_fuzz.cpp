// libFuzzer target: the frame decoder and every body parser over arbitrary bytes. Beyond "no
// crash, no out-of-bounds read" (AddressSanitizer), it checks that whatever a parser accepts
// re-encodes to exactly the bytes it came from, since each message has one valid encoding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "protocol/cluster_messages.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace {

using namespace sluice::protocol;

void require(bool condition) {
  if (!condition) __builtin_trap();
}

bool inside(std::span<const std::uint8_t> outer, const void* data, std::size_t size) {
  const auto* begin = static_cast<const std::uint8_t*>(data);
  return size == 0 || (begin >= outer.data() && begin + size <= outer.data() + outer.size());
}

void require_reencodes(const Bytes& frame, std::span<const std::uint8_t> body) {
  require(frame.size() >= kHeaderSize &&
          std::equal(frame.begin() + kHeaderSize, frame.end(), body.begin(), body.end()));
}

// The parsers' out-params live across inputs, as they do on a connection.
struct Scratch {
  Bytes again;
  HelloRequest hello;
  HelloReply hello_reply;
  std::vector<AcquireItem> items;
  std::vector<AcquireResult> results;
  std::vector<std::string_view> keys;
  std::vector<ResetStatus> statuses;
  std::vector<StatEntry> stats;
  ErrorReply error;
  ClusterMapMessage cluster;
  std::vector<WireRecord> records;
  ReplicateReply replicate_reply;
  PullRequest pull;
  PullReplyHeader pull_header;
  ReloadReply reload;
  std::string_view inspect_key;
  InspectReply inspect;
  std::vector<std::uint64_t> log;
};

// Re-encodes parsed records into a new frame, as a node forwards or re-sends them.
void add_records(Bytes& out, const RecordFrame& frame, const std::vector<WireRecord>& records) {
  std::vector<std::uint64_t> log;
  for (const WireRecord& r : records) {
    log.clear();
    for (std::uint32_t i = 0; i < r.log_count; ++i) log.push_back(r.log_at(i));
    add_record(out, frame, r, log);
  }
  finish_records(out, frame);
}

void parse_all(std::span<const std::uint8_t> body, std::uint16_t max_batch, Scratch& s) {
  if (parse_hello_request(body, s.hello)) {
    require(inside(body, s.hello.client_name.data(), s.hello.client_name.size()));
    require(inside(body, s.hello.token.data(), s.hello.token.size()));
    s.again.clear();
    encode_hello_request(s.again, 0, s.hello);
    require_reencodes(s.again, body);
  }
  if (parse_hello_reply(body, s.hello_reply)) {
    s.again.clear();
    encode_hello_reply(s.again, 0, s.hello_reply);
    require_reencodes(s.again, body);
  }
  if (parse_acquire_request(body, max_batch, s.items)) {
    require(s.items.size() <= max_batch);
    for (const AcquireItem& item : s.items) require(inside(body, item.key.data(), item.key.size()));
    s.again.clear();
    encode_acquire_request(s.again, 0, s.items);
    require_reencodes(s.again, body);
  }
  if (parse_acquire_reply(body, s.results)) {
    s.again.clear();
    encode_acquire_reply(s.again, 0, s.results);
    require_reencodes(s.again, body);
  }
  if (parse_reset_request(body, max_batch, s.keys)) {
    require(s.keys.size() <= max_batch);
    for (const std::string_view key : s.keys) require(inside(body, key.data(), key.size()));
    s.again.clear();
    encode_reset_request(s.again, 0, s.keys);
    require_reencodes(s.again, body);
  }
  if (parse_reset_reply(body, s.statuses)) {
    s.again.clear();
    encode_reset_reply(s.again, 0, s.statuses);
    require_reencodes(s.again, body);
  }
  if (parse_stats_reply(body, s.stats)) {
    s.again.clear();
    encode_stats_reply(s.again, 0, s.stats);
    require_reencodes(s.again, body);
  }
  if (parse_error(body, s.error)) {
    require(inside(body, s.error.message.data(), s.error.message.size()));
    s.again.clear();
    encode_error(s.again, 0, s.error.code, s.error.message);
    require_reencodes(s.again, body);
  }
  require(static_cast<bool>(parse_stats_request(body)) == body.empty());
  if (parse_cluster_reply(body, s.cluster)) {
    s.again.clear();
    encode_cluster_reply(s.again, 0, s.cluster);
    require_reencodes(s.again, body);
  }
  if (parse_replicate_request(body, s.records)) {
    for (const WireRecord& r : s.records)
      require(inside(body, r.log_bytes.data(), r.log_bytes.size()));
    s.again.clear();
    add_records(s.again, begin_replicate_request(s.again, 0), s.records);
    require_reencodes(s.again, body);
  }
  if (parse_replicate_reply(body, s.replicate_reply)) {
    s.again.clear();
    encode_replicate_reply(s.again, 0, s.replicate_reply);
    require_reencodes(s.again, body);
  }
  if (parse_pull_request(body, s.pull)) {
    s.again.clear();
    encode_pull_request(s.again, 0, s.pull);
    require_reencodes(s.again, body);
  }
  if (parse_pull_reply(body, s.pull_header, s.records)) {
    s.again.clear();
    add_records(s.again, begin_pull_reply(s.again, 0, s.pull_header), s.records);
    require_reencodes(s.again, body);
  }
  if (parse_reload_reply(body, s.reload)) {
    s.again.clear();
    encode_reload_reply(s.again, 0, s.reload);
    require_reencodes(s.again, body);
  }
  if (parse_inspect_request(body, s.inspect_key)) {
    require(inside(body, s.inspect_key.data(), s.inspect_key.size()));
    s.again.clear();
    encode_inspect_request(s.again, 0, s.inspect_key);
    require_reencodes(s.again, body);
  }
  if (parse_inspect_reply(body, s.inspect)) {
    const WireRecord& r = s.inspect.record;
    require(inside(body, r.log_bytes.data(), r.log_bytes.size()));
    s.log.clear();
    for (std::uint32_t i = 0; i < r.log_count; ++i) s.log.push_back(r.log_at(i));
    s.again.clear();
    encode_inspect_reply(s.again, 0, s.inspect, s.log);
    require_reencodes(s.again, body);
  }
  require(static_cast<bool>(parse_cluster_request(body)) == body.empty());
  require(static_cast<bool>(parse_reload_request(body)) == body.empty());
}

}  // namespace

// Input layout: one config byte, then the byte stream. The config byte picks the limits (low
// nibble: max frame 16..240 bytes, high nibble: max batch 1..15; 0 means the default), so the
// limit checks get exercised without a real frame's magic byte doubling as a setting.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Scratch scratch;
  if (size == 0) return 0;
  const std::uint8_t config = data[0];
  const std::span<const std::uint8_t> input(data + 1, size - 1);
  const std::uint32_t max_frame = (config & 0x0F) == 0 ? kDefaultMaxFrame : (config & 0x0F) * 16u;
  const std::uint16_t max_batch = (config >> 4) == 0 ? kDefaultMaxBatch : (config >> 4);

  // Parsers over the raw bytes (the decoder would reject most of them before any parser ran).
  parse_all(input, max_batch, scratch);

  // The decoder over the same bytes as a stream; every frame's body goes through every parser.
  const FrameDecoder decoder(max_frame);
  std::span<const std::uint8_t> rest = input;
  for (;;) {
    const DecodeResult result = decoder.decode(rest);
    if (result.status == DecodeStatus::kNeedMore) break;
    if (result.status == DecodeStatus::kMalformed) {
      require(!result.reason.empty());
      break;
    }
    require(result.frame_size >= kHeaderSize && result.frame_size <= rest.size());
    require(result.frame.header.body_length <= max_frame);
    require(result.frame.body.size() == result.frame.header.body_length);
    require(inside(rest, result.frame.body.data(), result.frame.body.size()));
    parse_all(result.frame.body, max_batch, scratch);
    rest = rest.subspan(result.frame_size);
  }
  return 0;
}
