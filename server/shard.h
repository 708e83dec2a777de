// A shard: one thread, one io_context, one CounterTable, a listener on its own port and one on
// the shared public port, and an inbox for work handed over by other shards. Everything here
// except the inbox, the counters and the wake-up flag is touched by the shard's thread only.
// docs/ARCHITECTURE.md describes the threads, the request flow and shutdown.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "cluster/ring.h"
#include "core/algorithms.h"
#include "core/clock.h"
#include "core/key_hash.h"
#include "core/rule.h"
#include "net/handler_slot.h"
#include "protocol/cluster_messages.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "server/cluster_view.h"
#include "server/dispatcher.h"
#include "server/mpsc_queue.h"
#include "server/peer.h"
#include "server/replicator.h"
#include "server/server.h"
#include "server/shard_counters.h"
#include "server/table/counter_table.h"

namespace sluice::server {

class SocketPeer;
class Shard;

// A frame whose items are partly answered by other shards. Owned by the connection's shard;
// owners write only the result slots named by their items, and only until they hand the task
// back, so the slots need no synchronisation beyond the queue's release/acquire.
struct PendingFrame {
  protocol::Opcode opcode = protocol::Opcode::kAcquire;
  std::uint32_t request_id = 0;
  std::uint32_t tasks_pending = 0;      // tasks not yet back; the reply is sent when it reaches 0
  std::uint32_t items_handed_over = 0;  // items in those tasks (the peer's backlog)
  protocol::Framing framing;            // of the reply
  std::vector<protocol::AcquireResult> acquire_results;
  std::vector<protocol::ResetStatus> reset_results;
};

// One item for the owning shard: the key is already hashed, so the task does not point into
// the connection's input buffer.
// What an ACQUIRE item asks: a decision (or a peek), a lease, or a lease's give-back
// (protocol 4, docs/PROTOCOL.md "Leases").
enum class ItemKind : std::uint8_t { kDecide, kLease, kGiveBack };

struct HandoverItem {
  KeyHash hash;
  Rule rule;
  std::uint32_t cost = 1;
  bool peek = false;
  std::uint32_t index = 0;  // slot in the PendingFrame's results
  ItemKind kind = ItemKind::kDecide;
  std::uint32_t stamp = 0;  // a give-back's lease stamp
};

// The unit of cross-shard work: all the items of one frame that one other shard owns. It goes
// to the owner (kRun) and comes back to its origin (kDone) through the shards' inboxes.
struct HandoverTask : MpscNode {
  enum class Phase : std::uint8_t { kRun, kDone };
  Phase phase = Phase::kRun;
  protocol::Opcode opcode = protocol::Opcode::kAcquire;
  unsigned origin = 0;
  std::shared_ptr<Peer> peer;  // kept alive until the task is back, even if closed
  PendingFrame* frame = nullptr;
  std::vector<HandoverItem> items;
};

// State shared by all shards. Set up before the threads start; afterwards only the atomics
// change.
struct ServerContext {
  ServerConfig config;
  const Clock* clock = nullptr;
  unsigned shard_count = 1;
  std::vector<std::unique_ptr<Shard>> shards;
  std::uint16_t public_port = 0;
  std::vector<std::uint16_t> shard_ports;
  std::string node_id;
  // RELOAD (static cluster mode): rereads the cluster file off the shard threads and calls
  // `done(epoch in force, "" or why the file was refused)` on some thread. Set by Server.
  std::function<void(std::function<void(std::uint64_t, std::string)> done)> reload_cluster;
  // DRAIN (etcd mode): sets this node's record to draining, then calls `done(epoch, "" or why
  // not)`. Set by Server in etcd mode only.
  std::function<void(std::function<void(std::uint64_t, std::string)> done)> drain_node;

