#include "server/replicator.h"

#include <utility>

#include <fmt/core.h>
#include <algorithm>

#include "cluster/node.h"
#include "protocol/cluster_messages.h"
#include "server/cluster_view.h"
#include "server/dispatcher.h"
#include "server/record_wire.h"

namespace sluice::server {

namespace {

using SteadyClock = std::chrono::steady_clock;

}  // namespace

Replicator::Replicator(boost::asio::io_context& io, ShardEngine& engine)
    : io_(io), engine_(engine), timer_(io), recent_(kRecentSlots) {}

Replicator::~Replicator() { stop(); }

void Replicator::stop() {
  if (stopped_) return;
  stopped_ = true;
  timer_.cancel();
  for (auto& node : nodes_) {
    if (node->control) node->control->close();
    for (Link& link : node->shards) {
      if (link.link) link.link->close();
    }
  }
}

Replicator::Node* Replicator::node_by_id(const std::string& id) {
  for (auto& node : nodes_) {
    if (node->id == id) return node.get();
  }
  return nullptr;
}

Replicator::Node* Replicator::track(const std::string& id, const std::string& address_text) {
  Node* node = node_by_id(id);
  const auto address = cluster::parse_node_address(address_text);
  if (node != nullptr && address && (node->host != address->host || node->port != address->port)) {
    // The node moved: start over with links to its new address.
    if (node->control) node->control->close();
    for (Link& link : node->shards) {
      if (link.link) link.link->close();
    }
    node->control.reset();
    node->shards.clear();
    node->needs_link = true;
  }
  if (node == nullptr) {
    nodes_.push_back(std::make_unique<Node>());
    node = nodes_.back().get();
    node->id = id;
  }
  if (address) {
    node->host = address->host;
    node->port = address->port;
  }
  node->seen = true;
  if (node->control) node->control->set_epoch(view_->epoch());
  for (Link& link : node->shards) {
    if (link.link) link.link->set_epoch(view_->epoch());
  }
  return node;
}

void Replicator::set_view(const ClusterView* view) {
  view_ = view;
  by_ring_index_.clear();
  by_joined_index_.clear();
  for (auto& node : nodes_) node->seen = false;
  if (view == nullptr || stopped_) return;
  const cluster::Ring& ring = view->map.ring();
  by_ring_index_.assign(ring.nodes().size(), nullptr);
  for (std::size_t i = 0; i < ring.nodes().size(); ++i) {
    if (static_cast<cluster::NodeIndex>(i) == view->self) continue;
    const std::string& id = ring.nodes()[i];
    by_ring_index_[i] = track(id, view->map.find(id)->address);
  }
  if (view->joined) {
    const cluster::Ring& joined = view->joined->ring();
    by_joined_index_.assign(joined.nodes().size(), nullptr);
    for (std::size_t i = 0; i < joined.nodes().size(); ++i) {
      const cluster::ClusterNode* member = view->map.find(joined.nodes()[i]);
      if (member->state != cluster::NodeState::kJoining ||
          member->id == engine_.context().node_id) {
        continue;
      }
      by_joined_index_[i] = track(member->id, member->address);
    }
  }
  for (auto& node : nodes_) {
    if (!node->seen) continue;
    // Views may agree now: a node held after a refusal is sent to again at once.
    node->hold_until = {};
    node->refusal_backoff = std::chrono::milliseconds(0);
    // Records of partitions this node is no longer the primary of are not its to send (their
    // new primary pulled them at the hand-over), and a replica would refuse them for good.
    for (std::size_t left = node->pending.size(); left > 0; --left) {
      const KeyHash hash = node->pending.front();
      node->pending.pop_front();
      if (primary_here(hash)) node->pending.push_back(hash);
    }
  }
  // Nodes that left the map: their queued and unacknowledged records have no replica to go to
  // any more.
  for (auto& node : nodes_) {
    if (node->seen) continue;
    if (node->control) node->control->close();
    std::uint64_t lost = node->pending.size();
    for (Link& link : node->shards) {
      if (link.link) link.link->close();
      for (const Batch& batch : link.in_flight) lost += batch.keys.size();
    }
    count_dropped(*node, lost);
  }
  std::erase_if(nodes_, [](const std::unique_ptr<Node>& node) { return !node->seen; });
  ++generation_;
}

void Replicator::note(const KeyHash& hash) {
  if (view_ == nullptr || stopped_) return;
  const cluster::NodeIndex replica = view_->map.ring().owners_of(hash).replica;
  Node* node = replica < by_ring_index_.size() ? by_ring_index_[replica] : nullptr;
  // While nodes join, the ones that will hold the key once active get its changes too.
  Node* to_primary = nullptr;
  Node* to_replica = nullptr;
  if (!by_joined_index_.empty()) {
    const cluster::PartitionOwners owners = view_->joined->ring().owners_of(hash);
    if (owners.primary < by_joined_index_.size()) to_primary = by_joined_index_[owners.primary];
    if (owners.replica < by_joined_index_.size()) to_replica = by_joined_index_[owners.replica];
  }
  if (node == nullptr && to_primary == nullptr && to_replica == nullptr) return;
  Recent& recent = recent_[recent_slot(hash)];
  if (recent.generation == generation_ && recent.hash == hash) return;  // queued already
  recent = Recent{hash, generation_};
  if (node != nullptr) queue(*node, hash);
  if (to_primary != nullptr) queue(*to_primary, hash);
  if (to_replica != nullptr && to_replica != to_primary) queue(*to_replica, hash);
}

void Replicator::queue(Node& node, const KeyHash& hash) {
  push_pending(node, hash);
  if (node.control == nullptr || !node.control->up()) {
    node.needs_link = true;  // its shard count is not known yet
  } else if (!node.needs_link) {
    const std::size_t shard =
        shard_for(hash, static_cast<std::uint32_t>(node.control->hello().shard_ports.size()));
    node.needs_link = shard >= node.shards.size() || node.shards[shard].link == nullptr;
  }
  if (node.pending.size() >= engine_.context().config.replication_batch) {
    flush(node);
  } else {
    arm_timer();
  }
}

void Replicator::push_pending(Node& node, const KeyHash& hash) {
  if (node.pending.empty()) node.pending_since = SteadyClock::now();
  // At the bound the oldest goes: its replica stays behind on that key.
  if (node.pending.push_back(hash)) count_dropped(node, 1);
}

void Replicator::count_dropped(Node& node, std::uint64_t records) {
  node.dropped += records;
  engine_.counters()[ShardStat::kReplicationDropped].add(records);
}

bool Replicator::primary_here(const KeyHash& hash) const {
  return view_ != nullptr && view_->self != cluster::kNoNode &&
         view_->map.ring().primary_of(hash) == view_->self;
}

bool Replicator::at_window(const Link& link) const {
  if (link.in_flight.empty()) return false;  // one record, however large, may always go
  return link.in_flight.size() >= kMaxBatchesInFlight ||
         link.in_flight_bytes + protocol::kMaxHeaderSize + 4 + protocol::record_size(0) >
             engine_.context().config.replication_window_bytes;
}

bool Replicator::all_links_blocked(const Node& node) const {
  if (node.needs_link) return false;  // a record for a link not made yet
  bool any = false;
  for (const Link& link : node.shards) {
    if (link.link == nullptr) continue;  // no record goes there
    if (link.link->up() && !at_window(link)) return false;
    any = true;
  }
  return any;
}

void Replicator::arm_timer() {
  if (timer_armed_ || stopped_) return;
  timer_armed_ = true;
  timer_.expires_after(engine_.context().config.replication_interval);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    timer_armed_ = false;
    if (ec || stopped_) return;
    flush_all();
  });
}

