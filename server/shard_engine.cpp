#include "server/shard_engine.h"
#include "log/log.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "core/algorithms.h"
#include "server/record_wire.h"

namespace sluice::server {

ShardEngine::ShardEngine(ServerContext& context, unsigned index)
    : context_(context),
      index_(index),
      table_(TableConfig{.max_bytes = context.config.max_memory / context.shard_count,
                         .sliding_log_cap = context.config.sliding_log_cap,
                         .huge_pages = context.config.huge_pages}) {
  publish_table_stats();  // STATS shows the empty table (and its page size) from the start
}

RouteDecision ShardEngine::serve(const KeyHash& hash) {
  // A node never counts a key it is not the serving primary of (docs/ARCHITECTURE.md).
  if (view_ == nullptr) return {Route::kDecide, 0};
  RouteDecision decision = view_->route(hash);
  if (decision.route == Route::kDecide && !fence_open_) decision.route = Route::kUnavailable;
  if (decision.route == Route::kRedirect) counters_[ShardStat::kRedirected].add();
  if (decision.route == Route::kUnavailable) counters_[ShardStat::kUnavailable].add();
  return decision;
}

void ShardEngine::inspect(const KeyHash& hash, std::uint64_t now_ns, protocol::InspectReply& out,
                          std::vector<std::uint64_t>& log) const {
  out = protocol::InspectReply{};
  out.shard = static_cast<std::uint16_t>(index_);
  out.now_ns = now_ns;
  if (view_ != nullptr) {
    const std::uint32_t partition = view_->map.ring().partition_of(hash);
    const cluster::PartitionOwners owners = view_->map.ring().owners(partition);
    if (owners.primary != cluster::kNoNode && owners.primary == view_->self) {
      out.role = protocol::InspectRole::kPrimary;
      out.partition_state = static_cast<std::uint8_t>(view_->states->get(partition));
    } else if (owners.replica != cluster::kNoNode && owners.replica == view_->self) {
      out.role = protocol::InspectRole::kReplica;
    } else {
      out.role = protocol::InspectRole::kOther;
    }
  }
  RecordImage image;
  if (table_.export_record(hash, now_ns, image, log)) {
    out.status = protocol::InspectStatus::kStored;
    out.record = to_wire(image);
  } else {
    log.clear();
  }
}

protocol::AcquireResult ShardEngine::acquire(const KeyHash& hash, const Rule& rule,
                                             std::uint32_t cost, bool peek, std::uint64_t now_ns,
                                             ItemKind kind, std::uint32_t stamp) {
  // Each return builds its result where the caller keeps it, and the decision is made in
  // `answer` (CounterTable::update_counter says why).
  if (const RouteDecision served = serve(hash); served.route != Route::kDecide) {
    if (served.route == Route::kRedirect) {
      return {.status = protocol::ItemStatus::kRedirect, .limit = served.owner};
    }
    return {.status = protocol::ItemStatus::kUnavailable};
  }
  if (kind == ItemKind::kLease) return lease(hash, rule, cost, now_ns);
  if (kind == ItemKind::kGiveBack) return give_back(hash, rule, cost, stamp, now_ns);
  const TableAnswer answer = table_.acquire(hash, rule, Request{now_ns, cost, peek});
  // All four numbers 0, as for the other failed items.
  if (answer.outcome == TableOutcome::kNoMemory) return {.status = protocol::ItemStatus::kNoMemory};
  if (!peek) {
    counters_[answer.decision.allowed ? ShardStat::kAllowed : ShardStat::kDenied].add();
    counters_.decisions.add(static_cast<std::uint8_t>(rule.algorithm), answer.decision.allowed);
    // Only an admission changes a record's state (a denial leaves it as it was).
    if (answer.decision.allowed) noted(hash);
  }
  return protocol::to_result(answer.decision);  // ALLOWED or DENIED
}

protocol::AcquireResult ShardEngine::give_back(const KeyHash& hash, const Rule& rule,
                                               std::uint32_t units, std::uint32_t stamp,
                                               std::uint64_t now_ns) {
  protocol::AcquireResult result;
  result.status = protocol::ItemStatus::kAllowed;
  result.limit = rule.capacity();
  result.granted = table_.give_back(hash, rule, units, stamp, now_ns);
  counters_[ShardStat::kGiveBacks].add();
  counters_[ShardStat::kCreditedUnits].add(result.granted);
  if (result.granted != 0) noted(hash);
  return result;
}

protocol::AcquireResult ShardEngine::lease(const KeyHash& hash, const Rule& rule,
                                           std::uint32_t want, std::uint64_t now_ns) {
  // The grant sluice::lease() makes on a bare state, made on the key's record. A key that
  // cannot be stored answers as denied to the grant, which then stops.
  bool no_memory = false;
  const LeaseGrant grant = grant_lease(Request{now_ns, want, false}, [&](const Request& r) {
    if (no_memory) return Verdict{};  // nothing more is tried once the table is full
    const TableAnswer answer = table_.acquire(hash, rule, r);
    if (answer.outcome == TableOutcome::kNoMemory) no_memory = true;
    return answer.outcome == TableOutcome::kNoMemory ? Verdict{} : answer.decision;
  });
  protocol::AcquireResult result;
  if (no_memory) {
    result.status = protocol::ItemStatus::kNoMemory;
    return result;
  }
  result = protocol::to_result(grant.decision);
  if (grant.granted == 0) {
    result.status = protocol::ItemStatus::kDenied;
    counters_[ShardStat::kDenied].add();
    counters_.decisions.add(static_cast<std::uint8_t>(rule.algorithm), false);
    return result;
  }
  result.status = protocol::ItemStatus::kAllowed;
  result.granted = grant.granted;
  // The stamp its give-back needs (the window, or the grant's millisecond).
  result.retry_after_ms = lease_stamp(rule, now_ns);
  counters_[ShardStat::kAllowed].add();
  counters_.decisions.add(static_cast<std::uint8_t>(rule.algorithm), true);
  counters_[ShardStat::kLeases].add();
  counters_[ShardStat::kLeasedUnits].add(grant.granted);
  noted(hash);
  return result;
}

protocol::ResetStatus ShardEngine::reset(const KeyHash& hash, std::uint64_t now_ns) {
  switch (serve(hash).route) {
    case Route::kRedirect:
      return protocol::ResetStatus::kRedirect;
    case Route::kUnavailable:
      return protocol::ResetStatus::kUnavailable;
    case Route::kDecide:
      break;
  }
  if (!table_.reset(hash, now_ns)) return protocol::ResetStatus::kAbsent;
  noted(hash);  // the replica forgets it too
  return protocol::ResetStatus::kRemoved;
}

void ShardEngine::apply_record(const protocol::WireRecord& record,
                               std::span<const std::uint64_t> log, std::uint64_t now_ns,
                               bool stream) {
  const RecordImage image = from_wire(record);
  if (table_.apply_record(image, log, now_ns) == ApplyOutcome::kApplied && stream) {
    noted(image.key);
  }
}

void ShardEngine::pull_page(protocol::Bytes& out, std::uint32_t request_id,
                            const protocol::Framing& framing, const protocol::PullRequest& request,
                            const std::vector<bool>& wanted, const cluster::Ring& ring) {
  const std::uint64_t now_ns = context_.clock->now_ns();
  // A pull of what changed since an earlier one gets this clock back in its reply, to give as
  // its `since` next time (the records' stamps are on this clock).
  std::optional<std::uint64_t> clock;
  if (request.since_ns) clock = now_ns;
  const protocol::RecordFrame frame = protocol::begin_pull_reply(
      out, request_id, protocol::PullReplyHeader{request.fence, false, 0, clock}, framing);
  const ScanResult scanned = table_.scan(
      request.cursor, request.max_records, now_ns,
      [&](const KeyHash& key) { return wanted[ring.partition_of(key)]; },
      [&](const RecordImage& image, std::span<const std::uint64_t> timestamps) {
        protocol::add_record(out, frame, to_wire(image), timestamps);
      },
      request.since_ns.value_or(0));
  protocol::set_pull_reply_header(
      out, frame,
      protocol::PullReplyHeader{request.fence, scanned.done, scanned.next_cursor, clock});
  protocol::finish_records(out, frame);
  counters_[ShardStat::kPullPages].add();
  counters_[ShardStat::kPullRecords].add(scanned.visited);
}

void ShardEngine::sweep(std::uint64_t now_ns) {
  table_.sweep_step(now_ns);
  publish_table_stats();
}

void ShardEngine::publish_table_stats() {
  const TableStats stats = table_.stats();
  counters_[ShardStat::kKeys].set(stats.keys);
  counters_[ShardStat::kMemoryBytes].set(stats.memory_bytes);
  counters_[ShardStat::kSlots].set(stats.slots);
  counters_[ShardStat::kExpired].set(stats.expired);
  counters_[ShardStat::kEvicted].set(stats.evicted);
  counters_[ShardStat::kEvictedExhausted].set(stats.evicted_exhausted);
  counters_[ShardStat::kFailedInserts].set(stats.failed_inserts);
  counters_[ShardStat::kHugePages].set(stats.huge_pages ? 1 : 0);
}

void ShardEngine::publish_lag(std::vector<ReplicaLag>& lag) {
  std::lock_guard<std::mutex> lock(lag_mutex_);
  published_lag_.swap(lag);
}

std::vector<ReplicaLag> ShardEngine::published_lag() const {
  std::lock_guard<std::mutex> lock(lag_mutex_);
  return published_lag_;
}

std::vector<ReplicaLag> ShardEngine::node_lag() const {
  std::vector<ReplicaLag> lag;
  for (unsigned i = 0; i < context_.shard_count; ++i) {
    for (const ReplicaLag& peer : context_.engines[i]->published_lag()) {
      auto it = std::find_if(lag.begin(), lag.end(),
                             [&](const ReplicaLag& l) { return l.node == peer.node; });
      if (it == lag.end()) {
        lag.push_back(peer);
        continue;
      }
      it->queued += peer.queued;
      it->unacked += peer.unacked;
      it->bytes += peer.bytes;
      it->dropped += peer.dropped;
      it->oldest_ms = std::max(it->oldest_ms, peer.oldest_ms);
      it->up = it->up && peer.up;
      it->link = merge_links(it->link, peer.link);
    }
  }
  return lag;
}

void ShardEngine::log_replica_states() {
  const auto stall_ms = static_cast<std::uint64_t>(context_.config.replication_stall_after.count());
  const std::vector<ReplicaLag> lag = node_lag();
  for (const ReplicaLag& peer : lag) {
    const auto it = std::find(stalled_replicas_.begin(), stalled_replicas_.end(), peer.node);
    const bool was = it != stalled_replicas_.end();
    const bool is = peer.oldest_ms >= stall_ms;
    if (is && !was) {
      stalled_replicas_.push_back(peer.node);
      log::warning("replication",
                   fmt::format("replica {} stalled: {} records not acknowledged, the oldest {} ms "
                               "old ({}); serving on, {} records dropped toward it so far",
                               peer.node, peer.queued + peer.unacked, peer.oldest_ms,
                               peer.up ? "connected" : "not connected", peer.dropped));
    } else if (!is && was) {
      stalled_replicas_.erase(it);
      log::info("replication",
                fmt::format("replica {} caught up: {} records not acknowledged, the oldest {} ms "
                            "old; {} records dropped toward it so far",
                            peer.node, peer.queued + peer.unacked, peer.oldest_ms, peer.dropped));
    }
  }
  // A node that left the view is no longer stalled: forget it without a line.
  std::erase_if(stalled_replicas_, [&](const std::string& node) {
    return std::none_of(lag.begin(), lag.end(),
                        [&](const ReplicaLag& peer) { return peer.node == node; });
  });
}

void ShardEngine::append_stats_reply(protocol::Bytes& out, std::uint32_t request_id,
                                     const protocol::Framing& framing) {
  const std::uint64_t now_ns = context_.clock->now_ns();
  const auto refresh_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(context_.config.stats_refresh).count());
  // A clock that stepped back also rebuilds: the snapshot is never older than the bound says.
  if (!stats_built_ || now_ns < stats_built_ns_ || now_ns - stats_built_ns_ >= refresh_ns) {
    rebuild_stats_snapshot(now_ns);
  }
  protocol::encode_stats_reply_with_body(out, request_id, stats_body_, framing);
}