  // The fence, in etcd mode (docs/ARCHITECTURE.md, "Fencing and failover with etcd"): the node
  // decides as primary only while monotonic_now_ns() is below fence_deadline_ns, which the
  // membership agent moves forward with each answered keepalive of its etcd lease and sets to 0
  // when that lease is lost. `fenced`: the node runs under a fence (set before the shard threads
  // start).
  bool fenced = false;
  std::atomic<std::uint64_t> fence_deadline_ns{0};

  std::atomic<std::uint32_t> connections{0};  // open connections on all shards (max_connections)

  // Shutdown: the shards keep running until every shard has closed its listeners and
  // connections and every hand-over task is back home; then their work guards are released.
  std::atomic<unsigned> shards_closed{0};
  std::atomic<std::uint64_t> tasks_in_flight{0};
  std::atomic<bool> released{false};
  void maybe_release();
};

class Shard {
 public:
  Shard(ServerContext& context, unsigned index);
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // Calling thread, before run(). Throw std::system_error on failure. `port` 0 = ephemeral;
  // both return the bound port.
  std::uint16_t listen_public(const boost::asio::ip::address& address, std::uint16_t port);
  std::uint16_t listen_shard(const boost::asio::ip::address& address, std::uint16_t port);

  // Calling thread, once, before run(): queues the accept loops and the sweep timer.
  void spawn();
  // The shard thread's body: returns once the shard has stopped and all work is done.
  void run();
  // Any thread: closes the listeners, then the connections, gracefully (SocketPeer::shut_down,
  // within config.shutdown_timeout) or at once; the thread exits when in-flight work is done.
  // A graceful stop may be followed by one at once.
  void request_stop(bool graceful);
  // Shard thread: lets run() return once no handler is left (the last step of shutdown).
  void release_work();

  unsigned index() const { return index_; }
  boost::asio::io_context& io() { return io_; }
  ServerContext& context() { return context_; }
  ShardCounters& counters() { return counters_; }
  // Shard thread only: executes the frames of this shard's peers.
  Dispatcher& dispatcher() { return dispatcher_; }
  const ShardCounters& counters() const { return counters_; }

  // ---- shard thread only -------------------------------------------------------------------

  // One decision on this shard's table; counts allowed/denied. A lease takes up to `cost` units
  // (granted in the result, its stamp in retry_after_ms); a give-back credits `cost` units of the
  // lease stamped `stamp` (credited in `granted`).
  protocol::AcquireResult acquire_local(const KeyHash& hash, const Rule& rule, std::uint32_t cost,
                                        bool peek, std::uint64_t now_ns,
                                        ItemKind kind = ItemKind::kDecide, std::uint32_t stamp = 0);
  protocol::ResetStatus reset_local(const KeyHash& hash, std::uint64_t now_ns);
  // acquire_local() of a lease, past the routing checks.
  protocol::AcquireResult lease_local(const KeyHash& hash, const Rule& rule, std::uint32_t want,
                                      std::uint64_t now_ns);
  // Decides a batch on this shard's table: CounterTable::for_each_prefetched. In a cluster
  // every decision is noted for replication, so the replicator's slot for each key is
  // prefetched with its record.
  template <typename HashAt, typename Decide>
  void decide_prefetched(std::size_t n, HashAt hash_at, Decide decide) {
    if (view_ == nullptr) return table_.for_each_prefetched(n, hash_at, decide);
    check_fence();
    table_.for_each_prefetched(
        n,
        [&](std::size_t k) {
          const KeyHash hash = hash_at(k);
          replicator_.prefetch(hash);
          return hash;
        },
        decide);
  }
  // Applies a batch of records (a replica's REPLICATE) with their slots prefetched ahead.
  template <typename HashAt, typename Apply>
  void apply_prefetched(std::size_t n, HashAt hash_at, Apply apply) {
    table_.for_each_prefetched(n, hash_at, apply);
  }
  // Hint: start loading the key's record into cache (CounterTable::prefetch).
  void prefetch_record(const KeyHash& hash) const { table_.prefetch(hash); }
  // Copies the table's statistics into the counters other threads read.
  void publish_table_stats();
  // Appends a STATS reply. Its body is this shard's snapshot of every shard's counters, rebuilt
  // only when it is config.stats_refresh old or older; otherwise the same bytes are copied.
  void append_stats_reply(protocol::Bytes& out, std::uint32_t request_id,
                          const protocol::Framing& framing);