void Replicator::flush_all() {
  bool left = false;
  for (auto& node : nodes_) {
    if (!node->pending.empty()) flush(*node);
    left = left || !node->pending.empty();
  }
  if (left) arm_timer();  // links still coming up: try again at the next interval
}

Replicator::Link& Replicator::link_for(Node& node, std::uint16_t shard) {
  if (node.shards.size() <= shard) node.shards.resize(shard + 1u);
  Link& link = node.shards[shard];
  if (link.link == nullptr) {
    PeerLink::Config config;
    config.host = node.host;
    config.port = node.control->hello().shard_ports.at(shard);
    config.source = engine_.context().config.source_address;
    config.token = engine_.context().config.auth_token;
    config.name = std::string(kNodeClientPrefix) + engine_.context().node_id;
    config.epoch = view_ != nullptr ? view_->epoch() : 0;
    // The window bounds what is unacknowledged, output included; this is the link's own
    // backstop, with room for one record larger than the window.
    config.max_output_bytes = engine_.context().config.replication_window_bytes +
                              protocol::kMaxHeaderSize + 4 +
                              protocol::record_size(engine_.context().config.sliding_log_cap);
    Node* target = &node;
    link.link = std::make_shared<PeerLink>(
        io_, std::move(config),
        [this, target, shard](const protocol::Frame& frame) { on_reply(*target, shard, frame); },
        [this, target, shard](bool up, const std::string&) {
          if (up) {
            arm_timer();
          } else {
            on_down(*target, shard);
          }
        });
    link.link->start();
  }
  return link;
}

