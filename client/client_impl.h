// Internal: the state behind a Client, shared by client.cpp (the calls, connecting) and
// async_batch.cpp (the batches). Which thread owns what is said member by member.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "client/async_batch.h"
#include "client/client.h"
#include "client/connection.h"
#include "client/router.h"
#include "core/key_hash.h"
#include "protocol/messages.h"

namespace sluice::client {

struct Client::Impl {
  Impl(ClientOptions opts, boost::asio::io_context* external)
      : options(std::move(opts)),
        owned_io(external == nullptr ? std::make_unique<boost::asio::io_context>(1) : nullptr),
        io(external == nullptr ? *owned_io : *external),
        timer(io),
        batches(*this),
        in_flight(options.max_in_flight) {
    const auto shortest = std::min(options.timeout, options.connect_timeout);
    tick = std::clamp<std::chrono::milliseconds>(shortest / 10, std::chrono::milliseconds(1),
                                                 std::chrono::milliseconds(10));
    io_connections.reserve(64);  // a node's shards and then some: ticks do not allocate
    if (owned_io) {
      work.emplace(io.get_executor());
      thread = std::thread([this] { io.run(); });
    }
  }

  ~Impl() {
    if (owned_io) {
      boost::asio::post(io, [this] {
        shut_down();
        io.stop();
      });
      thread.join();
      work.reset();
      io.restart();
    } else {
      shut_down();
      io.restart();
    }
    // Run what is still queued (aborted reads and writes, refusals posted to async callers)
    // while the connections are alive: handlers and their memory may point into them. Bounded,
    // in case an external io_context's owner keeps posting work of its own.
    for (int round = 0; round < 64 && io.poll() > 0; ++round) {
    }
  }

  // The I/O side: fails everything in flight, closes every connection, stops the timer. May
  // run inside a callback, hence its own copy of the list: the timer's walk over snapshot()
  // may be under way further up the stack.
  void shut_down() {
    closed = true;
    std::vector<detail::Connection*> all;
    {
      std::lock_guard lock(connections_mu);
      for (auto& c : connections) all.push_back(c.get());
    }
    for (detail::Connection* c : all) c->shut_down();
    timer.cancel();
  }

  detail::Connection& add_connection(std::string name, boost::asio::ip::tcp::endpoint endpoint,
                                     std::uint16_t expected_shard) {
    detail::ConnectionConfig config;
    config.name = std::move(name);
    config.endpoint = endpoint;
    config.expected_shard = expected_shard;
    config.client_name = options.client_name;
    config.auth_token = options.auth_token;
    config.timeout_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(options.timeout).count());
    config.connect_timeout_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(options.connect_timeout).count());
    config.in_flight_limit = &in_flight;
    auto connection =
        std::make_unique<detail::Connection>(io, std::move(config), [this] { arm_timer(); });
    std::lock_guard lock(connections_mu);
    connections.push_back(std::move(connection));
    return *connections.back();
  }

  // Waits for the handshake; with an external io_context, by running it.
  Status wait_ready(detail::Connection& connection) {
    return connection.wait_ready(options.connect_timeout, /*run_io=*/!owned_io);
  }

  // I/O thread: the current list, copied into a reused vector (no allocation per tick).
  const std::vector<detail::Connection*>& snapshot() {
    std::lock_guard lock(connections_mu);
    io_connections.clear();
    for (auto& c : connections) io_connections.push_back(c.get());
    return io_connections;
  }

  // I/O thread. One timer for the whole client: while anything is in flight it ticks every
  // `tick` and each connection fails what is past its deadline. No timer per call.
  void arm_timer() {
    if (timer_armed || closed) return;
    timer_armed = true;
    timer.expires_after(tick);
    timer.async_wait(detail::in_slot(timer_slot, [this](const boost::system::error_code& ec) {
      timer_armed = false;
      if (ec == boost::asio::error::operation_aborted) return;
      const std::uint64_t now = detail::steady_now_ns();
      bool busy = false;
      for (detail::Connection* c : snapshot()) busy = c->expire(now) || busy;
      if (busy) arm_timer();  // not after a callback's close(): see arm_timer()
    }));
  }

  Status check_key(std::string_view key) const {
    if (key.empty()) return Status(ErrorCode::kInvalidKey, "key is empty");
    if (key.size() > info.max_key) {
      return Status(ErrorCode::kInvalidKey, "key is " + std::to_string(key.size()) +
                                                " bytes, the server's max key is " +
                                                std::to_string(info.max_key));
    }
    return Status();
  }

  // On failure `done` was not moved from and nothing was queued. Exactly one of `done` and
  // `batch_done` is given.
  // `probe` sends the ACQUIRE frame's bytes as a PING (probe_batch_async of one item).
  Status submit_acquire(const AcquireRequest& request, AcquireCallback* done,
                        BatchCallback* batch_done = nullptr, bool probe = false) {
    if (Status key_ok = check_key(request.key); !key_ok.ok()) return key_ok;
    detail::Connection& connection = router->connection(router->route(hash_key(request.key)));
    detail::Completion completion;
    completion.callback = done;
    completion.batch_callback = batch_done;
    completion.probe = probe;
    completion.policy_quota = request.rule.limit;
    completion.policy_window_ms = request.rule.period_ms;
    return connection.submit(
        [&request, probe](protocol::Bytes& out, std::uint32_t id) {
          const std::size_t start = out.size();
          detail::encode_acquire(out, id, request);
          // The same bytes, sent as a PING: the shard echoes them without deciding.
          if (probe) protocol::set_opcode(out, start, protocol::Opcode::kPing);
        },
        completion);
  }

  // Blocks the calling thread until the I/O thread answers (client.cpp).
  Result<Decision> acquire_sync(const AcquireRequest& request);

  // async_batch.cpp.
  void batch_async(std::span<const AcquireRequest> items, bool probe, BatchCallback& done);

  ClientOptions options;
  std::unique_ptr<boost::asio::io_context> owned_io;  // null with an external io_context
  boost::asio::io_context& io;
  boost::asio::steady_timer timer;
  bool timer_armed = false;  // I/O thread
  bool closed = false;       // I/O thread: shut_down() ran; the timer stays off
  detail::HandlerSlot timer_slot;
  std::chrono::milliseconds tick{10};
  detail::BatchPool batches;        // outlives the connections: failing them completes batches
  detail::InFlightLimit in_flight;  // outlives the connections, which share it
  std::vector<Result<Decision>> completed_results;  // I/O thread: the spare results vector
  std::mutex connections_mu;                        // guards the list; connections live until ~Impl
  std::vector<std::unique_ptr<detail::Connection>> connections;
  std::vector<detail::Connection*> io_connections;  // I/O thread: snapshot()'s buffer
  std::unique_ptr<detail::Router> router;
  ServerInfo info;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
  std::thread thread;
};

}  // namespace sluice::client
