// Executes request frames for the peers of one shard: validates items, hashes keys, decides
// the keys this shard owns on its table, hands the others over to their shards, and answers
// HELLO, PING, RESET, STATS and INSPECT. It knows nothing of sockets: a Peer (server/peer.h) is
// where replies go. One per shard, on the shard's thread; its scratch is shared by the shard's
// peers, so a connection costs no per-request buffers of its own (docs/ARCHITECTURE.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/key_hash.h"
#include "protocol/cluster_messages.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "server/peer.h"
#include "server/server.h"

namespace sluice::server {

class Shard;
struct PendingFrame;

// A node says HELLO with this client name and its id, so that the other node knows who sends
// its REPLICATE batches.
inline constexpr std::string_view kNodeClientPrefix = "sluiced/";

// What dispatch_frames() did with a span of input.
struct DispatchResult {
  std::size_t consumed = 0;    // bytes of whole frames handled (or refused)
  bool handled_any = false;    // at least one frame was handled
  bool stopped_early = false;  // Peer::stop_dispatching() held with input left
};

class Dispatcher {
 public:
  explicit Dispatcher(Shard& shard);
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Decodes and dispatches the complete frames at the start of `input`, until none is left, a
  // frame is malformed (the peer is rejected) or peer.stop_dispatching(). Frame bodies are
  // views into `input`: they are dead when this returns.
  DispatchResult dispatch_frames(Peer& peer, const protocol::FrameDecoder& decoder,
                                 std::span<const std::uint8_t> input);
  // Executes one decoded request frame: its reply is appended to peer.reply_buffer(), or comes
  // later (finish_frame) when some of its items belong to other shards, or the peer is rejected.
  void dispatch(Peer& peer, const protocol::Frame& frame);
  // A frame whose hand-over tasks are all back: appends its reply (if the peer still wants
  // replies) and tells the peer.
  void finish_frame(Peer& peer, PendingFrame& frame);

  // The reply to a RELOAD or a DRAIN (`opcode`), once it has run (on the peer's shard).
  void finish_admin(Peer& peer, protocol::Opcode opcode, std::uint32_t request_id,
                    const protocol::Framing& framing, std::uint64_t epoch,
                    std::string_view message);

  // Whether the peer's cross-shard backlog is at its bound (kMaxFramesPending frames or
  // config.max_pending_items items): a transport stops dispatching its frames until it falls.
  static bool backlog_full(const Peer& peer, const ServerConfig& config);

 private:
  void handle_hello(Peer& peer, std::uint32_t request_id, std::span<const std::uint8_t> body);
  void handle_acquire(Peer& peer, std::uint32_t request_id, std::span<const std::uint8_t> body);
  void handle_reset(Peer& peer, std::uint32_t request_id, std::span<const std::uint8_t> body);
  void handle_stats(Peer& peer, std::uint32_t request_id, std::span<const std::uint8_t> body);
  void handle_cluster(Peer& peer, std::uint32_t request_id, std::span<const std::uint8_t> body);
  void handle_replicate(Peer& peer, std::uint32_t request_id, std::span<const std::uint8_t> body);
  // `epoch`: the puller's, from the frame header.
  void handle_pull(Peer& peer, std::uint32_t request_id, std::uint64_t epoch,
                   std::span<const std::uint8_t> body);
  void handle_reload(Peer& peer, std::uint32_t request_id, std::span<const std::uint8_t> body);
  void handle_drain(Peer& peer, std::uint32_t request_id, std::span<const std::uint8_t> body);
  void handle_inspect(Peer& peer, std::uint32_t request_id, std::span<const std::uint8_t> body);
  // Runs `hook` (ServerContext::reload_cluster or drain_node) off the shard and answers the
  // frame with what it reports; meanwhile the frame is pending as a handed-over one is.
  void finish_admin_now(Peer& peer, protocol::Opcode opcode, std::uint32_t request_id,
                        const protocol::Framing& framing, std::uint64_t epoch,
                        std::string_view message);
  void run_admin(Peer& peer, protocol::Opcode opcode, std::uint32_t request_id,
                 const std::function<void(std::function<void(std::uint64_t, std::string)>)>& hook);
  // Sends the frame's foreign items (staged in the shard) to their owners.
  void hand_over(Peer& peer, PendingFrame* frame);
  // A protocol error: counts it and rejects the peer.
  void fail(Peer& peer, std::uint32_t request_id, protocol::WireErrorCode code,
            std::string_view message);
  // ERROR UNAUTHENTICATED (server/auth.h): counts it and rejects the peer.
  void fail_authentication(Peer& peer, std::uint32_t request_id, std::string_view message);

  Shard& shard_;
  const bool requires_authentication_;
  protocol::Framing framing_;  // the reply framing of the frame being dispatched

  // Scratch reused by the handlers (no allocation per frame once grown).
  std::vector<protocol::AcquireItem> acquire_items_;
  std::vector<protocol::AcquireResult> acquire_results_;
  std::vector<KeyHash> acquire_hashes_;     // by item index, for the items this shard owns
  std::vector<std::uint32_t> local_items_;  // their indices
  std::vector<std::string_view> reset_keys_;
  std::vector<protocol::ResetStatus> reset_results_;
  std::vector<protocol::WireRecord> records_;
  std::vector<std::uint64_t> log_;
  protocol::InspectReply inspect_;
  std::vector<bool> wanted_;  // by partition, for a PULL
};

}  // namespace sluice::server