void Replicator::flush(Node& node) {
  if (stopped_) return;
  if (node.control == nullptr) {
    PeerLink::Config config;
    config.host = node.host;
    config.port = node.port;
    config.source = engine_.context().config.source_address;
    config.token = engine_.context().config.auth_token;
    config.name = std::string(kNodeClientPrefix) + engine_.context().node_id;
    config.epoch = view_ != nullptr ? view_->epoch() : 0;
    node.control = std::make_shared<PeerLink>(
        io_, std::move(config), [](const protocol::Frame&) {},
        [this, target = &node](bool up, const std::string&) {
          if (!up) return;
          target->needs_link = true;  // its shard count may have changed
          arm_timer();
        });
    node.control->start();
  }
  if (!node.control->up()) return;                   // the records wait until it is
  if (SteadyClock::now() < node.hold_until) return;  // refused: flush_all() tries again
  const std::size_t shards = node.control->hello().shard_ports.size();
  // A replica that does not read: its links are at their windows, the records stay queued.
  if (all_links_blocked(node)) return;
  ++generation_;  // a key changed from now on is queued again: the batches below read it now
  // Records go to the shard of the other node that owns them, by its shard count.
  const std::uint64_t now_ns = engine_.context().clock->now_ns();
  const std::size_t window = engine_.context().config.replication_window_bytes;
  for (Link& link : node.shards) link.full = false;
  node.needs_link = false;  // every record is looked at below: link_for() makes what is missing
  // Each record queued now is looked at once: it is sent, or it goes to the back of `pending`
  // (its link is down or at its window). `pending` never grows here, so nothing is dropped,
  // and a flush allocates nothing once the buffers have grown.
  std::size_t left = node.pending.size();
  // Each record is read once, in `pending` order: prefetched this far ahead.
  constexpr std::size_t kAhead = 8;
  for (std::size_t k = 0; k < kAhead && k < left; ++k) {
    engine_.prefetch_record(node.pending[k]);
  }
  const auto requeue_front = [&node, &left] {
    const KeyHash hash = node.pending.front();
    node.pending.pop_front();
    node.pending.push_back(hash);
    --left;
  };
  while (left > 0) {
    const auto target = static_cast<std::uint16_t>(
        shard_for(node.pending.front(), static_cast<std::uint32_t>(shards)));
    Link& link = link_for(node, target);
    if (!link.link->up() || link.full || at_window(link)) {
      requeue_front();
      continue;
    }
    Batch batch;
    if (!spare_keys_.empty()) {
      batch.keys = std::move(spare_keys_.back());
      spare_keys_.pop_back();
      batch.keys.clear();
    }
    batch.request_id = link.link->next_id();
    batch.sent = SteadyClock::now();
    protocol::Bytes& out = link.link->output();
    const protocol::RecordFrame frame =
        protocol::begin_replicate_request(out, batch.request_id, link.link->framing());
    const std::size_t limit = engine_.context().config.replication_batch;
    while (left > 0 && batch.keys.size() < limit) {
      const KeyHash hash = node.pending.front();
      if (left > kAhead) engine_.prefetch_record(node.pending[kAhead]);
      if (shard_for(hash, static_cast<std::uint32_t>(shards)) != target) {
        requeue_front();
        continue;
      }
      RecordImage image;
      log_.clear();
      if (!engine_.export_record(hash, now_ns, image, log_)) {
        image = RecordImage{};  // reset or expired here: the replica forgets it too
        image.key = hash;
        log_.clear();
      }
      // The window: this record waits (at the front) if the link would go past it, unless it
      // is alone on the link.
      const std::size_t record_bytes =
          protocol::record_size(static_cast<std::uint32_t>(log_.size()));
      const bool alone = batch.keys.empty() && link.in_flight.empty();
      if (!alone &&
          link.in_flight_bytes + (out.size() - frame.frame_start) + record_bytes > window) {
        link.full = true;
        break;
      }
      node.pending.pop_front();
      --left;
      protocol::add_record(out, frame, to_wire(image), log_);
      batch.keys.push_back(hash);
    }
    if (batch.keys.empty()) {
      out.resize(frame.frame_start);  // nothing fitted: no frame
      spare_keys_.push_back(std::move(batch.keys));
      continue;
    }
    protocol::finish_records(out, frame);
    batch.bytes = out.size() - frame.frame_start;
    link.in_flight_bytes += batch.bytes;
    engine_.counters()[ShardStat::kReplicationSent].add(batch.keys.size());
    link.in_flight.push_back(std::move(batch));
    link.link->flush();
  }
}