  // The cluster view decisions are made under; nullptr outside a cluster. set_view() swaps it
  // between frames (Server posts it to every shard).
  const ClusterView* view() const { return view_.get(); }
  void set_view(std::shared_ptr<const ClusterView> view);
  // etcd mode: reads whether the fence is open (the node's etcd lease is surely alive,
  // ServerContext::fence_deadline_ns) for the decisions that follow; once it has closed they
  // answer UNAVAILABLE instead of deciding as primary. Called before each batch (decide_prefetched
  // does); a no-op in other modes.
  void check_fence() {
    if (context_.fenced) fence_open_ = monotonic_now_ns() < context_.fence_deadline_ns.load();
  }

  // Records between nodes (docs/ARCHITECTURE.md, "Replication", "Moving partitions").
  bool export_record(const KeyHash& hash, std::uint64_t now_ns, RecordImage& out,
                     std::vector<std::uint64_t>& log) const {
    return table_.export_record(hash, now_ns, out, log);
  }
  // Merges a record from another node into this shard's table.
  void apply_record(const protocol::WireRecord& record, std::span<const std::uint64_t> log,
                    std::uint64_t now_ns);
  // Appends a PULL reply: a page of this shard's records of the `wanted` partitions.
  void pull_page(protocol::Bytes& out, std::uint32_t request_id, const protocol::Framing& framing,
                 const protocol::PullRequest& request, const std::vector<bool>& wanted,
                 const cluster::Ring& ring);
  // Replication lag per replica node, as of this shard's last sweep (any thread).
  std::vector<Replicator::PeerLag> published_lag() const;

  // Scratch per destination shard for the item being grouped by a connection handler.
  std::vector<std::vector<HandoverItem>>& staging() { return staging_; }
  PendingFrame* new_pending_frame();
  void recycle_pending_frame(PendingFrame* frame);
  HandoverTask* new_task();
  // Sends a task to shard `to` (owner or origin) and wakes it if it is not already draining.
  void send(unsigned to, HandoverTask* task);

  void on_connection_closed(SocketPeer* connection, bool counted);

  // The buffer budget (ServerConfig::max_buffer_memory / shards): connections report changes
  // of their footprint here. charge_buffers() never closes anything; enforce_buffer_budget()
  // closes the connections holding the most (SocketPeer::shed_for_memory) until the shard is
  // back within its share. Not re-entrant: a call made while one runs does nothing.
  void charge_buffers(std::int64_t delta);
  bool over_buffer_budget() const { return buffer_bytes_ > buffer_budget_; }
  void enforce_buffer_budget();
  std::size_t buffer_bytes() const { return buffer_bytes_; }
  // Calls connection->flush_now() after the handlers already queued on this shard, such as the
  // other reads of the same wake-up, have run: the replies of one wake-up leave together, and
  // the client wakes once for them rather than once per reply.
  void queue_flush(std::shared_ptr<SocketPeer> connection);
  // What queue_flush() posts: flushes every connection queued since.
  void flush_queued();

  // Test seam (Server::TEST_peak_queued_output): shard thread records, any thread reads.
  void TEST_record_queued_output(std::size_t bytes) {
    if (bytes > peak_queued_output_.load(std::memory_order_relaxed))
      peak_queued_output_.store(bytes, std::memory_order_relaxed);
  }
  std::size_t TEST_peak_queued_output() const {
    return peak_queued_output_.load(std::memory_order_relaxed);
  }
  // Test seam (tests/fuzz/connection_fuzz.cpp): CounterTable::TEST_check_invariants() on this
  // shard's table. Shard thread only.
  bool TEST_check_table_invariants() const { return table_.TEST_check_invariants(); }

