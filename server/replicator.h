// A shard's replication stream (docs/ARCHITECTURE.md, "Replication"): every record this shard
// changes as a primary is queued for its partition's replica and sent in batches, every
// ServerConfig::replication_interval or at replication_batch records, as REPLICATE frames with
// the record's full state as it is when the batch is built. One PeerLink per replica node and
// per shard of it that owns records (usually the one with this shard's index).
//
// Back-pressure: a link holds at most ServerConfig::replication_window_bytes of frames sent and
// not yet acknowledged (and kMaxBatchesInFlight batches); at that bound changes stay queued, not
// encoded. The queue holds kMaxPendingRecords records per node; beyond, the oldest is dropped in
// O(1) and counted (replication_dropped), as are the records of a node that leaves the view. A
// batch in flight when its link fails is queued again; a batch the replica refuses (its view
// differs) is queued again too, and the node is sent nothing for a back-off that doubles from
// 10 ms to 1 s, or until this node's view changes. A replica that is slow, stopped or cut off
// therefore costs a bounded amount of memory, and what it can miss is bounded by the queue.
// The shard's engine reports its changes here (ChangeSink). Shard thread only.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/key_hash.h"
#include "protocol/messages.h"
#include "server/key_ring.h"
#include "server/peer_link.h"
#include "server/shard_engine.h"

namespace sluice::server {

struct ClusterView;

class Replicator final : public ChangeSink {
 public:
  static constexpr std::size_t kMaxPendingRecords = 1u << 16;
  // Batches sent on one link and not yet acknowledged, at most (besides the window in bytes).
  static constexpr std::size_t kMaxBatchesInFlight = 1024;
  static constexpr std::chrono::milliseconds kMinRefusalBackoff{10};
  static constexpr std::chrono::milliseconds kMaxRefusalBackoff{1000};

  // Streams the records `engine` changes, over links on `io` (the shard's).
  Replicator(boost::asio::io_context& io, ShardEngine& engine);
  ~Replicator();
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // The shard decides by `view` from now on: replica nodes are looked up in it; nodes that left
  // the map have their links closed.
  void set_view(const ClusterView* view);
  // ChangeSink: the record of `hash` changed on this shard, its primary: queue it for the
  // replica, and for a joining node that will be its primary or replica once active
  // (ClusterView::joined).
  void note(const KeyHash& hash) override;
  // ChangeSink: start loading the key's slot of the "queued already" filter, which is random to
  // the cache as the keys are.
  void prefetch(const KeyHash& hash) const override {
    __builtin_prefetch(&recent_[recent_slot(hash)]);
  }
  // Closes every link (the shard is stopping); nothing is sent afterwards.
  void stop();

  // Per replica node, summed over its links, for STATS ("replication.<node>.*"): fills `out`
  // (one entry per replica node), reusing its elements and their strings: no allocation once it
  // has held as many nodes.
  void lag(std::vector<ReplicaLag>& out) const;

 private:
  struct Batch {
    std::uint32_t request_id = 0;
    std::vector<KeyHash> keys;
    std::size_t bytes = 0;  // the REPLICATE frame's size
    std::chrono::steady_clock::time_point sent;
  };
  struct Link {
    std::shared_ptr<PeerLink> link;
    std::vector<Batch> in_flight;     // oldest first; at most kMaxBatchesInFlight
    std::size_t in_flight_bytes = 0;  // the frames of in_flight: <= the window
    bool full = false;                // at its window, for the flush under way
  };
  struct Node {
    std::string id;
    std::string host;
    std::uint16_t port = 0;
    std::shared_ptr<PeerLink> control;  // to the public port: learns the shard ports
    std::vector<Link> shards;           // by the node's shard index, created when needed
    KeyRing pending{kMaxPendingRecords};
    // When `pending` last went from empty to not: no later than its oldest record was queued.
    std::chrono::steady_clock::time_point pending_since{};
    std::uint64_t dropped = 0;  // records dropped toward this node while in the view
    // After a refused batch, nothing is sent to the node before this (or a new view).
    std::chrono::steady_clock::time_point hold_until{};
    std::chrono::milliseconds refusal_backoff{0};
    // A record was queued (since the last full flush) for a shard of the node that has no link
    // yet, or the node's shard count was not known then.
    bool needs_link = true;
    bool seen = false;  // in the current view
  };

  void queue(Node& node, const KeyHash& hash);
  // Appends to node.pending, counting the record dropped when it is full.
  void push_pending(Node& node, const KeyHash& hash);
  void count_dropped(Node& node, std::uint64_t records);
  // True when this node is the key's primary in the current view: only those are replicated.
  bool primary_here(const KeyHash& hash) const;
  // True when every link of `node` is down or at its window and no queued record needs a link
  // not made yet: nothing could be sent now.
  bool all_links_blocked(const Node& node) const;
  bool at_window(const Link& link) const;
  // The Node for `id` at `address` in the current view, made if need be.
  Node* track(const std::string& id, const std::string& address);
  void flush_all();
  void flush(Node& node);
  void arm_timer();
  Link& link_for(Node& node, std::uint16_t shard);
  void on_reply(Node& node, std::uint16_t shard, const protocol::Frame& frame);
  void on_down(Node& node, std::uint16_t shard);
  Node* node_by_id(const std::string& id);

  boost::asio::io_context& io_;
  ShardEngine& engine_;
  const ClusterView* view_ = nullptr;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Node*> by_ring_index_;  // the current view's ring NodeIndex -> node
  // While nodes join: view_->joined's ring NodeIndex -> node, for joining nodes only.
  std::vector<Node*> by_joined_index_;
  boost::asio::steady_timer timer_;
  bool timer_armed_ = false;
  bool stopped_ = false;
  // The last key queued per slot, so that a hot key is queued once per batch, not per change;
  // a slot counts only for the batch generation it was written in.
  struct Recent {
    KeyHash hash;
    std::uint64_t generation = 0;
  };
  // A key changed many times within a batch is queued once (a slot keeps the last key queued
  // to it, so a collision only costs a duplicate record).
  static constexpr std::size_t kRecentSlots = 4096;
  static std::size_t recent_slot(const KeyHash& hash) {
    return (hash.lo >> 20) & (kRecentSlots - 1);
  }
  std::vector<Recent> recent_;
  std::uint64_t generation_ = 1;
  std::vector<std::uint64_t> log_;  // scratch for a sliding log's timestamps
  // The key lists of acknowledged batches, reused by the next ones: no allocation per batch.
  std::vector<std::vector<KeyHash>> spare_keys_;
};

}  // namespace sluice::server
