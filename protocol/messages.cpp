#include "protocol/messages.h"

#include <cassert>
#include <cstring>
#include <limits>

#include "protocol/coding.h"

namespace sluice::protocol {

namespace {

constexpr std::size_t kAcquireItemFixedSize = 24;  // before the key bytes
constexpr std::size_t kAcquireResultSize = 28;
constexpr std::size_t kListHeaderSize = 4;  // u16 count, u16 reserved
constexpr std::size_t kU8Max = std::numeric_limits<std::uint8_t>::max();
constexpr std::size_t kU16Max = std::numeric_limits<std::uint16_t>::max();

// Grows `out` by `size` bytes and returns where they start. resize() grows geometrically, so a
// buffer reused across frames stops allocating once it has reached its working size.
std::uint8_t* append(Bytes& out, std::size_t size) {
  const std::size_t old_size = out.size();
  out.resize(old_size + size);
  return out.data() + old_size;
}

void append_bytes(std::uint8_t* dst, std::string_view bytes) {
  if (!bytes.empty()) std::memcpy(dst, bytes.data(), bytes.size());
}

// Text fields (names, messages) are cut to what their length field can carry.
std::string_view clip(std::string_view text, std::size_t max) {
  return text.size() <= max ? text : text.substr(0, max);
}

// A key longer than a u16 length can express is sent empty: the server answers an empty key
// with kInvalidKey, which is what it would answer for any key above its max key anyway.
std::string_view wire_key(std::string_view key) { return key.size() <= kU16Max ? key : ""; }

// Reads the `u16 count, u16 reserved` list header and checks the count against max_batch.
ParseResult read_list_header(ByteReader& in, std::uint16_t max_batch, std::uint16_t& count) {
  std::uint16_t reserved = 0;
  if (!in.read_u16(count) || !in.read_u16(reserved)) {
    return ParseResult::failure("body shorter than its item count header");
  }
  if (reserved != 0) return ParseResult::failure("reserved body bytes not zero");
  if (count > max_batch) {
    return ParseResult::failure("more items than the max batch", WireErrorCode::kBatchTooLarge);
  }
  return {};
}

ParseResult trailing_bytes() { return ParseResult::failure("bytes left after the last item"); }

constexpr bool is_known_item_status(std::uint8_t value) {
  return value <= static_cast<std::uint8_t>(ItemStatus::kUnavailable);
}

constexpr bool is_known_reset_status(std::uint8_t value) {
  switch (static_cast<ResetStatus>(value)) {
    case ResetStatus::kAbsent:
    case ResetStatus::kRemoved:
    case ResetStatus::kInvalidKey:
    case ResetStatus::kRedirect:
    case ResetStatus::kUnavailable:
      return true;
  }
  return false;
}

// Writes header_size(framing.version) bytes.
void write_header(std::uint8_t* p, const Framing& framing, Opcode opcode, std::uint16_t flags,
                  std::uint32_t request_id, std::uint32_t body_length) {
  assert(framing.version == kFrameVersion || framing.version == kFrameVersionEpoch);
  encode_fixed16(p, kMagic);
  p[2] = framing.version;
  p[3] = static_cast<std::uint8_t>(opcode);
  encode_fixed16(p + 4, flags);
  encode_fixed16(p + 6, 0);
  encode_fixed32(p + 8, request_id);
  encode_fixed32(p + 12, body_length);
  if (framing.version == kFrameVersionEpoch) encode_fixed64(p + kHeaderSize, framing.epoch);
}

// The header size of the frame that starts at out[frame_start], from its version byte.
std::size_t header_size_at(const Bytes& out, std::size_t frame_start) {
  return header_size(out[frame_start + 2]);
}

// Appends a whole frame whose body size is known up front (one resize instead of one per
// field) and returns where the body starts. REQUIRES: body_length fits in a u32.
std::uint8_t* append_frame(Bytes& out, const Framing& framing, Opcode opcode, std::uint16_t flags,
                           std::uint32_t request_id, std::size_t body_length) {
  assert(body_length <= std::numeric_limits<std::uint32_t>::max());
  const std::size_t header = header_size(framing.version);
  std::uint8_t* p = append(out, header + body_length);
  write_header(p, framing, opcode, flags, request_id, static_cast<std::uint32_t>(body_length));
  return p + header;
}

// Writes the `u16 count, u16 reserved` list header. REQUIRES: count fits in a u16.
void write_list_header(std::uint8_t* p, std::size_t count) {
  assert(count <= kU16Max);
  encode_fixed16(p, static_cast<std::uint16_t>(count));
  encode_fixed16(p + 2, 0);
}

// Writes one ACQUIRE item; `key` is already wire_key()'d. Returns the byte after it.
// A give-back item carries its lease's stamp after the key.
std::size_t acquire_item_size(const AcquireItem& item, std::string_view key) {
  return kAcquireItemFixedSize + key.size() + (item.give_back ? 4 : 0);
}

std::uint8_t* write_acquire_item(std::uint8_t* p, const AcquireItem& item, std::string_view key) {
  p[0] = static_cast<std::uint8_t>(item.rule.algorithm);
  p[1] = static_cast<std::uint8_t>((item.peek ? kItemFlagPeek : 0) |
                                   (item.lease ? kItemFlagLease : 0) |
                                   (item.give_back ? kItemFlagGiveBack : 0));
  encode_fixed16(p + 2, static_cast<std::uint16_t>(key.size()));
  encode_fixed32(p + 4, item.rule.limit);
  encode_fixed32(p + 8, item.rule.burst);
  encode_fixed32(p + 12, item.cost);
  encode_fixed64(p + 16, item.rule.period_ms);
  append_bytes(p + kAcquireItemFixedSize, key);
  p += kAcquireItemFixedSize + key.size();
  if (item.give_back) {
    encode_fixed32(p, item.stamp);
    p += 4;
  }
  return p;
}

}  // namespace

// ---- framing -------------------------------------------------------------------------------

std::size_t begin_frame(Bytes& out, Opcode opcode, std::uint16_t flags, std::uint32_t request_id,
                        const Framing& framing) {
  const std::size_t start = out.size();
  write_header(append(out, header_size(framing.version)), framing, opcode, flags, request_id, 0);
  return start;
}

void finish_frame(Bytes& out, std::size_t frame_start) {
  const std::size_t header = header_size_at(out, frame_start);
  assert(out.size() >= frame_start + header);
  const std::size_t body_length = out.size() - frame_start - header;
  assert(body_length <= std::numeric_limits<std::uint32_t>::max());
  encode_fixed32(out.data() + frame_start + 12, static_cast<std::uint32_t>(body_length));
}

// ---- HELLO ---------------------------------------------------------------------------------

void encode_hello_request(Bytes& out, std::uint32_t request_id, const HelloRequest& hello,
                          const Framing& framing) {
  const std::string_view name = clip(hello.client_name, kU8Max);
  const bool with_token = hello.version >= kFirstTokenVersion;
  assert(with_token || hello.token.empty());
  assert(hello.token.size() <= kMaxTokenLength);
  // Clipped only so that the length field cannot wrap; the server refuses a token above
  // kMaxTokenLength as malformed anyway.
  const std::string_view token = with_token ? clip(hello.token, kU16Max) : std::string_view();
  const std::size_t body_length = 2 + name.size() + (with_token ? 2 + token.size() : 0);
  std::uint8_t* p = append_frame(out, framing, Opcode::kHello, 0, request_id, body_length);
  p[0] = hello.version;
  p[1] = static_cast<std::uint8_t>(name.size());
  append_bytes(p + 2, name);
  if (!with_token) return;
  p += 2 + name.size();
  encode_fixed16(p, static_cast<std::uint16_t>(token.size()));
  append_bytes(p + 2, token);
}

ParseResult parse_hello_request(std::span<const std::uint8_t> body, HelloRequest& out) {
  ByteReader in(body);
  std::uint8_t name_len = 0;
  out.token = {};
  if (!in.read_u8(out.version) || !in.read_u8(name_len)) {
    return ParseResult::failure("HELLO body too short");
  }
  if (!in.read_string(name_len, out.client_name)) {
    return ParseResult::failure("HELLO client name runs past the body");
  }
  if (out.version >= kFirstTokenVersion) {
    std::uint16_t token_len = 0;
    if (!in.read_u16(token_len)) return ParseResult::failure("HELLO token length missing");
    // Refused from the length alone, before looking at any token byte.
    if (token_len > kMaxTokenLength) return ParseResult::failure("HELLO token too long");
    if (!in.read_string(token_len, out.token)) {
      return ParseResult::failure("HELLO token runs past the body");
    }
    if (!in.at_end()) return ParseResult::failure("bytes left after the HELLO token");
    return {};
  }
  if (!in.at_end()) return ParseResult::failure("bytes left after the HELLO client name");
  return {};
}

void encode_hello_reply(Bytes& out, std::uint32_t request_id, const HelloReply& hello,
                        const Framing& framing) {
  assert(hello.shard_ports.size() <= kU16Max);
  const std::string_view node_id = clip(hello.node_id, kU16Max);
  const std::size_t ports = hello.shard_ports.size();
  std::uint8_t* p = append_frame(out, framing, Opcode::kHello, kFlagReply, request_id,
                                 14 + 2 * ports + 2 + node_id.size());
  p[0] = hello.version;
  p[1] = 0;
  encode_fixed16(p + 2, hello.this_shard);
  encode_fixed32(p + 4, hello.max_frame);
  encode_fixed16(p + 8, hello.max_key);
  encode_fixed16(p + 10, hello.max_batch);
  encode_fixed16(p + 12, static_cast<std::uint16_t>(ports));
  p += 14;
  for (const std::uint16_t port : hello.shard_ports) {
    encode_fixed16(p, port);
    p += 2;
  }
  encode_fixed16(p, static_cast<std::uint16_t>(node_id.size()));
  append_bytes(p + 2, node_id);
}

ParseResult parse_hello_reply(std::span<const std::uint8_t> body, HelloReply& out) {
  ByteReader in(body);
  std::uint8_t reserved = 0;
  std::uint16_t shard_count = 0;
  if (!in.read_u8(out.version) || !in.read_u8(reserved) || !in.read_u16(out.this_shard) ||
      !in.read_u32(out.max_frame) || !in.read_u16(out.max_key) || !in.read_u16(out.max_batch) ||
      !in.read_u16(shard_count)) {
    return ParseResult::failure("HELLO reply too short");
  }
  if (reserved != 0) return ParseResult::failure("reserved HELLO reply byte not zero");
  if (shard_count == 0) return ParseResult::failure("HELLO reply lists no shards");
  if (out.this_shard != kPublicPort && out.this_shard >= shard_count) {
    return ParseResult::failure("HELLO reply this_shard outside the shard list");
  }
  if (in.remaining() < 2 * std::size_t{shard_count}) {
    return ParseResult::failure("HELLO reply shard ports run past the body");
  }
  out.shard_ports.resize(shard_count);
  for (std::uint16_t& port : out.shard_ports) in.read_u16(port);
  std::uint16_t node_id_len = 0;
  std::string_view node_id;
  if (!in.read_u16(node_id_len) || !in.read_string(node_id_len, node_id)) {
    return ParseResult::failure("HELLO reply node id runs past the body");
  }
  if (!in.at_end()) return ParseResult::failure("bytes left after the HELLO reply node id");
  out.node_id.assign(node_id);
  return {};
}

// ---- PING ----------------------------------------------------------------------------------

void encode_ping(Bytes& out, std::uint32_t request_id, std::span<const std::uint8_t> payload,
                 bool reply, const Framing& framing) {
  std::uint8_t* p =
      append_frame(out, framing, Opcode::kPing, reply ? kFlagReply : 0, request_id, payload.size());
  if (!payload.empty()) std::memcpy(p, payload.data(), payload.size());
}

// ---- ACQUIRE -------------------------------------------------------------------------------

void set_opcode(Bytes& out, std::size_t frame_start, Opcode opcode) {
  assert(frame_start + header_size_at(out, frame_start) <= out.size());
  out[frame_start + 3] = static_cast<std::uint8_t>(opcode);
}

std::string_view item_status_name(ItemStatus status) {
  switch (status) {
    case ItemStatus::kDenied:
      return "denied";
    case ItemStatus::kAllowed:
      return "allowed";
    case ItemStatus::kInvalidRule:
      return "invalid_rule";
    case ItemStatus::kInvalidKey:
      return "invalid_key";
    case ItemStatus::kNoMemory:
      return "no_memory";
    case ItemStatus::kRedirect:
      return "redirect";
    case ItemStatus::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

AcquireResult to_result(const Verdict& decision) {
  AcquireResult result;
  result.status = decision.allowed ? ItemStatus::kAllowed : ItemStatus::kDenied;
  result.limit = decision.limit;
  result.remaining = decision.remaining;
  result.reset_after_ms = ns_to_ms_ceil(decision.reset_after_ns);
  result.retry_after_ms = ns_to_ms_ceil(decision.retry_after_ns);
  return result;
}

std::size_t begin_acquire_request(Bytes& out, std::uint32_t request_id, const Framing& framing) {
  const std::size_t start = begin_frame(out, Opcode::kAcquire, 0, request_id, framing);
  write_list_header(append(out, kListHeaderSize), 0);
  return start;
}

void add_acquire_item(Bytes& out, std::size_t frame_start, const AcquireItem& item) {
  std::uint8_t* count_field = out.data() + frame_start + header_size_at(out, frame_start);
  const std::uint16_t count = decode_fixed16(count_field);
  assert(count < kU16Max);
  encode_fixed16(count_field, static_cast<std::uint16_t>(count + 1));

  const std::string_view key = wire_key(item.key);
  write_acquire_item(append(out, acquire_item_size(item, key)), item, key);
}

void finish_acquire_request(Bytes& out, std::size_t frame_start) { finish_frame(out, frame_start); }

void encode_acquire_request(Bytes& out, std::uint32_t request_id,
                            std::span<const AcquireItem> items, const Framing& framing) {
  std::size_t body_length = kListHeaderSize;
  for (const AcquireItem& item : items) {
    body_length += acquire_item_size(item, wire_key(item.key));
  }
  std::uint8_t* p = append_frame(out, framing, Opcode::kAcquire, 0, request_id, body_length);
  write_list_header(p, items.size());
  p += kListHeaderSize;
  for (const AcquireItem& item : items) p = write_acquire_item(p, item, wire_key(item.key));
}

ParseResult parse_acquire_request(std::span<const std::uint8_t> body, std::uint16_t max_batch,
                                  std::vector<AcquireItem>& out) {
  out.clear();
  ByteReader in(body);
  std::uint16_t count = 0;
  if (ParseResult header = read_list_header(in, max_batch, count); !header) return header;
  // Every item is at least its fixed part; checking up front bounds the work and the vector.
  if (in.remaining() < std::size_t{count} * kAcquireItemFixedSize) {
    return ParseResult::failure("ACQUIRE items run past the body");
  }
  out.reserve(count);
  for (std::uint16_t i = 0; i < count; ++i) {
    std::uint8_t algorithm = 0;
    std::uint8_t flags = 0;
    std::uint16_t key_len = 0;
    AcquireItem item;
    if (!in.read_u8(algorithm) || !in.read_u8(flags) || !in.read_u16(key_len) ||
        !in.read_u32(item.rule.limit) || !in.read_u32(item.rule.burst) || !in.read_u32(item.cost) ||
        !in.read_u64(item.rule.period_ms)) {
      return ParseResult::failure("ACQUIRE items run past the body");
    }
    if ((flags & ~(kItemFlagPeek | kItemFlagLease | kItemFlagGiveBack)) != 0) {
      return ParseResult::failure("unknown ACQUIRE item flag bits set");
    }
    // At most one of peek, lease and give back.
    if ((flags & (flags - 1)) != 0) {
      return ParseResult::failure(
          "ACQUIRE item flags: peek, lease and give back exclude each other");
    }
    if (!in.read_string(key_len, item.key)) {
      return ParseResult::failure("ACQUIRE item key runs past the body");
    }
    // An unknown algorithm is kept as is: the server answers that item with kInvalidRule.
    item.rule.algorithm = static_cast<Algorithm>(algorithm);
    item.peek = (flags & kItemFlagPeek) != 0;
    item.lease = (flags & kItemFlagLease) != 0;
    item.give_back = (flags & kItemFlagGiveBack) != 0;
    if (item.give_back && !in.read_u32(item.stamp)) {
      return ParseResult::failure("ACQUIRE give-back item stamp runs past the body");
    }
    out.push_back(item);
  }
  if (!in.at_end()) return trailing_bytes();
  return {};
}

void encode_acquire_reply(Bytes& out, std::uint32_t request_id,
                          std::span<const AcquireResult> results, const Framing& framing) {
  std::uint8_t* p = append_frame(out, framing, Opcode::kAcquire, kFlagReply, request_id,
                                 kListHeaderSize + results.size() * kAcquireResultSize);
  write_list_header(p, results.size());
  p += kListHeaderSize;
  for (const AcquireResult& result : results) {
    p[0] = static_cast<std::uint8_t>(result.status);
    // `granted`, 24 bits, least significant byte first (as every field).
    p[1] = static_cast<std::uint8_t>(result.granted);
    p[2] = static_cast<std::uint8_t>(result.granted >> 8);
    p[3] = static_cast<std::uint8_t>(result.granted >> 16);
    encode_fixed32(p + 4, result.limit);
    encode_fixed32(p + 8, result.remaining);
    encode_fixed64(p + 12, result.reset_after_ms);
    encode_fixed64(p + 20, result.retry_after_ms);
    p += kAcquireResultSize;
  }
}

ParseResult parse_acquire_reply(std::span<const std::uint8_t> body,
                                std::vector<AcquireResult>& out) {
  out.clear();
  ByteReader in(body);
  std::uint16_t count = 0;
  if (ParseResult header = read_list_header(in, kU16Max, count); !header) return header;
  if (in.remaining() < std::size_t{count} * kAcquireResultSize) {
    return ParseResult::failure("ACQUIRE results run past the body");
  }
  out.resize(count);
  for (AcquireResult& result : out) {
    std::uint8_t status = 0;
    std::uint8_t granted[3] = {};
    in.read_u8(status);
    in.read_u8(granted[0]);
    in.read_u8(granted[1]);
    in.read_u8(granted[2]);
    in.read_u32(result.limit);
    in.read_u32(result.remaining);
    in.read_u64(result.reset_after_ms);
    in.read_u64(result.retry_after_ms);
    if (!is_known_item_status(status)) return ParseResult::failure("unknown ACQUIRE item status");
    result.granted =
        granted[0] | (std::uint32_t{granted[1]} << 8) | (std::uint32_t{granted[2]} << 16);
    result.status = static_cast<ItemStatus>(status);
  }
  if (!in.at_end()) return trailing_bytes();
  return {};
}

// ---- RESET ---------------------------------------------------------------------------------

void encode_reset_request(Bytes& out, std::uint32_t request_id,
                          std::span<const std::string_view> keys, const Framing& framing) {
  std::size_t body_length = kListHeaderSize;
  for (const std::string_view key : keys) body_length += 2 + wire_key(key).size();
  std::uint8_t* p = append_frame(out, framing, Opcode::kReset, 0, request_id, body_length);
  write_list_header(p, keys.size());
  p += kListHeaderSize;
  for (const std::string_view raw_key : keys) {
    const std::string_view key = wire_key(raw_key);
    encode_fixed16(p, static_cast<std::uint16_t>(key.size()));
    append_bytes(p + 2, key);
    p += 2 + key.size();
  }
}

ParseResult parse_reset_request(std::span<const std::uint8_t> body, std::uint16_t max_batch,
                                std::vector<std::string_view>& out) {
  out.clear();
  ByteReader in(body);
  std::uint16_t count = 0;
  if (ParseResult header = read_list_header(in, max_batch, count); !header) return header;
  if (in.remaining() < std::size_t{count} * 2) {
    return ParseResult::failure("RESET keys run past the body");
  }
  out.reserve(count);
  for (std::uint16_t i = 0; i < count; ++i) {
    std::uint16_t key_len = 0;
    std::string_view key;
    if (!in.read_u16(key_len) || !in.read_string(key_len, key)) {
      return ParseResult::failure("RESET keys run past the body");
    }
    out.push_back(key);
  }
  if (!in.at_end()) return trailing_bytes();
  return {};
}

void encode_reset_reply(Bytes& out, std::uint32_t request_id, std::span<const ResetStatus> statuses,
                        const Framing& framing) {
  std::uint8_t* p = append_frame(out, framing, Opcode::kReset, kFlagReply, request_id,
                                 kListHeaderSize + statuses.size());
  write_list_header(p, statuses.size());
  p += kListHeaderSize;
  for (const ResetStatus status : statuses) *p++ = static_cast<std::uint8_t>(status);
}

ParseResult parse_reset_reply(std::span<const std::uint8_t> body, std::vector<ResetStatus>& out) {
  out.clear();
  ByteReader in(body);
  std::uint16_t count = 0;
  if (ParseResult header = read_list_header(in, kU16Max, count); !header) return header;
  if (in.remaining() < count) return ParseResult::failure("RESET statuses run past the body");
  if (in.remaining() > count) return trailing_bytes();
  out.resize(count);
  for (ResetStatus& status : out) {
    std::uint8_t value = 0;
    in.read_u8(value);
    if (!is_known_reset_status(value)) return ParseResult::failure("unknown RESET status");
    status = static_cast<ResetStatus>(value);
  }
  return {};
}

// ---- STATS ---------------------------------------------------------------------------------

void encode_stats_request(Bytes& out, std::uint32_t request_id, const Framing& framing) {
  append_frame(out, framing, Opcode::kStats, 0, request_id, 0);
}

ParseResult parse_stats_request(std::span<const std::uint8_t> body) {
  if (!body.empty()) return ParseResult::failure("STATS request body not empty");
  return {};
}

void encode_stats_reply(Bytes& out, std::uint32_t request_id, std::span<const StatEntry> stats,
                        const Framing& framing) {
  const std::size_t start = begin_frame(out, Opcode::kStats, kFlagReply, request_id, framing);
  encode_stats_body(out, stats);
  finish_frame(out, start);
}

void encode_stats_reply_with_body(Bytes& out, std::uint32_t request_id,
                                  std::span<const std::uint8_t> body, const Framing& framing) {
  const std::size_t start = begin_frame(out, Opcode::kStats, kFlagReply, request_id, framing);
  out.insert(out.end(), body.begin(), body.end());
  finish_frame(out, start);
}

void encode_stats_body(Bytes& out, std::span<const StatEntry> stats) {
  assert(stats.size() <= kU16Max);
  encode_fixed16(append(out, 2), static_cast<std::uint16_t>(stats.size()));
  for (const StatEntry& entry : stats) {
    const std::string_view name = clip(entry.name, kU8Max);
    std::uint8_t* p = append(out, 1 + name.size() + 8);
    p[0] = static_cast<std::uint8_t>(name.size());
    append_bytes(p + 1, name);
    encode_fixed64(p + 1 + name.size(), entry.value);
  }
}

ParseResult parse_stats_reply(std::span<const std::uint8_t> body, std::vector<StatEntry>& out) {
  ByteReader in(body);
  std::uint16_t count = 0;
  if (!in.read_u16(count)) {
    out.clear();
    return ParseResult::failure("STATS reply too short");
  }
  // Each entry is at least a length byte and a value.
  if (in.remaining() < std::size_t{count} * 9) {
    out.clear();
    return ParseResult::failure("STATS entries run past the body");
  }
  // resize() keeps the surviving entries' strings, so their capacity is reused.
  out.resize(count);
  for (StatEntry& entry : out) {
    std::uint8_t name_len = 0;
    std::string_view name;
    if (!in.read_u8(name_len) || !in.read_string(name_len, name) || !in.read_u64(entry.value)) {
      out.clear();
      return ParseResult::failure("STATS entries run past the body");
    }
    entry.name.assign(name);
  }
  if (!in.at_end()) {
    out.clear();
    return trailing_bytes();
  }
  return {};
}

// ---- ERROR ---------------------------------------------------------------------------------

void encode_error(Bytes& out, std::uint32_t request_id, WireErrorCode code,
                  std::string_view message, const Framing& framing) {
  const std::string_view text = clip(message, kU16Max);
  std::uint8_t* p =
      append_frame(out, framing, Opcode::kError, kFlagReply, request_id, 4 + text.size());
  encode_fixed16(p, static_cast<std::uint16_t>(code));
  encode_fixed16(p + 2, static_cast<std::uint16_t>(text.size()));
  append_bytes(p + 4, text);
}

ParseResult parse_error(std::span<const std::uint8_t> body, ErrorReply& out) {
  ByteReader in(body);
  std::uint16_t code = 0;
  std::uint16_t message_len = 0;
  if (!in.read_u16(code) || !in.read_u16(message_len)) {
    return ParseResult::failure("ERROR body too short");
  }
  if (!in.read_string(message_len, out.message)) {
    return ParseResult::failure("ERROR message runs past the body");
  }
  if (!in.at_end()) return ParseResult::failure("bytes left after the ERROR message");
  // An unknown code is kept: the connection closes after any ERROR, so the client only has
  // to report it, and a newer server may add codes.
  out.code = static_cast<WireErrorCode>(code);
  return {};
}

}  // namespace sluice::protocol
