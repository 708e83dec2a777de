// Internal: the state behind a Client, shared by client.cpp (the calls, connecting, following the
// cluster map) and async_batch.cpp (the batches). Which thread owns what is said member by
// member; "I/O side" means: connect() alone until it returns (`armed` is false), then only the
// I/O thread.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/async_batch.h"
#include "client/blocked_cache.h"
#include "client/client.h"
#include "client/lease_table.h"
#include "client/local_fallback.h"
#include "client/local_layer.h"
#include "client/metrics.h"
#include "client/node_connection.h"
#include "client/router.h"
#include "cluster/cluster_map.h"

namespace sluice::client {

struct Client::Impl final : detail::ConnectionObserver {
  Impl(ClientOptions opts, boost::asio::io_context* external);
  ~Impl();

  // ---- connections -------------------------------------------------------------------------

  detail::NodeConnection& add_connection(std::string name, boost::asio::ip::tcp::endpoint endpoint,
                                         std::uint16_t expected_shard);
  // Waits for the handshake; with an external io_context, by running it.
  Status wait_ready(detail::NodeConnection& connection);
  // The I/O side: fails everything in flight, closes every connection, stops the timer and
  // ends what waits for a map or a pause. May run inside a callback.
  void shut_down();
  // I/O thread: the current list, copied into a reused vector (no allocation per tick).
  const std::vector<detail::NodeConnection*>& snapshot();
  // I/O thread. One timer for the whole client: while anything is in flight it ticks every
  // `tick` and each connection fails what is past its deadline. No timer per call.
  void arm_timer();

  // ---- routing -----------------------------------------------------------------------------

  // The router in force. Any thread.
  std::shared_ptr<const detail::Router> current_router() const {
    std::lock_guard lock(router_mu);
    return router;
  }
  // The router in force, from this thread's cache: one atomic load when it is current, no lock
  // and no reference count. Valid until this thread's next call of it (on any client), so only
  // for code that calls no callback meanwhile. Any thread.
  const detail::Router& cached_router();
  // I/O side.
  void publish(std::shared_ptr<const detail::Router> next);
  // kInvalidKey unless the key fits the owner's max_key.
  static Status check_key(std::string_view key, const detail::NodeLimits& limits);

  // ---- calls -------------------------------------------------------------------------------

  // On failure `done` was not moved from and nothing was queued. Exactly one of `done` and
  // `batch_done` is given. `probe` sends the ACQUIRE frame's bytes as a PING (probe_batch_async
  // of one item). In a cluster the connection keeps a copy of the request and hands a REDIRECT
  // or UNAVAILABLE answer to on_resend_needed(), which goes on in a one-item batch; a key over
  // ResendCopy::kKeyBytes is a one-item batch from the start. Fails at once (nothing queued)
  // for an empty key, a map without an active node, or an owner that cannot be reached.
  // `checked_locally`: the caller asked local_answer() already, and it had none.
  Status submit_acquire(const AcquireRequest& request, AcquireCallback* done,
                        BatchCallback* batch_done = nullptr, bool probe = false,
                        bool checked_locally = false);
  // Blocks the calling thread until the I/O thread answers.
  Result<Decision> acquire_sync(const AcquireRequest& request);
  // async_batch.cpp.
  void batch_async(std::span<const AcquireRequest> items, bool probe, BatchCallback& done);
  // Follows a REDIRECT or an UNAVAILABLE on the calling thread (it may block).
  Result<bool> reset(std::string_view key);

  // ---- the local layer (client/local_layer.cpp; docs/CLIENT.md section 10) -----------------

