// libFuzzer target: the server's connection handling, bytes in and replies out, over the
// in-memory transport of tests/server/memory_node.h (a node's shards run by this thread, and
// MemoryPeer, a connection without a socket, which runs Dispatcher::dispatch_frames as sluiced's
// SocketPeer does). A few leading bytes choose the node's configuration, how many peers share it
// and on which shards, how the stream is dealt to them and cut into feed() calls, when the
// shards' event loops run, and whether peers pause or close; the rest is the byte stream. Beyond
// AddressSanitizer and UBSan, it traps when a contract breaks:
//  - a peer's output is whole reply frames, each body parsing as its opcode says; an ERROR is the
//    last frame, and comes exactly when the protocol (docs/PROTOCOL.md) refuses a frame of the
//    stream, with that frame's error code and request id;
//  - each request gets at most one reply; every request that hands nothing over to another shard
//    gets one, and with no ERROR, every request of a peer still open gets one (after every loop
//    has run to idle);
//  - a reply answers its request: PING echoes the payload, HELLO names this peer's shard and the
//    node's limits, ACQUIRE and RESET answer every item in order with a status that fits it (and
//    items of one key in one frame follow each other), STATS lists every counter of every shard;
//  - afterwards: every open peer's cross-shard backlog is back to 0 and each of its handed-over
//    frames ended once, a closed peer was freed with its last task, no task is in flight, no
//    complete frame is left unhandled, the shards counted each refusal, invalid item and
//    handed-over item once, and every shard's table passes CounterTable::TEST_check_invariants.
// Each input gets a node of its own, so that a crash replays from its input alone (a node reused
// across inputs would carry their keys, counters and pooled tasks). Its shards' tables start at a
// few chunks, and under perf its set-up (a few dozen system calls) weighs far less than
// libFuzzer's own bookkeeping.
#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/key_hash.h"
#include "core/rule.h"
#include "core/verdict.h"
#include "protocol/cluster_messages.h"
#include "protocol/coding.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "server/server.h"
#include "server/shard.h"
#include "server/shard_counters.h"
#include "tests/server/memory_node.h"