 private:
  boost::asio::awaitable<void> accept_loop(boost::asio::ip::tcp::acceptor& acceptor,
                                           bool public_port);
  boost::asio::awaitable<void> sweep_loop();
  void accept(boost::asio::ip::tcp::socket socket, bool public_port);
  // Out of descriptors: frees the spare, accepts one pending connection, sends it
  // TOO_MANY_CONNECTIONS, closes it and takes the spare back. False when nothing was accepted
  // for want of a descriptor (the caller backs off).
  bool refuse_without_descriptor(boost::asio::ip::tcp::acceptor& acceptor);
  // At most one accept error line a second, naming how many were left out since the last.
  void log_accept_error(const boost::system::error_code& ec);
  void close_all(bool graceful);
  void close_connections_now();
  // Once stopping and without connections: counts this shard as closed (once).
  void maybe_closed();
  void drain();
  void run_task(HandoverTask* task);
  void finish_task(HandoverTask* task);
  void recycle_task(HandoverTask* task);

  ServerContext& context_;
  const unsigned index_;
  // Before io_: a flush still posted when io_ is destroyed gives its slot back.
  net::HandlerSlot flush_slot_;
  boost::asio::io_context io_;  // declared early: destroyed after everything bound to it
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  CounterTable table_;
  ShardCounters counters_;
  Dispatcher dispatcher_;
  std::shared_ptr<const ClusterView> view_;
  bool fence_open_ = true;  // check_fence(): false once the etcd lease may have expired
  Replicator replicator_;
  mutable std::mutex lag_mutex_;
  std::vector<Replicator::PeerLag> published_lag_;  // under lag_mutex_
  std::vector<Replicator::PeerLag> lag_scratch_;    // the shard thread's, swapped with it

  // Inbox: any thread pushes; this thread pops. drain_scheduled_ is true from the moment a
  // drain() is posted until it has found the inbox empty.
  MpscQueue<HandoverTask> inbox_;
  alignas(64) std::atomic<bool> drain_scheduled_{false};

  std::optional<boost::asio::ip::tcp::acceptor> public_acceptor_;
  std::optional<boost::asio::ip::tcp::acceptor> shard_acceptor_;
  boost::asio::steady_timer sweep_timer_;
  bool stopping_ = false;
  bool counted_closed_ = false;                  // this shard is in context_.shards_closed
  boost::asio::steady_timer stop_timer_;         // a graceful stop's deadline
  std::unordered_set<SocketPeer*> connections_;  // open connections, for close_all()
  std::atomic<std::size_t> peak_queued_output_{0};
  const std::size_t buffer_budget_;
  std::size_t buffer_bytes_ = 0;  // charged by this shard's connections
  bool enforcing_ = false;
  int spare_fd_ = -1;  // /dev/null, kept so that one connection can be refused under EMFILE
  std::chrono::steady_clock::time_point last_accept_log_{};
  std::uint64_t unlogged_accept_errors_ = 0;

  // The STATS snapshot (append_stats_reply): the encoded reply body and when it was built.
  void rebuild_stats_snapshot(std::uint64_t now_ns);
  std::vector<protocol::StatEntry> stats_entries_;  // names made once, values refreshed
  protocol::Bytes stats_body_;
  std::uint64_t stats_built_ns_ = 0;
  bool stats_built_ = false;

  std::vector<std::vector<HandoverItem>> staging_;
  std::vector<std::unique_ptr<PendingFrame>> free_frames_;
  std::vector<std::unique_ptr<HandoverTask>> free_tasks_;
  // Connections waiting for flush_queued(), which is posted while the list is not empty: one
  // post at a time, its operation in flush_slot_ (above).
  std::vector<std::shared_ptr<SocketPeer>> to_flush_;
  std::vector<std::shared_ptr<SocketPeer>> flushing_;
};

}  // namespace sluice::server
