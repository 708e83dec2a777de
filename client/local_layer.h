// Internal: the client's local layer (docs/CLIENT.md section 10), what answers a request
// without the cluster or settles the cluster's answer: the blocked-key cache in front of every
// acquire, a breaker per node with its background probe, the failure policies (the local
// fallback limiter for kOpen), leases of hot keys and their give-backs, and the metrics of every
// decision.
//
// Threading: answer(), answers(), settle(), note_call(), finish(), count() and lease_request()
// run on any thread (the cache, the tables and the counters are built for it); timers, probes,
// on_leased() and the give-backs run on the I/O thread.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "client/blocked_cache.h"
#include "client/client.h"
#include "client/lease_table.h"
#include "client/local_fallback.h"
#include "client/map_tracker.h"
#include "client/metrics.h"
#include "client/node_connection.h"
#include "client/router.h"
#include "core/clock.h"
#include "core/key_hash.h"
#include "net/handler_slot.h"

namespace sluice::client::detail {

class LocalLayer;

// Probes one down node on the I/O thread: a PING on its first public connection after each
// backoff, until one is answered; then the node is up again. I/O thread only.
class NodeProber final : public ReplySink {
 public:
  NodeProber(LocalLayer& layer, MapTracker& maps, NodeHealth& health);

  const NodeHealth& health() const { return health_; }
  void start();
  void cancel() { timer_.cancel(); }

  void on_reply(std::uint32_t part, const protocol::Frame& reply) override;
  void on_failure(std::uint32_t part, const Status& status) override;

 private:
  void arm();
  void on_timer(const boost::system::error_code& ec);

  NodeHealth& health_;
  LocalLayer& layer_;
  MapTracker& maps_;
  boost::asio::steady_timer timer_;
  std::uint64_t jitter_;
};

class LocalLayer {
 public:
  // `closing` is the client's: set by close() on any thread, after which nothing is answered
  // here but kClosed.
  LocalLayer(boost::asio::io_context& io, const ClientOptions& options, MapTracker& maps,
             const std::atomic<bool>& closing);
  LocalLayer(const LocalLayer&) = delete;
  LocalLayer& operator=(const LocalLayer&) = delete;

  // False when the layer can do nothing (kReport, no cache, no breaker, no metrics, no leases):
  // requests are then not copied for it.
  bool active() const { return active_; }
  // The client's per-call deadline, for lease requests and probes.
  std::uint64_t timeout_ns() const { return timeout_ns_; }
  boost::asio::io_context& io() const { return io_; }

  // ---- any thread --------------------------------------------------------------------------

  // What the layer answers before a request is sent: the blocked cache's denial, units of a
  // running lease, or the failure policy's decision when the owner's node is taken as down;
  // nullopt: send it. REQUIRES: not a probe; `hash` is the key's, routed to `owner`.
  // After close(): kClosed. With kReport and the owner down: kUnavailable at once.
  std::optional<Result<Decision>> answer(const AcquireRequest& request, const KeyHash& hash,
                                         const OwnerGroup& owner);
  // Whether answer() would answer (a look, nothing decided or counted).
  bool answers(const AcquireRequest& request, const KeyHash& hash, const OwnerGroup& owner);
  // The owner's answer to `request` (or why there is none): a denial with a finite retry_after
  // enters the blocked cache, and a failure of the owner becomes the failure policy's decision.
  // Decisions made locally pass unchanged.
  void settle(const AcquireRequest& request, Result<Decision>& result);
  // A call to the node of `health` (null: none known) was answered, or failed as the owner's
  // failures do: its breaker counts it, and opens after ClientOptions::breaker_failures
  // failures in a row. A batch's frame counts once, whatever its items.
  void note_call(NodeHealth* health, bool failed);
  // Whether a call's failure is its owner's (a timeout, a connection failure, UNAVAILABLE).
  static bool owner_failure(const Status& status);
  // settle(), then the result is counted (metrics); `started_ns` (monotonic_now_ns(), 0:
  // unknown) gives the latency of a decision the cluster made.
  void finish(const AcquireRequest& request, Result<Decision>& result, std::uint64_t started_ns);
  // Counts a result for metrics().
  void count(const AcquireRequest& request, const Result<Decision>& result,
             std::uint64_t started_ns);
  // The units of a lease request for `request` (routed to `owner`, on its way to the cluster),
  // or 0: none asked.
  std::uint32_t lease_request(const AcquireRequest& request, const KeyHash& hash,
                              const OwnerGroup& owner);
  // RESET of `key`: the cache forgets it, and its leases end (units leased of it would come on
  // top of the fresh count).
  void forget(std::string_view key, const KeyHash& hash);
  // The layer's share of ClientCounters and ClientMetrics.
  void add_counters(ClientCounters& sum) const;
  ClientMetrics metrics() const;

