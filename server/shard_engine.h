// A shard's engine: everything a shard decides, with no socket, no thread and no event loop
// (docs/ARCHITECTURE.md, "The shard: host and engine"). It owns the shard's counter table, the
// cluster view decisions are made under, the fence check, the shard's counters (STATS) and the
// replication lag last published, and it does acquire, lease, give-back, reset, apply (a
// replica's records), pull (a page of records for another node) and STATS. Records it changes
// as a primary go to a ChangeSink: the shard's Replicator, which streams them to replicas.
//
// Threading: the engine belongs to its shard's thread; only the counters and published_lag()
// are read by other threads (STATS on another shard). server/shard.h is the host around it:
// the io_context, acceptors, connections, buffer budget and the inbox of hand-over tasks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "cluster/ring.h"
#include "core/key_hash.h"
#include "core/rule.h"
#include "protocol/cluster_messages.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "server/cluster_view.h"
#include "server/server_context.h"
#include "server/shard_counters.h"
#include "server/table/counter_table.h"

namespace sluice::server {

// What an ACQUIRE item asks: a decision (or a peek), a lease, or a lease's give-back
// (protocol 4, docs/PROTOCOL.md "Leases").
enum class ItemKind : std::uint8_t { kDecide, kLease, kGiveBack };

// Where an engine sends the keys whose records it changed as their primary (the replication
// stream, server/replicator.h). Shard thread only.
class ChangeSink {
 public:
  // The record of `hash` changed on this shard: queue it for the replica (and for a joining
  // node that will hold it).
  virtual void note(const KeyHash& hash) = 0;
  // Hint, a few keys ahead of note(): start loading what note() will touch for `hash`.
  virtual void prefetch(const KeyHash& hash) const = 0;

 protected:
  ~ChangeSink() = default;
};

// The links to one replica node (STATS "replication.<node>.link"; the values are part of
// STATS). Ordered so that over several shards the worst one wins (merge_links()).
enum class ReplicaLink : std::uint8_t {
  kIdle = 0,  // no link made: nothing needed sending to the node yet
  kUp = 1,    // every link made is connected
  kDown = 2,  // a link made is not connected (never was, or broke)
};
inline ReplicaLink merge_links(ReplicaLink a, ReplicaLink b) { return a < b ? b : a; }

// Replication to one replica node, as a shard last saw it (STATS "replication.<node>.*").
struct ReplicaLag {
  std::string node;
  std::uint64_t queued = 0;     // records waiting to be sent
  std::uint64_t unacked = 0;    // records sent, not yet acknowledged
  std::uint64_t oldest_ms = 0;  // age of the oldest of those (queued or unacked)
  bool up = false;              // every link it needs is up
  std::uint64_t bytes = 0;      // REPLICATE frames sent, not yet acknowledged
  std::uint64_t dropped = 0;    // records dropped toward it, while in the view
  ReplicaLink link = ReplicaLink::kIdle;
};

class ShardEngine {
 public:
  // Shard `index` of the node whose shared state is `context` (config, clock, fence, the other
  // engines for STATS). The table gets max_memory / shard_count bytes.
  ShardEngine(ServerContext& context, unsigned index);
  ShardEngine(const ShardEngine&) = delete;
  ShardEngine& operator=(const ShardEngine&) = delete;

  unsigned index() const { return index_; }
  ServerContext& context() const { return context_; }
  ShardCounters& counters() { return counters_; }
  const ShardCounters& counters() const { return counters_; }

  // ---- the cluster -------------------------------------------------------------------------

  // The view decisions are made under; nullptr outside a cluster. set_view() swaps it between
  // frames.
  const ClusterView* view() const { return view_.get(); }
  void set_view(std::shared_ptr<const ClusterView> view) { view_ = std::move(view); }
  // Where changed records go (null: nowhere; only consulted in a cluster). Set once, before use.
  void set_changes(ChangeSink* changes) { changes_ = changes; }
  // etcd mode: reads whether the fence is open (the node's etcd lease is surely alive and its
  // map confirmed, ServerContext::fence_deadline_ns) for the decisions that follow; once it
  // has closed they answer UNAVAILABLE instead of deciding as primary. Called before each
  // batch (decide_prefetched does); a no-op in other modes.
  void check_fence() {
    if (context_.fenced) fence_open_ = boottime_now_ns() < context_.fence_deadline_ns.load();
  }

  // ---- decisions ---------------------------------------------------------------------------

  // One item on this shard's table, after the route-and-fence check (serve()): a decision or a
  // peek (counted allowed/denied), a lease of up to `cost` units (granted in the result, its
  // stamp in retry_after_ms), or a give-back of `cost` units of the lease stamped `stamp`
  // (credited in `granted`). Items this node must not decide answer REDIRECT or UNAVAILABLE.
  protocol::AcquireResult acquire(const KeyHash& hash, const Rule& rule, std::uint32_t cost,
                                  bool peek, std::uint64_t now_ns,
                                  ItemKind kind = ItemKind::kDecide, std::uint32_t stamp = 0);
  // RESET of one key, after the same check.
  protocol::ResetStatus reset(const KeyHash& hash, std::uint64_t now_ns);
  // INSPECT of one key: what this shard stores for it (its record, a sliding log's timestamps
  // in `log`) and this node's role for it in its map, whatever that role; changes nothing.
  void inspect(const KeyHash& hash, std::uint64_t now_ns, protocol::InspectReply& out,
               std::vector<std::uint64_t>& log) const;
  // Decides a batch: CounterTable::for_each_prefetched, with the fence read first. In a cluster
  // every decision may be noted for replication, so the sink's slot for each key is prefetched
  // with its record.
  template <typename HashAt, typename Decide>
  void decide_prefetched(std::size_t n, HashAt hash_at, Decide decide) {
    if (view_ == nullptr) return table_.for_each_prefetched(n, hash_at, decide);
    check_fence();
    table_.for_each_prefetched(
        n,
        [&](std::size_t k) {
          const KeyHash hash = hash_at(k);
          if (changes_ != nullptr) changes_->prefetch(hash);
          return hash;
        },
        decide);
  }