void Replicator::on_reply(Node& node, std::uint16_t shard, const protocol::Frame& frame) {
  if (shard >= node.shards.size()) return;
  Link& link = node.shards[shard];
  if (frame.header.opcode != protocol::Opcode::kReplicate || link.in_flight.empty()) return;
  // Replies come in order on one connection: the first batch in flight is the one answered.
  if (link.in_flight.front().request_id != frame.header.request_id) return;
  Batch batch = std::move(link.in_flight.front());
  link.in_flight.erase(link.in_flight.begin());
  link.in_flight_bytes -= batch.bytes;
  protocol::ReplicateReply reply;
  const bool parsed = static_cast<bool>(protocol::parse_replicate_reply(frame.body, reply));
  if (parsed && reply.refused == 0) {
    engine_.counters()[ShardStat::kReplicationAcked].add(batch.keys.size());
    node.refusal_backoff = std::chrono::milliseconds(0);
  } else {
    // The replica's view differs from this node's (it does not take this node for the
    // records' primary): the batch is not acknowledged. Its records (those still this node's
    // to send) are queued again and the node is held for a back-off, or until the next view.
    // The reply does not say which records were refused: all are sent again, which merging
    // makes harmless.
    engine_.counters()[ShardStat::kReplicationRefused].add(parsed ? reply.refused
                                                                  : batch.keys.size());
    for (const KeyHash& hash : batch.keys) {
      if (primary_here(hash)) push_pending(node, hash);
    }
    node.refusal_backoff =
        std::clamp(node.refusal_backoff * 2, kMinRefusalBackoff, kMaxRefusalBackoff);
    node.hold_until = SteadyClock::now() + node.refusal_backoff;
  }
  spare_keys_.push_back(std::move(batch.keys));
  // The window has room again.
  if (!node.pending.empty()) arm_timer();
}

void Replicator::on_down(Node& node, std::uint16_t shard) {
  if (shard >= node.shards.size()) return;
  Link& link = node.shards[shard];
  // Whatever was in flight may not have arrived: send it again once the link is back.
  for (Batch& batch : link.in_flight) {
    for (const KeyHash& hash : batch.keys) push_pending(node, hash);
    spare_keys_.push_back(std::move(batch.keys));
  }
  link.in_flight.clear();
  link.in_flight_bytes = 0;
  if (!node.pending.empty()) arm_timer();
}

void Replicator::lag(std::vector<ReplicaLag>& out) const {
  out.resize(nodes_.size());
  const auto now = SteadyClock::now();
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const auto& node = nodes_[i];
    ReplicaLag& lag = out[i];
    lag.node = node->id;
    lag.unacked = 0;
    lag.bytes = 0;
    lag.dropped = node->dropped;
    lag.queued = node->pending.size();
    lag.up = node->control != nullptr && node->control->up();
    // No control link: nothing was ever queued for the node (flush() makes it).
    lag.link = node->control == nullptr ? ReplicaLink::kIdle
               : node->control->up()    ? ReplicaLink::kUp
                                        : ReplicaLink::kDown;
    SteadyClock::time_point oldest = node->pending.empty() ? now : node->pending_since;
    for (const Link& link : node->shards) {
      for (const Batch& batch : link.in_flight) lag.unacked += batch.keys.size();
      lag.bytes += link.in_flight_bytes;
      if (!link.in_flight.empty()) oldest = std::min(oldest, link.in_flight.front().sent);
      lag.up = lag.up && (link.link == nullptr || link.link->up());
      if (link.link != nullptr && !link.link->up()) lag.link = ReplicaLink::kDown;
    }
    lag.oldest_ms = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(now - oldest).count());
  }
}

}  // namespace sluice::server
