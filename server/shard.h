// A shard's host: one thread, one io_context, a listener on the shard's own port and one on the
// shared public port, the connections accepted there and their buffer budget, the Replicator
// that streams the shard's changes, and an inbox for work handed over by other shards. What the
// shard decides (table, cluster view, fence, counters, STATS) is its ShardEngine
// (server/shard_engine.h), which knows no socket. Everything here except the inbox and the
// wake-up flag is touched by the shard's thread only. docs/ARCHITECTURE.md describes the
// threads, the request flow and shutdown.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>

#include "core/key_hash.h"
#include "net/handler_slot.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "server/dispatcher.h"
#include "server/mpsc_queue.h"
#include "server/peer.h"
#include "server/replicator.h"
#include "server/server_context.h"
#include "server/shard_engine.h"

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
  std::uint64_t started_ns = 0;         // ACQUIRE: monotonic_now_ns() when its parse began
  std::vector<protocol::AcquireResult> acquire_results;
  std::vector<protocol::ResetStatus> reset_results;
  protocol::InspectReply inspect;          // INSPECT: filled by the key's shard
  std::vector<std::uint64_t> inspect_log;  // its sliding log's timestamps
};

// One item for the owning shard: the key is already hashed, so the task does not point into
// the connection's input buffer.
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
  // Shard thread only (its counters and published lag: any thread): what the shard decides.
  ShardEngine& engine() { return engine_; }
  const ShardEngine& engine() const { return engine_; }
  // Shard thread only: executes the frames of this shard's peers.
  Dispatcher& dispatcher() { return dispatcher_; }

  // ---- shard thread only -------------------------------------------------------------------

  // The cluster view decisions are made under (ShardEngine::set_view) and the replicator's,
  // swapped between frames: Server posts it to every shard.
  void set_view(std::shared_ptr<const ClusterView> view);

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
  ShardEngine engine_;
  Dispatcher dispatcher_;
  Replicator replicator_;                // the engine's ChangeSink
  std::vector<ReplicaLag> lag_scratch_;  // measured here, swapped with the engine's published

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
  // The most buffer_bytes_ since the last trim of the allocator's heaps (sweep_loop()).
  std::size_t buffer_bytes_peak_ = 0;
  bool enforcing_ = false;
  int spare_fd_ = -1;  // /dev/null, kept so that one connection can be refused under EMFILE
  std::chrono::steady_clock::time_point last_accept_log_{};
  std::uint64_t unlogged_accept_errors_ = 0;

  std::vector<std::vector<HandoverItem>> staging_;
  std::vector<std::unique_ptr<PendingFrame>> free_frames_;
  std::vector<std::unique_ptr<HandoverTask>> free_tasks_;
  // Connections waiting for flush_queued(), which is posted while the list is not empty: one
  // post at a time, its operation in flush_slot_ (above).
  std::vector<std::shared_ptr<SocketPeer>> to_flush_;
  std::vector<std::shared_ptr<SocketPeer>> flushing_;
};

}  // namespace sluice::server
