// Internal: the state behind a Client. It owns the I/O thread (or runs on the caller's
// io_context), every connection, the batch pool and the client-wide limits, and puts the
// client's parts together:
//   MapTracker  (client/map_tracker.h)  node links, the cluster map, epochs, refresh, routers;
//   LocalLayer  (client/local_layer.h)  blocked cache, breakers, failure policies, leases,
//                                       metrics;
//   AsyncBatch  (client/async_batch.h)  batches and the single calls that must go again;
//   SeedFinder  (client/seed_finder.h)  a client that no seed answered at connect() looking
//                                       for one in the background;
// and the acquire path itself (client/client.cpp). The admin calls are client/admin_calls.cpp,
// connect() is client/connect.cpp. Which thread owns what is said member by member.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/async_batch.h"
#include "client/client.h"
#include "client/local_layer.h"
#include "client/map_tracker.h"
#include "client/node_connection.h"
#include "client/router.h"
#include "client/seed_finder.h"
#include "core/key_hash.h"
#include "net/handler_slot.h"

namespace sluice::client {

namespace detail {

// The options connect() accepts, or why not (kInvalidArgument): every bound of ClientOptions
// checked in one place. Clamps the timeouts to kMaxTimeout.
Status check_options(ClientOptions& options);

}  // namespace detail

struct Client::Impl final : detail::ConnectionObserver, detail::ConnectionFactory {
  Impl(ClientOptions opts, boost::asio::io_context* external);
  ~Impl();

  // ---- connections -------------------------------------------------------------------------

  // ConnectionFactory: every connection lives until ~Impl.
  detail::NodeConnection& add_connection(std::string name, boost::asio::ip::tcp::endpoint endpoint,
                                         std::uint16_t expected_shard) override;
  // Waits for the handshake; with an external io_context, by running it.
  Status wait_ready(detail::NodeConnection& connection);
  // The I/O side: fails everything in flight, closes every connection, stops the timers and
  // ends what waits for a map or a pause. May run inside a callback.
  void shut_down();
  // I/O thread: the current list, copied into a reused vector (no allocation per tick).
  const std::vector<detail::NodeConnection*>& snapshot();
  // ConnectionFactory, I/O thread. One timer for the whole client: while anything is in flight
  // it ticks every `tick` and each connection fails what is past its deadline. No timer per
  // call.
  void arm_timer() override;

  // ---- the acquire path (client/client.cpp) ------------------------------------------------

  // Sends `request` (its key `hash`, valid and within `owner`'s max_key) to `owner` of
  // `router`, or lets a one-item batch take it: a key too long for a connection's copy, or one
  // the local layer answers (the answer then comes on the I/O thread). On failure `done` was not
  // moved from and nothing was queued. Exactly one of `done` and `batch_done` is given. `probe`
  // sends the ACQUIRE frame's bytes as a PING (probe_batch_async of one item). In a cluster or
  // with the local layer on, the connection keeps a copy of the request: a REDIRECT or an
  // UNAVAILABLE answer goes to on_resend_needed(), every other one through on_decided().
  // `checked_locally`: the caller asked the local layer already, and it had no answer.
  Status submit_routed(const detail::Router& router, std::size_t owner, const KeyHash& hash,
                       const AcquireRequest& request, AcquireCallback* done,
                       BatchCallback* batch_done, bool probe, bool checked_locally);
  // Validates, hashes and routes `request` once, then submit_routed(). Fails at once (nothing
  // queued) for an empty or too long key, a map without an active node, or an owner that cannot
  // be reached.
  Status submit_acquire(const AcquireRequest& request, AcquireCallback* done,
                        BatchCallback* batch_done = nullptr, bool probe = false);
  // Blocks the calling thread until the I/O thread answers (or answers here, from the local
  // layer, without a hop).
  Result<Decision> acquire_sync(const AcquireRequest& request);
  // async_batch.cpp.
  void batch_async(std::span<const AcquireRequest> items, bool probe, BatchCallback& done);
  // Follows a REDIRECT or an UNAVAILABLE on the calling thread (it may block).
  Result<bool> reset(std::string_view key);

  // ---- detail::ConnectionObserver, I/O thread ------------------------------------------------

  void on_newer_epoch(detail::NodeConnection& connection, std::uint64_t epoch) override {
    maps.on_newer_epoch(connection, epoch);
  }
  void on_ready(detail::NodeConnection& connection) override {
    maps.on_ready(connection);
    seeds.on_ready(connection);
  }
  void on_failed(detail::NodeConnection& connection) override { maps.on_failed(connection); }
  void on_resend_needed(const AcquireRequest& request, std::uint64_t deadline_ns,
                        const protocol::AcquireResult& answer, std::uint64_t reply_epoch,
                        AcquireCallback* done, BatchCallback* batch_done) override {
    batches.take(/*one_item=*/true)
        .resume_one(request, deadline_ns, answer, reply_epoch, done, batch_done);
  }
  void on_leased(const AcquireRequest& request, const protocol::AcquireResult& answer,
                 std::uint64_t started_ns, detail::NodeHealth* health) override {
    layer.on_leased(request, answer, started_ns, health);
  }
  void on_decided(const AcquireRequest& request, Result<Decision>& result, std::uint64_t started_ns,
                  detail::NodeHealth* health) override {
    layer.note_call(health, !result.ok() && detail::LocalLayer::owner_failure(result.status()));
    layer.finish(request, result, started_ns);
  }

  ClientOptions options;
  std::uint64_t timeout_ns = 0;
  std::unique_ptr<boost::asio::io_context> owned_io;  // null with an external io_context
  boost::asio::io_context& io;
  boost::asio::steady_timer timer;
  bool timer_armed = false;  // I/O thread
  // I/O thread: while the map has no active node, the next time the timer asks for a new one.
  std::uint64_t next_ringless_refresh_ns = 0;
  static constexpr std::uint64_t kRinglessRefreshNs = 100'000'000;
  bool closed = false;  // I/O thread: shut_down() ran; the timer stays off
  net::HandlerSlot timer_slot;
  std::chrono::milliseconds tick{10};
  detail::BatchPool batches;        // outlives the connections: failing them completes batches
  detail::InFlightLimit in_flight;  // outlives the connections, which share it
  std::vector<Result<Decision>> completed_results;  // I/O thread: the spare results vector
  std::mutex connections_mu;                        // guards the list; connections live until ~Impl
  std::vector<std::unique_ptr<detail::NodeConnection>> connections;
  std::vector<detail::NodeConnection*> io_connections;  // I/O thread: snapshot()'s buffer

  // Set by close() (any thread) and shut_down(): no call is answered locally after it.
  std::atomic<bool> closing{false};
  detail::MapTracker maps;
  detail::LocalLayer layer;
  detail::SeedFinder seeds;
  // Items of the acquire path sent again (any thread).
  std::atomic<std::uint64_t> redirects_followed{0};   // answered REDIRECT, sent to the new owner
  std::atomic<std::uint64_t> unavailable_retries{0};  // answered UNAVAILABLE, sent again

  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
  std::thread thread;
};

}  // namespace sluice::client
