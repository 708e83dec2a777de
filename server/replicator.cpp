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
  // Nodes that left the map: their queued records have no replica to go to any more.
  for (auto& node : nodes_) {
    if (node->seen) continue;
    if (node->control) node->control->close();
    for (Link& link : node->shards) {
      if (link.link) link.link->close();
    }
    engine_.counters()[ShardStat::kReplicationDropped].add(node->pending.size());
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
  if (node.pending.empty()) node.pending_since = SteadyClock::now();
  if (node.pending.size() >= kMaxPendingRecords) {
    node.pending.erase(node.pending.begin());  // the oldest goes: its replica stays behind
    engine_.counters()[ShardStat::kReplicationDropped].add();
  }
  node.pending.push_back(hash);
  if (node.pending.size() >= engine_.context().config.replication_batch) {
    flush(node);
  } else {
    arm_timer();
  }
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
  ++generation_;  // a key changed from now on is queued again: the batch below reads it now
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
        [this](bool up, const std::string&) {
          if (up) arm_timer();
        });
    node.control->start();
  }
  if (!node.control->up()) return;  // the records wait until it is
  const std::size_t shards = node.control->hello().shard_ports.size();
  // Records go to the shard of the other node that owns them, by its shard count.
  const std::uint64_t now_ns = engine_.context().clock->now_ns();
  // Records that stay queued are moved to the front of `pending` (kept <= i always), so a flush
  // allocates nothing once the buffers have grown.
  std::size_t kept = 0;
  std::size_t i = 0;
  // Each record is read once, in `pending` order: prefetched this far ahead.
  constexpr std::size_t kAhead = 8;
  for (std::size_t k = 0; k < kAhead && k < node.pending.size(); ++k) {
    engine_.prefetch_record(node.pending[k]);
  }
  while (i < node.pending.size()) {
    const auto target =
        static_cast<std::uint16_t>(shard_for(node.pending[i], static_cast<std::uint32_t>(shards)));
    Link& link = link_for(node, target);
    if (!link.link->up()) {
      node.pending[kept++] = node.pending[i++];
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
    for (; i < node.pending.size() && batch.keys.size() < limit; ++i) {
      const KeyHash& hash = node.pending[i];
      if (i + kAhead < node.pending.size()) engine_.prefetch_record(node.pending[i + kAhead]);
      if (shard_for(hash, static_cast<std::uint32_t>(shards)) != target) {
        node.pending[kept++] = hash;
        continue;
      }
      RecordImage image;
      log_.clear();
      if (!engine_.export_record(hash, now_ns, image, log_)) {
        image = RecordImage{};  // reset or expired here: the replica forgets it too
        image.key = hash;
        log_.clear();
      }
      protocol::add_record(out, frame, to_wire(image), log_);
      batch.keys.push_back(hash);
    }
    protocol::finish_records(out, frame);
    engine_.counters()[ShardStat::kReplicationSent].add(batch.keys.size());
    link.in_flight.push_back(std::move(batch));
    link.link->flush();
  }
  node.pending.resize(kept);
  if (!node.pending.empty()) node.pending_since = SteadyClock::now();
}

void Replicator::on_reply(Node& node, std::uint16_t shard, const protocol::Frame& frame) {
  if (shard >= node.shards.size()) return;
  Link& link = node.shards[shard];
  if (frame.header.opcode != protocol::Opcode::kReplicate || link.in_flight.empty()) return;
  // Replies come in order on one connection: the first batch in flight is the one answered.
  if (link.in_flight.front().request_id != frame.header.request_id) return;
  engine_.counters()[ShardStat::kReplicationAcked].add(link.in_flight.front().keys.size());
  spare_keys_.push_back(std::move(link.in_flight.front().keys));
  link.in_flight.erase(link.in_flight.begin());
}

void Replicator::on_down(Node& node, std::uint16_t shard) {
  if (shard >= node.shards.size()) return;
  Link& link = node.shards[shard];
  // Whatever was in flight may not have arrived: send it again once the link is back.
  for (Batch& batch : link.in_flight) {
    node.pending.insert(node.pending.end(), batch.keys.begin(), batch.keys.end());
  }
  link.in_flight.clear();
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
    lag.queued = node->pending.size();
    lag.up = node->control != nullptr && node->control->up();
    SteadyClock::time_point oldest = node->pending.empty() ? now : node->pending_since;
    for (const Link& link : node->shards) {
      for (const Batch& batch : link.in_flight) lag.unacked += batch.keys.size();
      if (!link.in_flight.empty()) oldest = std::min(oldest, link.in_flight.front().sent);
      lag.up = lag.up && (link.link == nullptr || link.link->up());
    }
    lag.oldest_ms = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(now - oldest).count());
  }
}

}  // namespace sluice::server