  // What the layer answers before a request is sent: the blocked cache's denial, or the failure
  // policy's decision when the owner's node is taken as down; nullopt: send it. Any thread.
  // REQUIRES: not a probe; `hash` is the key's, routed to `owner`.
  // After close(): kClosed. With kReport and the owner down: kUnavailable at once.
  std::optional<Result<Decision>> local_answer(const AcquireRequest& request, const KeyHash& hash,
                                               const detail::OwnerGroup& owner);
  // Whether local_answer() would answer (a look, nothing decided or counted).
  bool answers_locally(const AcquireRequest& request, const KeyHash& hash,
                       const detail::OwnerGroup& owner);
  // The owner's answer to `request` (or why there is none): a denial with a finite retry_after
  // enters the blocked cache, and a failure of the owner becomes the failure policy's decision.
  // Decisions made locally pass unchanged. Any thread.
  void settle(const AcquireRequest& request, Result<Decision>& result);
  // A call to the node of `health` (null: none known) was answered, or failed as the owner's
  // failures do: its breaker counts it, and opens after ClientOptions::breaker_failures
  // failures in a row. A batch's frame counts once, whatever its items. Any thread.
  void note_call(detail::NodeHealth* health, bool failed);
  // Whether a call's failure is its owner's (a timeout, a connection failure, UNAVAILABLE).
  static bool owner_failure(const Status& status);
  // settle(), then the result is counted (metrics); `started_ns` (monotonic_now_ns(), 0: unknown)
  // gives the latency of a decision the cluster made. Any thread.
  void finish(const AcquireRequest& request, Result<Decision>& result, std::uint64_t started_ns);
  // Counts a result for metrics().
  void count(const AcquireRequest& request, const Result<Decision>& result,
             std::uint64_t started_ns);
  // The failure policy's decision for `request`; nullopt when the policy is kReport.
  std::optional<Decision> policy_answer(const AcquireRequest& request, std::uint64_t fingerprint,
                                        std::uint64_t now_ns);
  // A node's breaker opened (any thread): probes it on the I/O thread until it answers.
  void node_down(detail::NodeHealth& health);
  // I/O thread: the next probe of the node, after its backoff.
  void schedule_probe(detail::NodeHealth& health);
  // I/O thread, closing: the probes' timers stop.
  void cancel_probes();
  // The units of a lease request for `request` (routed to `owner`, on its way to the cluster),
  // or 0: none asked. Any thread.
  std::uint32_t lease_request(const AcquireRequest& request, const KeyHash& hash,
                              const detail::OwnerGroup& owner);
  // I/O thread: the lease timer fires when the earliest running lease ends.
  void arm_lease_timer(std::uint64_t until_ns);
  void on_lease_timer();
  // I/O thread: gives `ended`'s units back to the key's owner (one give-back item).
  void give_back(const detail::EndedLease& ended);

  // ---- the cluster (I/O side) --------------------------------------------------------------

  // A link to the node at `address` ("HOST:PORT"), its public connections connecting.
  detail::NodeLink& add_link(std::string id, std::string address);
  // Takes the node's limits (and, shard-aware, opens its shard connections) from the HELLO of
  // its first public connection, once that is answered. True when it did.
  bool learn_hello(detail::NodeLink& link);
  // Routes by `map` if it is newer than the map in force: links for its active nodes (new ones
  // connect at once), the others retired. `via` answered with `map`, being its node `self`.
  bool adopt(cluster::ClusterMap map, detail::NodeConnection* via, std::optional<std::size_t> self);
  // A new router for the links as they are (a node's shards became known).
  void rebuild_router();
  detail::NodeLink* link_of(const detail::NodeConnection& connection);
  // Closes the idle connections of retired links; false while some are still busy.
  bool close_retired();

  // Asks `via` for its map (CLUSTER), unless a refresh is under way (then once it ends).
  void request_refresh(detail::NodeConnection& via);
  void on_refresh_reply(const protocol::Frame& reply);
  void on_refresh_failure();
  // Wakes every batch and sync call waiting for a map: a refresh ended (or the client closes).
  void end_refresh();
  // A batch waits for the refresh under way; false (nothing registered) when there is none.
  bool wait_for_map(detail::AsyncBatch& batch);
  // Any thread but the I/O thread: waits until the map's epoch reaches `epoch`, the refresh
  // under way ends, or `deadline_ns` passes.
  void wait_for_epoch(std::uint64_t epoch, std::uint64_t deadline_ns);
  // Posted once connect() returns: what the I/O side saw while it was not armed.
  void catch_up();

  // detail::ConnectionObserver, I/O thread.
  void on_newer_epoch(detail::NodeConnection& connection, std::uint64_t epoch) override;
  void on_ready(detail::NodeConnection& connection) override;
  void on_resend_needed(const AcquireRequest& request, std::uint64_t deadline_ns,
                        const protocol::AcquireResult& answer, std::uint64_t reply_epoch,
                        AcquireCallback* done, BatchCallback* batch_done) override;
  void on_leased(const AcquireRequest& request, const protocol::AcquireResult& answer,
                 std::uint64_t started_ns, detail::NodeHealth* health) override;
  void on_decided(const AcquireRequest& request, Result<Decision>& result, std::uint64_t started_ns,
                  detail::NodeHealth* health) override {
    note_call(health, !result.ok() && owner_failure(result.status()));
    finish(request, result, started_ns);
  }

  ClientOptions options;
  std::uint64_t timeout_ns = 0;
  std::unique_ptr<boost::asio::io_context> owned_io;  // null with an external io_context
  boost::asio::io_context& io;
  boost::asio::steady_timer timer;
  bool timer_armed = false;  // I/O thread
  bool closed = false;       // I/O thread: shut_down() ran; the timer stays off
  net::HandlerSlot timer_slot;
  std::chrono::milliseconds tick{10};
  detail::BatchPool batches;        // outlives the connections: failing them completes batches
  detail::InFlightLimit in_flight;  // outlives the connections, which share it
  std::vector<Result<Decision>> completed_results;  // I/O thread: the spare results vector
  std::mutex connections_mu;                        // guards the list; connections live until ~Impl
  std::vector<std::unique_ptr<detail::NodeConnection>> connections;
  std::vector<detail::NodeConnection*> io_connections;  // I/O thread: snapshot()'s buffer
  ServerInfo info;                                      // the seed's HELLO
  detail::NodeConnection* control = nullptr;            // the seed's public connection