  // ---- I/O thread --------------------------------------------------------------------------

  // A lease request for `request` was answered `answer` (NodeConnection's observer).
  void on_leased(const AcquireRequest& request, const protocol::AcquireResult& answer,
                 std::uint64_t started_ns, NodeHealth* health);
  // The client is closing: timers and probes stop, nothing is given back any more.
  void close();
  bool closed() const { return closed_; }
  // A probe found the node of a breaker answering again.
  void node_up() {
    node_up_events_.fetch_add(1, std::memory_order_relaxed);
    nodes_down_.fetch_sub(1, std::memory_order_relaxed);
  }
  // The node of an open breaker left the map: no longer down, though nothing answered.
  void node_left_down() { nodes_down_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  class GiveBackSink final : public ReplySink {
   public:
    explicit GiveBackSink(LocalLayer& layer) : layer_(layer) { scratch_.reserve(1); }
    void on_reply(std::uint32_t, const protocol::Frame& reply) override;
    void on_failure(std::uint32_t, const Status&) override {}

   private:
    LocalLayer& layer_;
    std::vector<protocol::AcquireResult> scratch_;  // I/O thread
  };

  // The failure policy's decision for `request`; nullopt when the policy is kReport.
  std::optional<Decision> policy_answer(const AcquireRequest& request, std::uint64_t fingerprint,
                                        std::uint64_t now_ns);
  // A node's breaker opened (any thread): probes it on the I/O thread until it answers.
  void node_down(NodeHealth& health);
  // I/O thread: the next probe of the node, after its backoff.
  void schedule_probe(NodeHealth& health);
  // I/O thread: the lease timer fires when the earliest running lease ends.
  void arm_lease_timer(std::uint64_t until_ns);
  void on_lease_timer();
  // I/O thread: gives `ended`'s units back to the key's owner (one give-back item).
  void give_back(const EndedLease& ended);

  boost::asio::io_context& io_;
  const ClientOptions& options_;
  MapTracker& maps_;
  const std::atomic<bool>& closing_;
  const std::uint64_t timeout_ns_;
  // The local layer's wall clock (blocked-until times, the local windows).
  const Clock& clock_;
  const bool active_;
  bool closed_ = false;  // I/O thread: close() ran

  BlockedCache blocked_;
  FallbackLimiter fallback_;
  Metrics metrics_;
  std::atomic<std::uint64_t> blocked_hits_{0};
  std::atomic<std::uint64_t> fallback_decisions_{0};
  std::atomic<std::uint64_t> node_down_events_{0};
  std::atomic<std::uint64_t> node_up_events_{0};
  // Breakers open now: +1 when one opens, -1 when it closes or its node leaves the map.
  std::atomic<std::int64_t> nodes_down_{0};
  // I/O thread: one prober per node whose breaker ever opened.
  std::vector<std::unique_ptr<NodeProber>> probers_;

  // Leases (client/lease_table.h). The table is any thread's; the timer the I/O thread's. Their
  // times are on ClientOptions::clock when one is given (a test's), else on the monotonic
  // clock: a step of the wall clock must not stretch a lease past its window.
  const Clock& lease_clock_;
  const LeasePolicy lease_policy_;
  LeaseTable leases_;
  boost::asio::steady_timer lease_timer_;
  net::HandlerSlot lease_timer_slot_;
  std::uint64_t lease_timer_at_ns_ = 0;  // I/O thread: when it fires (client clock); 0: not armed
  GiveBackSink give_back_sink_{*this};
  std::atomic<std::uint64_t> lease_decisions_{0};
  std::atomic<std::uint64_t> leases_granted_{0};
  std::atomic<std::uint64_t> leased_units_{0};
  std::atomic<std::uint64_t> returned_units_{0};
  std::atomic<std::uint64_t> credited_units_{0};
};

}  // namespace sluice::client::detail