  // ---- records between nodes (docs/ARCHITECTURE.md, "Replication", "Moving partitions") ----

  // The record of `hash` as it is now, for a replica; false when there is none (reset or
  // expired).
  bool export_record(const KeyHash& hash, std::uint64_t now_ns, RecordImage& out,
                     std::vector<std::uint64_t>& log) const {
    return table_.export_record(hash, now_ns, out, log);
  }
  // Hint: start loading the key's record into cache (CounterTable::prefetch).
  void prefetch_record(const KeyHash& hash) const { table_.prefetch(hash); }
  // Merges a record from another node into this shard's table; with `stream`, a record that
  // changed ours is streamed to the key's replica as a decision's would be.
  void apply_record(const protocol::WireRecord& record, std::span<const std::uint64_t> log,
                    std::uint64_t now_ns, bool stream = false);
  // Applies a batch of records (a replica's REPLICATE) with their slots prefetched ahead.
  template <typename HashAt, typename Apply>
  void apply_prefetched(std::size_t n, HashAt hash_at, Apply apply) {
    table_.for_each_prefetched(n, hash_at, apply);
  }
  // Appends a PULL reply: a page of this shard's records of the `wanted` partitions.
  void pull_page(protocol::Bytes& out, std::uint32_t request_id, const protocol::Framing& framing,
                 const protocol::PullRequest& request, const std::vector<bool>& wanted,
                 const cluster::Ring& ring);

  // ---- upkeep and STATS --------------------------------------------------------------------

  // One step of the table's incremental sweep (expired records out), then publish_table_stats().
  void sweep(std::uint64_t now_ns);
  // Copies the table's statistics into the counters other threads read.
  void publish_table_stats();
  // The replication lag this shard last measured (its Replicator's), for STATS on any shard.
  // publish_lag() swaps `lag` with the published vector, so both keep their memory.
  void publish_lag(std::vector<ReplicaLag>& lag);
  std::vector<ReplicaLag> published_lag() const;  // any thread
  // Every shard's published lag, summed per replica node (oldest_ms: the largest). Any thread.
  std::vector<ReplicaLag> node_lag() const;
  // Says in the log when a replica node turns stalled (its oldest change not acknowledged is
  // older than config.replication_stall_after) and when it catches up again, once per change
  // of state. One shard calls it (shard 0), after publish_lag().
  void log_replica_states();
  // Appends a STATS reply. Its body is this shard's snapshot of every shard's counters, rebuilt
  // only when it is config.stats_refresh old or older; otherwise the same bytes are copied.
  void append_stats_reply(protocol::Bytes& out, std::uint32_t request_id,
                          const protocol::Framing& framing);

  // Test seam (tests/fuzz/connection_fuzz.cpp): CounterTable::TEST_check_invariants().
  bool TEST_check_table_invariants() const { return table_.TEST_check_invariants(); }

 private:
  // The route-and-fence check every item passes (ClusterView::route, then the fence): kDecide
  // when this node serves the key as its primary now; REDIRECT (with the owner) and
  // UNAVAILABLE are counted.
  RouteDecision serve(const KeyHash& hash);
  // acquire() of a lease, past serve().
  protocol::AcquireResult lease(const KeyHash& hash, const Rule& rule, std::uint32_t want,
                                std::uint64_t now_ns);
  // acquire() of a give-back of `units` of the lease stamped `stamp`, past serve().
  protocol::AcquireResult give_back(const KeyHash& hash, const Rule& rule, std::uint32_t units,
                                    std::uint32_t stamp, std::uint64_t now_ns);
  void noted(const KeyHash& hash) {
    if (view_ != nullptr && changes_ != nullptr) changes_->note(hash);
  }
  void rebuild_stats_snapshot(std::uint64_t now_ns);

  ServerContext& context_;
  const unsigned index_;
  CounterTable table_;
  ShardCounters counters_;
  std::shared_ptr<const ClusterView> view_;
  bool fence_open_ = true;  // check_fence(): false once the etcd lease may have expired
  ChangeSink* changes_ = nullptr;

  mutable std::mutex lag_mutex_;
  std::vector<ReplicaLag> published_lag_;  // under lag_mutex_
  // log_replica_states(): the replica nodes last said to be stalled. Shard thread.
  std::vector<std::string> stalled_replicas_;

  // The STATS snapshot (append_stats_reply): the encoded reply body and when it was built.
  std::vector<protocol::StatEntry> stats_entries_;  // names made once, values refreshed
  protocol::Bytes stats_body_;
  std::uint64_t stats_built_ns_ = 0;
  bool stats_built_ = false;
};

}  // namespace sluice::server