namespace {

using namespace sluice;
using protocol::AcquireItem;
using protocol::AcquireResult;
using protocol::Bytes;
using protocol::Frame;
using protocol::ItemStatus;
using protocol::Opcode;
using protocol::ResetStatus;
using protocol::WireErrorCode;
using server::ShardStat;

// Names the broken check's line before trapping: the optimizer merges the traps themselves.
void require(bool condition, unsigned line = __builtin_LINE()) {
  if (condition) return;
  std::fprintf(stderr, "connection_fuzz.cpp:%u: contract broken\n", line);
  __builtin_trap();
}
void require(const protocol::ParseResult& parsed, unsigned line = __builtin_LINE()) {
  require(static_cast<bool>(parsed), line);
}

constexpr std::uint64_t kStartNs = 1'700'000'040'000'000'000ull;
constexpr std::string_view kToken = "fuzz-token";
constexpr std::size_t kStatCount = static_cast<std::size_t>(ShardStat::kCount);

// ---- the leading bytes -------------------------------------------------------------------

// Byte 0: bits 0-1 shards (n % 3 + 1), bit 2 the token kToken required, bits 3-4 max_frame,
//         bits 5-6 max_batch, bit 7 max_key.
// Byte 1: bits 0-1 max_pending_items, bit 2 a table cap of 12 KiB a shard (else 1 MiB), bit 3
//         stats_refresh 0, bit 4 sliding_log_cap 4, bits 5-6 peers (n + 1), bit 7 peers on shard
//         ports (else the public port).
// Byte 2: bits 0-1 piece sizes, bits 2-3 when the loops run, bits 4-5 the clock's step at each
//         run, bits 6-7 how the stream's frames are dealt to the peers.
// Byte 3: the seed of every random choice of byte 2.
// Byte 4: bit 0 peers pause and resume at random (as on output back-pressure), bit 1 held input
//         is dispatched again after each run (else only at the end), bit 2 peers close at
//         random (the client goes away, its hand-overs still out).
constexpr std::size_t kSetupBytes = 5;
constexpr std::uint32_t kMaxFrames[] = {protocol::kDefaultMaxFrame, 32, 128, 1024};
constexpr std::uint16_t kMaxBatches[] = {protocol::kDefaultMaxBatch, 1, 2, 8};
constexpr std::uint16_t kMaxKeys[] = {protocol::kDefaultMaxKey, 3};
constexpr std::uint32_t kMaxPendingItems[] = {65'536, 1, 3, 16};
constexpr std::uint64_t kClockSteps[] = {0, 1'000'000, 150'000'000, 61'000'000'000};

enum class Pieces { kWhole, kBytes, kUpTo16, kUpTo256 };
enum class Runs { kAtEnd, kEveryPiece, kHalf, kEighth };
enum class Dealing { kRoundRobin, kRandom, kByRequestId, kSticky };

struct Setup {
  server::ServerConfig config;
  unsigned peers = 1;
  bool shard_ports = false;
  Pieces pieces = Pieces::kWhole;
  Runs runs = Runs::kAtEnd;
  std::uint64_t clock_step_ns = 0;
  Dealing dealing = Dealing::kRoundRobin;
  std::uint8_t seed = 0;
  bool pauses = false;
  bool resume_after_runs = false;
  bool closes = false;
};

Setup read_setup(const std::uint8_t* b) {
  Setup s;
  server::ServerConfig& c = s.config;
  c.shards = (b[0] & 3u) % 3 + 1;
  if ((b[0] & 4u) != 0) c.auth_token = kToken;
  c.max_frame = kMaxFrames[(b[0] >> 3) & 3u];
  c.max_batch = kMaxBatches[(b[0] >> 5) & 3u];
  c.max_key = kMaxKeys[b[0] >> 7];
  c.max_pending_items = kMaxPendingItems[b[1] & 3u];
  // 12 KiB is CounterTable::kMinMaxBytes: one chunk of 38 homes, so an input can fill it and
  // evict; 1 MiB holds every key an input can name (no growth either: that takes ~970 keys).
  c.max_memory = ((b[1] & 4u) != 0 ? std::size_t{12} << 10 : std::size_t{1} << 20) * c.shards;
  c.stats_refresh = std::chrono::milliseconds((b[1] & 8u) != 0 ? 0 : 100);
  if ((b[1] & 16u) != 0) c.sliding_log_cap = 4;
  s.peers = ((b[1] >> 5) & 3u) + 1;
  s.shard_ports = (b[1] & 128u) != 0;
  s.pieces = static_cast<Pieces>(b[2] & 3u);
  s.runs = static_cast<Runs>((b[2] >> 2) & 3u);
  s.clock_step_ns = kClockSteps[(b[2] >> 4) & 3u];
  s.dealing = static_cast<Dealing>(b[2] >> 6);
  s.seed = b[3];
  s.pauses = (b[4] & 1u) != 0;
  s.resume_after_runs = (b[4] & 2u) != 0;
  s.closes = (b[4] & 4u) != 0;
  return s;
}

// xorshift32: the same choices for the same seed byte.
class Rng {
 public:
  explicit Rng(std::uint8_t seed) : state_(0x9E3779B9u ^ seed) {}
  std::uint32_t below(std::uint32_t n) {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    return state_ % n;
  }

 private:
  std::uint32_t state_;
};

// The stream's next unit for dealing: a frame as long as its header's length field says (or
// what is left), whatever else the header holds, so that garbage is dealt too.
std::size_t unit_size(std::span<const std::uint8_t> rest) {
  if (rest.size() < protocol::kHeaderSize) return rest.size();
  const std::uint64_t body = protocol::decode_fixed32(rest.data() + 12);
  return static_cast<std::size_t>(
      std::min<std::uint64_t>(rest.size(), protocol::kHeaderSize + body));
}

std::vector<Bytes> deal(std::span<const std::uint8_t> stream, const Setup& setup, Rng& rng) {
  std::vector<Bytes> streams(setup.peers);
  unsigned peer = 0;
  for (std::size_t at = 0, unit = 0; at < stream.size(); ++unit) {
    const std::span<const std::uint8_t> rest = stream.subspan(at);
    const std::size_t size = unit_size(rest);
    switch (setup.dealing) {
      case Dealing::kRoundRobin:
        peer = static_cast<unsigned>(unit % setup.peers);
        break;
      case Dealing::kRandom:
        peer = rng.below(setup.peers);
        break;
      case Dealing::kByRequestId:
        peer = rest.size() >= 12 ? protocol::decode_fixed32(rest.data() + 8) % setup.peers : 0;
        break;
      case Dealing::kSticky:
        if (rng.below(4) == 0) peer = rng.below(setup.peers);
        break;
    }
    streams[peer].insert(streams[peer].end(), rest.begin(), rest.begin() + size);
    at += size;
  }
  return streams;
}

std::vector<std::size_t> cut(std::size_t size, Pieces pieces, Rng& rng) {
  std::vector<std::size_t> sizes;
  for (std::size_t left = size; left > 0;) {
    std::size_t piece = left;
    if (pieces == Pieces::kBytes) piece = 1;
    if (pieces == Pieces::kUpTo16) piece = 1 + rng.below(16);
    if (pieces == Pieces::kUpTo256) piece = 1 + rng.below(256);
    piece = std::min(piece, left);
    sizes.push_back(piece);
    left -= piece;
  }
  return sizes;
}

// ---- what the protocol says the server must do with one peer's stream --------------------

struct Scratch {
  protocol::HelloRequest hello;
  protocol::HelloReply hello_reply;
  std::vector<AcquireItem> items;
  std::vector<AcquireResult> results;
  std::vector<std::string_view> keys;
  std::vector<ResetStatus> statuses;
  std::vector<protocol::StatEntry> stats;
  protocol::ErrorReply error;
  protocol::ClusterMapMessage cluster;
  std::vector<protocol::WireRecord> records;
  protocol::PullRequest pull;
  protocol::ReplicateReply replicate;
  protocol::ReloadReply reload;
  std::string_view drain_node;
  std::string_view inspect_key;
  protocol::InspectReply inspect;
  std::vector<Frame> replies;
};

struct Request {
  Opcode opcode = Opcode::kPing;
  std::uint32_t id = 0;
  std::span<const std::uint8_t> body;  // into the peer's stream
  std::size_t end = 0;                 // the stream offset after the frame
  // Items handed over to other shards: the reply comes back later, and is dropped when an ERROR
  // is sent, or the peer closes, before it.
  std::uint64_t handed_over = 0;
  std::uint64_t invalid_items = 0;  // counted by the peer's shard, as are the handed-over ones
};

struct Expected {
  std::vector<Request> requests;  // the frames the server handles, in stream order
  std::size_t consumed = 0;       // their bytes
  bool refused = false;           // the frame after them is refused with an ERROR
  WireErrorCode code = WireErrorCode::kMalformedFrame;
  std::uint32_t error_id = 0;
  // A header refused by a field before its request id (bytes 8..11) may be refused before the id
  // has arrived, and then the ERROR says 0 (protocol::DecodeResult::request_id).
  bool error_id_may_be_0 = false;
  bool auth_failure = false;  // counted in auth_failures, not protocol_errors
};

bool valid_key(std::string_view key, const server::ServerConfig& config) {
  return !key.empty() && key.size() <= config.max_key;
}

// The ERROR a frame gets (docs/PROTOCOL.md, sections 4 to 6), in the order the checks apply;
// nothing when it is handled. A HELLO that is not refused authenticates its peer.
std::optional<WireErrorCode> refusal(const Frame& frame, const server::ServerConfig& config,
                                     bool& authenticated, Scratch& s) {
  const bool token_required = !config.auth_token.empty();
  const Opcode opcode = frame.header.opcode;
  if (token_required && !authenticated && opcode != Opcode::kHello) {
    return WireErrorCode::kUnauthenticated;
  }
  if (frame.header.is_reply()) return WireErrorCode::kMalformedFrame;
  protocol::ParseResult parsed;
  switch (opcode) {
    case Opcode::kHello:
      parsed = protocol::parse_hello_request(frame.body, s.hello);
      if (!parsed) return parsed.error;
      if (s.hello.version == 0) return WireErrorCode::kUnsupportedVersion;
      if (token_required &&
          (s.hello.version < protocol::kFirstTokenVersion || s.hello.token != config.auth_token)) {
        return WireErrorCode::kUnauthenticated;
      }
      authenticated = true;
      return std::nullopt;
    case Opcode::kPing:
      return std::nullopt;
    case Opcode::kAcquire:
      parsed = protocol::parse_acquire_request(frame.body, config.max_batch, s.items);
      break;
    case Opcode::kReset:
      parsed = protocol::parse_reset_request(frame.body, config.max_batch, s.keys);
      break;
    case Opcode::kStats:
      parsed = protocol::parse_stats_request(frame.body);
      break;
    case Opcode::kCluster:
      parsed = protocol::parse_cluster_request(frame.body);
      break;
    case Opcode::kReplicate:  // answered, every record refused: the node is in no cluster
      parsed = protocol::parse_replicate_request(frame.body, s.records);
      break;
    case Opcode::kPull:  // refused on a node outside any cluster, once it parses
      parsed = protocol::parse_pull_request(frame.body, s.pull);
      if (!parsed) return parsed.error;
      return WireErrorCode::kMalformedFrame;
    case Opcode::kReload:  // answered: this node is not in static cluster mode
      parsed = protocol::parse_reload_request(frame.body);
      break;
    case Opcode::kDrain:  // answered: another node's id, or this node is not in etcd mode
      parsed = protocol::parse_drain_request(frame.body, s.drain_node);
      break;
    case Opcode::kInspect:  // answered, INVALID_KEY for a key out of bounds
      parsed = protocol::parse_inspect_request(frame.body, s.inspect_key);
      break;
    case Opcode::kError:  // the decoder refuses one without the reply flag
      return WireErrorCode::kMalformedFrame;
  }
  if (!parsed) return parsed.error;
  return std::nullopt;
}

Expected expect(std::span<const std::uint8_t> stream, const server::ServerConfig& config,
                unsigned shard, Scratch& s) {
  Expected e;
  const protocol::FrameDecoder decoder(config.max_frame);
  bool authenticated = false;
  for (;;) {
    const protocol::DecodeResult decoded = decoder.decode(stream.subspan(e.consumed));
    if (decoded.status == protocol::DecodeStatus::kNeedMore) break;
    if (decoded.status == protocol::DecodeStatus::kMalformed) {
      e.refused = true;
      e.code = decoded.error;
      e.error_id = decoded.request_id;
      e.error_id_may_be_0 = decoded.error != WireErrorCode::kFrameTooLarge;
      break;
    }
    const Frame& frame = decoded.frame;
    if (const std::optional<WireErrorCode> code = refusal(frame, config, authenticated, s)) {
      e.refused = true;
      e.code = *code;
      e.error_id = frame.header.request_id;
      e.auth_failure = *code == WireErrorCode::kUnauthenticated;
      break;
    }
    e.consumed += decoded.frame_size;
    Request request{frame.header.opcode, frame.header.request_id, frame.body, e.consumed};
    const auto count = [&](std::string_view key, bool valid) {
      if (!valid) {
        ++request.invalid_items;
      } else if (shard_for(hash_key(key), config.shards) != shard) {
        ++request.handed_over;
      }
    };
    if (request.opcode == Opcode::kAcquire) {
      for (const AcquireItem& item : s.items) {
        const bool leasing = item.lease || item.give_back;
        count(item.key, validate(item.rule, item.cost, config.sliding_log_cap) == RuleError::kOk &&
                            !(leasing && item.cost > protocol::kMaxLeaseUnits) &&
                            valid_key(item.key, config));
      }
    } else if (request.opcode == Opcode::kReset) {
      for (const std::string_view key : s.keys) count(key, valid_key(key, config));
    } else if (request.opcode == Opcode::kInspect) {
      count(s.inspect_key, valid_key(s.inspect_key, config));
    }
    e.requests.push_back(request);
  }
  return e;
}

// ---- whether a reply answers a request ---------------------------------------------------

struct PeerView {
  const server::ServerConfig& config;
  const server::ServerContext& context;
  std::uint16_t this_shard;
  bool chains = false;  // follows_in_frame() holds: no key of one frame evicts another's record
};

bool zeros(const AcquireResult& r) {
  return r.limit == 0 && r.remaining == 0 && r.reset_after_ms == 0 && r.retry_after_ms == 0;
}

// An ACQUIRE result that fits its item (docs/PROTOCOL.md 4.5 and 11, core/algorithms.h).
bool fits(const AcquireItem& item, const AcquireResult& r, const server::ServerConfig& config) {
  const bool leasing = item.lease || item.give_back;
  if (validate(item.rule, item.cost, config.sliding_log_cap) != RuleError::kOk ||
      (leasing && item.cost > protocol::kMaxLeaseUnits)) {
    return r.status == ItemStatus::kInvalidRule && zeros(r) && r.granted == 0;
  }
  if (!valid_key(item.key, config)) {
    return r.status == ItemStatus::kInvalidKey && zeros(r) && r.granted == 0;
  }
  const std::uint64_t cost = item.cost;
  if (r.status == ItemStatus::kNoMemory) return zeros(r) && r.granted == 0;
  if (item.give_back) {
    // Credited (granted, at most what was given back) or dropped (0); the other fields 0.
    return r.status == ItemStatus::kAllowed && r.granted <= cost &&
           r.limit == item.rule.capacity() && r.remaining == 0 && r.reset_after_ms == 0 &&
           r.retry_after_ms == 0;
  }
  if (item.lease) {
    // At least one unit and at most `cost`, with the lease's stamp in retry_after_ms; or
    // nothing left, as a denied one-unit acquire.
    if (r.status == ItemStatus::kAllowed) {
      return r.granted >= 1 && r.granted <= cost && r.limit == item.rule.capacity() &&
             std::uint64_t{r.remaining} + r.granted <= r.limit;
    }
    return r.status == ItemStatus::kDenied && r.granted == 0 && r.limit == item.rule.capacity() &&
           r.remaining == 0 && r.retry_after_ms != 0;
  }
  if (r.granted != 0) return false;
  switch (r.status) {
    case ItemStatus::kAllowed:
      return r.limit == item.rule.capacity() && r.remaining + cost <= r.limit &&
             r.retry_after_ms == 0;
    case ItemStatus::kDenied:
      return r.limit == item.rule.capacity() && r.remaining < cost && r.retry_after_ms != 0 &&
             (cost <= r.limit || r.retry_after_ms == kNever);
    default:
      return false;
  }
}

// What item i's key had left after it (a peek leaves what it found).
std::uint64_t left_after(const AcquireItem& item, const AcquireResult& r) {
  return r.remaining + (item.peek && r.status == ItemStatus::kAllowed ? item.cost : 0);
}

// The items of one frame that a shard owns are decided one after another, in item order, at
// one `now` (docs/ARCHITECTURE.md): an item for the key and rule of an earlier item starts from
// what that one left, and is allowed exactly when its cost fits (core/algorithms.h). This is what
// "in order" means for two items of one key. It holds while no record of the frame's keys is
// evicted: so not at a table's cap, nor for sliding logs, whose rings are reclaimed from each
// other.
bool follows_in_frame(const std::vector<AcquireItem>& items,
                      const std::vector<AcquireResult>& results) {
  // A give-back credits what its lease stamp allows, which this does not model: the items after
  // one are not checked against it.
  const auto decided = [&](std::size_t i) {
    return items[i].rule.algorithm != Algorithm::kSlidingLog && !items[i].give_back &&
           (results[i].status == ItemStatus::kAllowed || results[i].status == ItemStatus::kDenied);
  };
  const auto reached_table = [&](std::size_t i) {
    return results[i].status != ItemStatus::kInvalidRule &&
           results[i].status != ItemStatus::kInvalidKey;
  };
  for (std::size_t i = 1; i < items.size(); ++i) {
    if (!decided(i)) continue;
    // The item before it that touched the key's record, under whatever rule.
    std::size_t j = i;
    while (j-- > 0) {
      if (reached_table(j) && items[j].key == items[i].key) break;
    }
    if (j == SIZE_MAX || !decided(j) || items[j].rule != items[i].rule) continue;
    const std::uint64_t left = left_after(items[j], results[j]);
    const std::uint64_t cost = items[i].cost;
    const AcquireResult& r = results[i];
    const bool allowed = r.status == ItemStatus::kAllowed;
    if (items[i].lease) {
      // As many as are left, up to its cost; nothing left is denied.
      const std::uint64_t granted = std::min<std::uint64_t>(cost, left);
      if (allowed != (left >= 1) || r.granted != (allowed ? granted : 0) ||
          r.remaining != left - (allowed ? granted : 0)) {
        return false;
      }
      continue;
    }
    if (allowed != (cost <= left) || r.remaining != (allowed ? left - cost : left)) return false;
  }
  return true;
}

bool answers(const Frame& reply, const Request& request, const PeerView& peer, Scratch& s) {
  if (reply.header.opcode != request.opcode || reply.header.request_id != request.id) {
    return false;
  }
  const server::ServerConfig& config = peer.config;
  switch (request.opcode) {
    case Opcode::kHello: {
      require(protocol::parse_hello_request(request.body, s.hello));
      require(protocol::parse_hello_reply(reply.body, s.hello_reply));
      const protocol::HelloReply& r = s.hello_reply;
      return r.version == std::min(s.hello.version, protocol::kVersion) &&
             r.this_shard == peer.this_shard && r.max_frame == config.max_frame &&
             r.max_key == config.max_key && r.max_batch == config.max_batch &&
             r.shard_ports == peer.context.shard_ports && r.node_id == peer.context.node_id;
    }
    case Opcode::kPing:
      return std::equal(reply.body.begin(), reply.body.end(), request.body.begin(),
                        request.body.end());
    case Opcode::kAcquire: {
      require(protocol::parse_acquire_request(request.body, config.max_batch, s.items));
      require(protocol::parse_acquire_reply(reply.body, s.results));
      if (s.results.size() != s.items.size()) return false;
      for (std::size_t i = 0; i < s.items.size(); ++i) {
        if (!fits(s.items[i], s.results[i], config)) return false;
      }
      return !peer.chains || follows_in_frame(s.items, s.results);
    }
    case Opcode::kReset: {
      require(protocol::parse_reset_request(request.body, config.max_batch, s.keys));
      require(protocol::parse_reset_reply(reply.body, s.statuses));
      if (s.statuses.size() != s.keys.size()) return false;
      for (std::size_t i = 0; i < s.keys.size(); ++i) {
        const bool invalid = s.statuses[i] == ResetStatus::kInvalidKey;
        if (invalid == valid_key(s.keys[i], config)) return false;
      }
      return true;
    }
    case Opcode::kStats:
      require(protocol::parse_stats_reply(reply.body, s.stats));
      return s.stats.size() == (peer.context.shard_count + 1) * kStatCount;
    case Opcode::kCluster:  // a node outside any cluster: epoch 0, no nodes
      require(protocol::parse_cluster_reply(reply.body, s.cluster));
      return s.cluster.epoch == 0 && s.cluster.nodes.empty();
    case Opcode::kReplicate:
      require(protocol::parse_replicate_request(request.body, s.records));
      require(protocol::parse_replicate_reply(reply.body, s.replicate));
      return s.replicate.applied == 0 && s.replicate.refused == s.records.size();
    case Opcode::kReload:
      require(protocol::parse_reload_reply(reply.body, s.reload));
      return s.reload.epoch == 0 && !s.reload.message.empty();
    case Opcode::kDrain:
      require(protocol::parse_drain_reply(reply.body, s.reload));
      return s.reload.epoch == 0 && !s.reload.message.empty();
    case Opcode::kInspect: {
      // A node outside any cluster: standalone; the key's own shard answers what it stores.
      require(protocol::parse_inspect_request(request.body, s.inspect_key));
      require(protocol::parse_inspect_reply(reply.body, s.inspect));
      if (!valid_key(s.inspect_key, config)) {
        return s.inspect.status == protocol::InspectStatus::kInvalidKey;
      }
      const KeyHash hash = hash_key(s.inspect_key);
      return s.inspect.status != protocol::InspectStatus::kInvalidKey &&
             s.inspect.role == protocol::InspectRole::kStandalone &&
             s.inspect.partition_state == 0 &&
             s.inspect.shard == shard_for(hash, peer.context.shard_count) &&
             (s.inspect.status == protocol::InspectStatus::kAbsent ||
              (s.inspect.record.fp_lo == hash.lo && s.inspect.record.fp_hi == hash.hi));
    }
    case Opcode::kPull:
    case Opcode::kError:
      return false;
  }
  return false;
}

// Kuhn's augmenting path from left vertex `l`: whether it could be matched.
bool augment(std::size_t l, const std::vector<std::vector<std::size_t>>& edges,
             std::vector<std::size_t>& match_of_right, std::vector<bool>& seen) {
  constexpr std::size_t kFree = SIZE_MAX;
  for (const std::size_t r : edges[l]) {
    if (seen[r]) continue;
    seen[r] = true;
    if (match_of_right[r] == kFree || augment(match_of_right[r], edges, match_of_right, seen)) {
      match_of_right[r] = l;
      return true;
    }
  }
  return false;
}

// Whether a matching covers every left vertex in `lefts`.
bool covers(const std::vector<std::vector<std::size_t>>& edges,
            const std::vector<std::size_t>& lefts, std::size_t right_count) {
  std::vector<std::size_t> match_of_right(right_count, SIZE_MAX);
  std::vector<bool> seen;
  for (const std::size_t l : lefts) {
    seen.assign(right_count, false);
    if (!augment(l, edges, match_of_right, seen)) return false;
  }
  return true;
}

// What a peer did: read at the end, or when it closed (its later replies are dropped).
struct Outcome {
  Bytes output;
  std::size_t input_left = 0;
  bool failed = false;
  bool closed = false;
};

// What the shards must have counted for one peer.
struct Counts {
  std::uint64_t protocol_errors = 0;
  std::uint64_t auth_failures = 0;
  std::uint64_t invalid_items = 0;
  std::uint64_t handed_over = 0;
  int frames_handed_over = 0;  // each ends once (Peer::frame_finished), ERROR or not
};

// Checks one peer's outcome against what the `fed` bytes of its stream asked for, and returns
// what its shard must have counted for it.
Counts check_peer(const Outcome& o, std::span<const std::uint8_t> fed, const PeerView& view,
                  unsigned shard, Scratch& s) {
  const Expected e = expect(fed, view.config, shard, s);
  // The frames dispatched: up to the refused one, or as far as the peer consumed its input.
  std::size_t handled = e.requests.size();
  if (o.failed) {
    require(e.refused);
  } else {
    require(!e.refused || o.closed);
    const std::size_t consumed = fed.size() - o.input_left;
    handled = 0;
    while (handled < e.requests.size() && e.requests[handled].end <= consumed) ++handled;
    require(consumed == (handled == 0 ? 0 : e.requests[handled - 1].end));
    // Open at the end: every complete frame was handled.
    if (!o.closed) require(handled == e.requests.size());
  }

  require(test::split_replies(o.output, s.replies));
  const std::vector<Frame>& replies = s.replies;
  std::size_t answer_count = replies.size();
  if (o.failed) {
    require(!replies.empty() && replies.back().header.opcode == Opcode::kError);
    require(protocol::parse_error(replies.back().body, s.error));
    const std::uint32_t error_id = replies.back().header.request_id;
    require(s.error.code == e.code &&
            (error_id == e.error_id || (error_id == 0 && e.error_id_may_be_0)));
    --answer_count;
  }
  // Requests ids may repeat: a reply may answer any request with its id (and opcode) that it
  // fits. Each reply must answer a request of its own (so no request is answered twice), and
  // each request that must be answered must get a reply of its own; when matchings for both
  // exist, one matching does both (Mendelsohn-Dulmage), so two runs of Kuhn's algorithm tell.
  std::vector<std::vector<std::size_t>> by_reply(answer_count);
  std::vector<std::vector<std::size_t>> by_request(handled);
  for (std::size_t r = 0; r < answer_count; ++r) {
    require(replies[r].header.opcode != Opcode::kError);  // only ever the last frame
    for (std::size_t q = 0; q < handled; ++q) {
      if (answers(replies[r], e.requests[q], view, s)) {
        by_reply[r].push_back(q);
        by_request[q].push_back(r);
      }
    }
  }
  std::vector<std::size_t> all_replies(answer_count);
  for (std::size_t r = 0; r < answer_count; ++r) all_replies[r] = r;
  require(covers(by_reply, all_replies, handled));
  // Owed: every reply while the peer stays open without an ERROR, else those answered at once.
  std::vector<std::size_t> owed;
  Counts counts;
  for (std::size_t q = 0; q < handled; ++q) {
    const Request& request = e.requests[q];
    if ((!o.failed && !o.closed) || request.handed_over == 0) owed.push_back(q);
    counts.invalid_items += request.invalid_items;
    counts.handed_over += request.handed_over;
    if (request.handed_over != 0) ++counts.frames_handed_over;
  }
  require(covers(by_request, owed, answer_count));
  if (o.failed) ++(e.auth_failure ? counts.auth_failures : counts.protocol_errors);
  return counts;
}

struct Peer {
  std::shared_ptr<test::MemoryPeer> peer;  // null once closed
  std::weak_ptr<test::MemoryPeer> closed;  // once closed: alive only while its tasks are out
  Outcome outcome;                         // once closed
  unsigned shard = 0;
  std::uint16_t this_shard = protocol::kPublicPort;
  Bytes stream;
  std::vector<std::size_t> pieces;
  std::size_t next_piece = 0;
  std::size_t fed = 0;
  bool paused = false;
};

Outcome outcome_of(const test::MemoryPeer& peer, bool closed) {
  return Outcome{peer.output(), peer.input_left(), peer.failed(), closed};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Scratch scratch;
  if (size < kSetupBytes) return 0;
  const Setup setup = read_setup(data);
  const std::span<const std::uint8_t> stream(data + kSetupBytes, size - kSetupBytes);
  Rng rng(setup.seed);

  ManualClock clock(kStartNs);
  test::MemoryNode node(setup.config, clock);
  const server::ServerConfig& config = node.context().config;
  std::vector<Bytes> streams = deal(stream, setup, rng);
  std::vector<Peer> peers(setup.peers);
  for (unsigned i = 0; i < setup.peers; ++i) {
    Peer& p = peers[i];
    p.shard = i % node.shard_count();
    if (setup.shard_ports) p.this_shard = static_cast<std::uint16_t>(p.shard);
    p.peer = test::MemoryPeer::create(node.shard(p.shard), p.this_shard);
    p.stream = std::move(streams[i]);
    p.pieces = cut(p.stream.size(), setup.pieces, rng);
  }

  // Feed the pieces, the peers' interleaved at random, running the loops between them.
  std::vector<unsigned> waiting;
  for (;;) {
    waiting.clear();
    for (unsigned i = 0; i < setup.peers; ++i) {
      if (peers[i].peer != nullptr && peers[i].next_piece < peers[i].pieces.size()) {
        waiting.push_back(i);
      }
    }
    if (waiting.empty()) break;
    Peer& p = peers[waiting[rng.below(static_cast<std::uint32_t>(waiting.size()))]];
    if (setup.closes && rng.below(16) == 0) {
      // The client goes away: its tasks still out hold the last references.
      p.peer->close();
      p.outcome = outcome_of(*p.peer, /*closed=*/true);
      p.closed = p.peer;
      p.peer.reset();
      continue;
    }
    if (setup.pauses && rng.below(8) == 0) {
      p.paused = !p.paused;
      p.peer->set_paused(p.paused);
    }
    const std::size_t piece = p.pieces[p.next_piece++];
    p.peer->feed(std::span<const std::uint8_t>(p.stream).subspan(p.fed, piece));
    p.fed += piece;
    const bool run = setup.runs == Runs::kEveryPiece ||
                     (setup.runs == Runs::kHalf && rng.below(2) == 0) ||
                     (setup.runs == Runs::kEighth && rng.below(8) == 0);
    if (!run) continue;
    clock.advance_ns(setup.clock_step_ns);
    require(node.run_until_idle());
    if (setup.resume_after_runs) {
      for (Peer& q : peers) {
        if (q.peer != nullptr) q.peer->dispatch();
      }
    }
  }

  // Then as a transport does once its output drains and its frames come back: dispatch the
  // input held back, until every loop is idle and nothing more is handled.
  for (Peer& p : peers) {
    if (p.peer != nullptr) p.peer->set_paused(false);
  }
  for (bool progress = true; progress;) {
    require(node.run_until_idle());
    progress = false;
    for (Peer& p : peers) {
      if (p.peer == nullptr) continue;
      const std::size_t left = p.peer->input_left();
      const bool failed = p.peer->failed();
      p.peer->dispatch();
      progress = progress || p.peer->input_left() != left || p.peer->failed() != failed;
    }
  }

  // The contracts.
  const server::ServerContext& context = node.context();
  require(context.tasks_in_flight.load() == 0);
  // A 1 MiB table holds every key an input can name: nothing but sliding logs is evicted.
  const bool chains = config.max_memory / node.shard_count() >= std::size_t{1} << 20;
  std::vector<Counts> counted(node.shard_count());
  for (Peer& p : peers) {
    if (p.peer != nullptr) {
      require(p.peer->frames_pending() == 0 && p.peer->items_pending() == 0);
      p.outcome = outcome_of(*p.peer, /*closed=*/false);
    } else {
      require(p.closed.expired());  // freed with its last task
    }
    const std::span<const std::uint8_t> fed(p.stream.data(), p.fed);
    const Counts counts = check_peer(
        p.outcome, fed, PeerView{config, context, p.this_shard, chains}, p.shard, scratch);
    if (p.peer != nullptr) require(p.peer->frames_finished() == counts.frames_handed_over);
    Counts& c = counted[p.shard];
    c.protocol_errors += counts.protocol_errors;
    c.auth_failures += counts.auth_failures;
    c.invalid_items += counts.invalid_items;
    c.handed_over += counts.handed_over;
  }
  for (unsigned i = 0; i < node.shard_count(); ++i) {
    const server::ShardEngine& engine = node.shard(i).engine();
    const server::ShardCounters& counters = engine.counters();
    require(counters[ShardStat::kProtocolErrors].get() == counted[i].protocol_errors);
    require(counters[ShardStat::kAuthFailures].get() == counted[i].auth_failures);
    require(counters[ShardStat::kInvalidItems].get() == counted[i].invalid_items);
    require(counters[ShardStat::kHandedOver].get() == counted[i].handed_over);
    require(engine.TEST_check_table_invariants());
  }
  return 0;
}
