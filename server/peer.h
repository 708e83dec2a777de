// The dispatcher's view of one client connection (docs/ARCHITECTURE.md, "Transport and
// dispatch"): where its replies go, whether it wants more of them, and how it hears of errors
// and of replies that complete later. server/socket_peer.h implements it over a socket;
// tests/server/memory_node.h implements it in memory for the tests and the fuzz target.
// A peer lives on one shard's thread; hand-over tasks hold a shared_ptr to it until they are
// back, so it outlives its frames even after its socket closed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "protocol/frame.h"
#include "protocol/messages.h"

namespace sluice::server {

class Peer : public std::enable_shared_from_this<Peer> {
 public:
  // `this_shard` is the shard index for a shard port, protocol::kPublicPort for the public one.
  explicit Peer(std::uint16_t this_shard) : this_shard_(this_shard) {}
  virtual ~Peer() = default;
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  // Replies are appended here, after what is already queued.
  virtual protocol::Bytes& reply_buffer() = 0;
  // False once the peer closed or failed: a reply that completes later is dropped.
  virtual bool wants_replies() const = 0;
  // Queues an ERROR after what is queued, handles no further input, then closes.
  virtual void reject(std::uint32_t request_id, protocol::WireErrorCode code,
                      std::string_view message) = 0;
  // A frame handed over to other shards has finished (its reply appended, unless dropped):
  // send it, and let a reader paused on pending work go on.
  virtual void frame_finished() = 0;
  // The frame loop (Dispatcher::dispatch_frames) stops before the next frame while this holds:
  // the peer is closing, or back-pressure asks it to wait.
  virtual bool stop_dispatching() const = 0;

  std::uint16_t this_shard() const { return this_shard_; }
  // The id of the node at the other end when it said HELLO as a node ("sluiced/<id>"); empty
  // for clients. REPLICATE is accepted only from a node that is the records' primary.
  const std::string& peer_node() const { return peer_node_; }
  // Frames and items waiting for other shards (the cross-shard backlog of this peer).
  std::uint32_t frames_pending() const { return frames_pending_; }
  std::uint64_t items_pending() const { return items_pending_; }

 private:
  friend class Dispatcher;
  const std::uint16_t this_shard_;
  std::uint32_t frames_pending_ = 0;
  std::uint64_t items_pending_ = 0;
  bool authenticated_ = false;  // a HELLO brought the right token (when the node has one)
  std::string peer_node_;
};

}  // namespace sluice::server