void ShardEngine::rebuild_stats_snapshot(std::uint64_t now_ns) {
  constexpr std::size_t kStats = static_cast<std::size_t>(ShardStat::kCount);
  const unsigned shards = context_.shard_count;
  if (stats_entries_.empty()) {
    stats_entries_.reserve((shards + 1) * kStats);
    for (std::size_t s = 0; s < kStats; ++s)
      stats_entries_.push_back({fmt::format("total.{}", kShardStatNames[s]), 0});
    for (unsigned i = 0; i < shards; ++i) {
      for (std::size_t s = 0; s < kStats; ++s)
        stats_entries_.push_back({fmt::format("shard.{}.{}", i, kShardStatNames[s]), 0});
    }
  }
  publish_table_stats();
  for (std::size_t s = 0; s < kStats; ++s) stats_entries_[s].value = 0;
  for (unsigned i = 0; i < shards; ++i) {
    const ShardCounters& counters = context_.engines[i]->counters();
    for (std::size_t s = 0; s < kStats; ++s) {
      const std::uint64_t value = counters.values[s].get();
      stats_entries_[s].value += value;
      stats_entries_[(i + 1) * kStats + s].value = value;
    }
  }
  stats_entries_.resize((shards + 1) * kStats);
  // etcd mode: the fence, as the membership agent last noted it, and the etcd member in use.
  if (context_.fenced) {
    const std::uint64_t reason = context_.fence_reason.load(std::memory_order_relaxed);
    stats_entries_.push_back({"node.fenced", reason != 0 ? 1u : 0u});
    stats_entries_.push_back({"node.fence_reason", reason});
    stats_entries_.push_back(
        {"node.etcd_endpoint", context_.etcd_endpoint.load(std::memory_order_relaxed)});
  }
  // Replication lag per replica node, over every shard: "replication.<node>.<name>".
  if (view_ != nullptr) {
    const auto stall_ms =
        static_cast<std::uint64_t>(context_.config.replication_stall_after.count());
    for (const ReplicaLag& peer : node_lag()) {
      const std::string prefix = "replication." + peer.node + ".";
      stats_entries_.push_back({prefix + "records", peer.queued + peer.unacked});
      stats_entries_.push_back({prefix + "lag_ms", peer.oldest_ms});
      stats_entries_.push_back({prefix + "up", peer.up ? 1u : 0u});
      stats_entries_.push_back({prefix + "bytes", peer.bytes});
      stats_entries_.push_back({prefix + "dropped", peer.dropped});
      stats_entries_.push_back({prefix + "stalled", peer.oldest_ms >= stall_ms ? 1u : 0u});
      stats_entries_.push_back({prefix + "link", static_cast<std::uint64_t>(peer.link)});
    }
    // etcd mode: the members that left the map without draining, "lost.<node>.epoch".
    for (const cluster::LostMember& member : view_->lost) {
      stats_entries_.push_back({"lost." + member.id + ".epoch", member.epoch});
    }
  }
  stats_body_.clear();
  protocol::encode_stats_body(stats_body_, stats_entries_);
  stats_built_ns_ = now_ns;
  stats_built_ = true;
}

}  // namespace sluice::server