  mutable std::mutex router_mu;
  std::shared_ptr<const detail::Router> router;  // guarded by router_mu; never null once connected
  // Changes after each publish(), to a value no client of the process had: cached_router()
  // takes a thread's cached router only when it was cached under the value in force.
  std::atomic<std::uint64_t> router_version{0};

  // The epoch frames carry (the map's), and the highest epoch the client has or has asked for:
  // replies above it start a refresh. Written on the I/O side, read anywhere.
  std::atomic<std::uint64_t> map_epoch{0};
  std::atomic<std::uint64_t> epoch_floor{0};
  // False until connect() has built the I/O side; the observer only notes what it sees then.
  std::atomic<bool> armed{false};
  std::atomic<std::uint64_t> missed_epoch{0};

  // I/O side.
  std::vector<std::unique_ptr<detail::NodeLink>> links;
  std::optional<cluster::ClusterMap> current_map;   // empty: a node outside any cluster
  std::vector<const detail::NodeLink*> ring_links;  // by ring NodeIndex of current_map
  bool retired_pending = false;                     // a retired link still has a connection open
  class RefreshSink final : public detail::ReplySink {
   public:
    explicit RefreshSink(Impl& impl) : impl_(impl) {}
    void on_reply(std::uint32_t, const protocol::Frame& reply) override {
      impl_.on_refresh_reply(reply);
    }
    void on_failure(std::uint32_t, const Status&) override { impl_.on_refresh_failure(); }

   private:
    Impl& impl_;
  } refresh_sink{*this};
  detail::NodeConnection* refresh_via = nullptr;    // the connection the refresh under way asked
  detail::NodeConnection* refresh_again = nullptr;  // a newer epoch came from it meanwhile
  std::vector<detail::AsyncBatch*> map_waiters;
  std::vector<detail::AsyncBatch*> waking;  // end_refresh()'s buffer

  // Sync calls waiting for a map (reset): refreshing and map_events change under map_mu.
  std::mutex map_mu;
  std::condition_variable map_cv;
  bool refreshing = false;       // written on the I/O thread
  std::uint64_t map_events = 0;  // refreshes ended, and shut_down()

  std::atomic<std::uint64_t> map_refreshes{0};
  std::atomic<std::uint64_t> redirects_followed{0};
  std::atomic<std::uint64_t> unavailable_retries{0};

  // The local layer. `local_layer` is false when it can do nothing (kReport, no cache, no
  // breaker): requests are then not copied for it.
  const Clock& clock;
  bool local_layer = true;
  // Set by close() (any thread) and shut_down(): no call is answered locally after it.
  std::atomic<bool> closing{false};
  detail::BlockedCache blocked;
  detail::FallbackLimiter fallback;
  detail::Metrics metrics;
  std::atomic<std::uint64_t> blocked_hits{0};
  std::atomic<std::uint64_t> fallback_decisions{0};
  std::atomic<std::uint64_t> node_down_events{0};
  std::atomic<std::uint64_t> node_up_events{0};
  // Leases (client/lease_table.h). The table is any thread's; the timer the I/O thread's. Their
  // times are on ClientOptions::clock when one is given (a test's), else on the monotonic
  // clock: a step of the wall clock must not stretch a lease past its window.
  const Clock& lease_clock;
  detail::LeasePolicy lease_policy;
  detail::LeaseTable leases;
  boost::asio::steady_timer lease_timer;
  net::HandlerSlot lease_timer_slot;
  std::uint64_t lease_timer_at_ns = 0;  // I/O thread: when it fires (client clock); 0: not armed
  class GiveBackSink final : public detail::ReplySink {
   public:
    explicit GiveBackSink(Impl& impl) : impl_(impl) { scratch_.reserve(1); }
    void on_reply(std::uint32_t, const protocol::Frame& reply) override;
    void on_failure(std::uint32_t, const Status&) override {}

   private:
    Impl& impl_;
    std::vector<protocol::AcquireResult> scratch_;  // I/O thread
  } give_back_sink{*this};
  std::atomic<std::uint64_t> lease_decisions{0};
  std::atomic<std::uint64_t> leases_granted{0};
  std::atomic<std::uint64_t> leased_units{0};
  std::atomic<std::uint64_t> returned_units{0};
  std::atomic<std::uint64_t> credited_units{0};
  // I/O thread: one prober per node whose breaker ever opened.
  std::vector<std::unique_ptr<detail::NodeProber>> probers;

  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
  std::thread thread;
};

}  // namespace sluice::client
