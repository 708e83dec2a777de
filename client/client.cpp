// The client's public calls and its acquire path: a key is validated, hashed and routed once,
// then answered by the local layer or sent to its owner's connection. Connecting is
// client/connect.cpp, the admin calls client/admin_calls.cpp, the cluster map
// client/map_tracker.cpp, the local layer client/local_layer.cpp and batches
// client/async_batch.cpp.
#include "client/client.h"

#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "client/client_impl.h"
#include "client/node_connection.h"
#include "client/router.h"
#include "client/sync_call.h"
#include "core/key_hash.h"
#include "protocol/messages.h"

namespace sluice::client {

namespace asio = boost::asio;
using detail::Completion;
using detail::NodeConnection;
using detail::unexpected_reply;
using protocol::Frame;
using protocol::Opcode;

namespace {

std::uint64_t to_ns(std::chrono::milliseconds ms) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(ms).count());
}

// A RESET reply's status, with the epoch its node decided by.
struct ResetOutcome {
  protocol::ResetStatus status = protocol::ResetStatus::kAbsent;
  std::uint64_t epoch = 0;
};

class ResetCall final : public detail::SyncCall<ResetOutcome> {
 public:
  void on_reply(std::uint32_t, const Frame& reply) override {
    std::vector<protocol::ResetStatus> statuses;
    if (reply.header.opcode != Opcode::kReset ||
        !protocol::parse_reset_reply(reply.body, statuses) || statuses.size() != 1) {
      return finish(unexpected_reply("RESET"));
    }
    finish(ResetOutcome{statuses[0], reply.header.epoch});
  }
};

// Blocks a sync acquire until its callback runs. Same notify-under-mutex rule as SyncCall.
class DecisionWaiter {
 public:
  void set(Result<Decision> result) {
    std::lock_guard lock(mu_);
    result_.emplace(std::move(result));
    cv_.notify_one();
  }
  Result<Decision> wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return result_.has_value(); });
    return std::move(*result_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Result<Decision>> result_;
};

}  // namespace

// ---- Impl: connections --------------------------------------------------------------------

Client::Impl::Impl(ClientOptions opts, asio::io_context* external)
    : options(std::move(opts)),
      timeout_ns(to_ns(options.timeout)),
      owned_io(external == nullptr ? std::make_unique<asio::io_context>(1) : nullptr),
      io(external == nullptr ? *owned_io : *external),
      timer(io),
      batches(*this),
      in_flight(options.max_in_flight),
      maps(io, options, *this),
      layer(io, options, maps, closing),
      seeds(io, options, maps, *this) {
  const auto shortest = std::min(options.timeout, options.connect_timeout);
  tick = std::clamp<std::chrono::milliseconds>(shortest / 10, std::chrono::milliseconds(1),
                                               std::chrono::milliseconds(10));
  io_connections.reserve(64);  // a node's shards and then some: ticks do not allocate
  if (owned_io) {
    work.emplace(io.get_executor());
    thread = std::thread([this] { io.run(); });
  }
}

Client::Impl::~Impl() {
  if (owned_io) {
    asio::post(io, [this] {
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
  // Run what is still queued (aborted reads, writes and pauses, refusals posted to async
  // callers) while the connections are alive: handlers and their memory may point into them.
  // Bounded, in case an external io_context's owner keeps posting work of its own.
  for (int round = 0; round < 64 && io.poll() > 0; ++round) {
  }
}

void Client::Impl::shut_down() {
  closed = true;
  closing.store(true, std::memory_order_relaxed);
  maps.close();
  layer.close();
  seeds.close();
  // Its own copy of the list: the timer's walk over snapshot() may be under way further up the
  // stack.
  std::vector<NodeConnection*> all;
  {
    std::lock_guard lock(connections_mu);
    for (auto& c : connections) all.push_back(c.get());
  }
  for (NodeConnection* c : all) c->shut_down();  // fails a refresh under way, which wakes waiters
  timer.cancel();
  batches.for_each([](detail::AsyncBatch& batch) { batch.cancel_pause(); });
  maps.end_waits();
}

NodeConnection& Client::Impl::add_connection(std::string name, asio::ip::tcp::endpoint endpoint,
                                             std::uint16_t expected_shard) {
  detail::ConnectionConfig config;
  config.name = std::move(name);
  config.endpoint = endpoint;
  config.expected_shard = expected_shard;
  config.client_name = options.client_name;
  config.auth_token = options.auth_token;
  config.timeout_ns = timeout_ns;
  config.connect_timeout_ns = to_ns(options.connect_timeout);
  config.in_flight_limit = &in_flight;
  config.map_epoch = &maps.map_epoch();
  config.epoch_floor = &maps.epoch_floor();
  config.observer = this;
  auto connection =
      std::make_unique<NodeConnection>(io, std::move(config), [this] { arm_timer(); });
  std::lock_guard lock(connections_mu);
  connections.push_back(std::move(connection));
  return *connections.back();
}

Status Client::Impl::wait_ready(NodeConnection& connection) {
  return connection.wait_ready(options.connect_timeout, /*run_io=*/!owned_io);
}

const std::vector<NodeConnection*>& Client::Impl::snapshot() {
  std::lock_guard lock(connections_mu);
  io_connections.clear();
  for (auto& c : connections) io_connections.push_back(c.get());
  return io_connections;
}

void Client::Impl::arm_timer() {
  if (timer_armed || closed) return;
  timer_armed = true;
  timer.expires_after(tick);
  timer.async_wait(net::in_slot(timer_slot, [this](const boost::system::error_code& ec) {
    timer_armed = false;
    if (ec == asio::error::operation_aborted) return;
    const std::uint64_t now = monotonic_now_ns();
    bool busy = false;
    for (NodeConnection* c : snapshot()) busy = c->expire(now) || busy;
    busy = maps.close_retired() || busy;
    if (maps.ringless()) {
      // No active node to route to: ask for a newer map every kRinglessRefresh until one has.
      if (now >= next_ringless_refresh_ns) {
        maps.refresh_from_any();
        next_ringless_refresh_ns = now + kRinglessRefreshNs;
      }
      busy = true;
    }
    if (busy) arm_timer();  // not after a callback's close(): see arm_timer()
  }));
}

// ---- Impl: the acquire path ---------------------------------------------------------------

Status Client::Impl::submit_acquire(const AcquireRequest& request, AcquireCallback* done,
                                    BatchCallback* batch_done, bool probe) {
  const std::shared_ptr<const detail::Router> current = maps.current_router();
  const bool keep =
      !probe && (current->clustered() || layer.active() || request.failure_policy.has_value());
  if (keep && request.key.size() > detail::ResendCopy::kKeyBytes) {
    // A key too long for the connection's copy: a batch keeps it, so that a REDIRECT or an
    // UNAVAILABLE can send it again and the local layer can settle its answer.
    batches.take(/*one_item=*/true).run_one(request, probe, done, batch_done);
    return Status();
  }
  if (request.key.empty()) return Status(ErrorCode::kInvalidKey, "key is empty");
  const KeyHash hash = hash_key(request.key);
  const std::size_t owner = current->route(hash);
  if (owner == detail::Router::kNoOwner) return detail::no_active_node(current->epoch());
  if (Status key_ok = detail::check_key(request.key, current->owner(owner).limits); !key_ok.ok()) {
    return key_ok;
  }
  return submit_routed(*current, owner, hash, request, done, batch_done, probe,
                       /*checked_locally=*/false);
}

Status Client::Impl::submit_routed(const detail::Router& router, std::size_t owner,
                                   const KeyHash& hash, const AcquireRequest& request,
                                   AcquireCallback* done, BatchCallback* batch_done, bool probe,
                                   bool checked_locally) {
  const bool keep =
      !probe && (router.clustered() || layer.active() || request.failure_policy.has_value());
  if (keep && (request.key.size() > detail::ResendCopy::kKeyBytes ||
               (!checked_locally && layer.answers(request, hash, router.owner(owner))))) {
    // A key too long for the connection's copy, or one the blocked cache, a lease or a down
    // node may answer here: a one-item batch takes it, and answers on the I/O thread either way.
    batches.take(/*one_item=*/true).run_one(request, probe, done, batch_done);
    return Status();
  }
  const detail::OwnerGroup& group = router.owner(owner);
  NodeConnection* connection = router.connection(owner);
  if (connection == nullptr) {
    layer.note_call(group.health, true);
    return group.unreachable;
  }
  // A hot key asks for a lease with this request (which pays its cost from the grant); a kept
  // request's key fits the connection's copy (a longer one went to a batch above).
  const std::uint32_t lease_units = keep ? layer.lease_request(request, hash, group) : 0;
  Completion completion;
  completion.lease_units = lease_units;
  completion.callback = done;
  completion.batch_callback = batch_done;
  completion.probe = probe;
  completion.policy_quota = request.rule.limit;
  completion.policy_window_ms = request.rule.period_ms;
  // The connection keeps a copy: in a cluster it hands a REDIRECT or an UNAVAILABLE answer to
  // on_resend_needed(), which sends it again, and every other answer goes through on_decided()
  // to the local layer.
  if (keep) completion.keep_request = &request;
  Status queued = connection->submit(
      [&request, probe, lease_units](protocol::Bytes& out, std::uint32_t id,
                                     const protocol::Framing& framing) {
        const std::size_t start = out.size();
        detail::encode_acquire(out, id, request, framing, lease_units);
        // The same bytes, sent as a PING: the shard echoes them without deciding.
        if (probe) protocol::set_opcode(out, start, protocol::Opcode::kPing);
      },
      completion);
  // Refused at once by a connection that is down (waiting to reconnect): the node's failure.
  if (!queued.ok() && detail::LocalLayer::owner_failure(queued)) {
    layer.note_call(connection->health(), true);
  }
  return queued;
}

Result<Decision> Client::Impl::acquire_sync(const AcquireRequest& request) {
  // Validated and routed once, by this thread's cached router (no lock, no reference count):
  // the same route serves the local layer and the send.
  const detail::Router& current = maps.cached_router();
  Status refusal;
  std::size_t owner = detail::Router::kNoOwner;
  KeyHash hash;
  if (request.key.empty()) {
    refusal = Status(ErrorCode::kInvalidKey, "key is empty");
  } else {
    hash = hash_key(request.key);
    owner = current.route(hash);
    if (owner == detail::Router::kNoOwner) {
      refusal = detail::no_active_node(current.epoch());
    } else {
      refusal = detail::check_key(request.key, current.owner(owner).limits);
    }
  }
  if (refusal.ok()) {
    // Answered here when it can be, on the calling thread: no hop to the I/O thread.
    if (std::optional<Result<Decision>> local = layer.answer(request, hash, current.owner(owner))) {
      layer.count(request, *local, 0);
      return std::move(*local);
    }
    DecisionWaiter waiter;
    AcquireCallback done = [&waiter](Result<Decision> r) { waiter.set(std::move(r)); };
    refusal = submit_routed(current, owner, hash, request, &done, nullptr, /*probe=*/false,
                            /*checked_locally=*/true);
    if (refusal.ok()) return waiter.wait();
  }
  Result<Decision> refused(std::move(refusal));
  layer.finish(request, refused, 0);
  return refused;
}

Result<bool> Client::Impl::reset(std::string_view key) {
  const KeyHash hash = hash_key(key);
  // The key starts afresh at its owner: this client's cache and leases forget it too.
  layer.forget(key, hash);
  const std::uint64_t deadline = monotonic_now_ns() + timeout_ns;
  std::uint64_t jitter = deadline | 1;
  bool redirected = false;
  for (;;) {
    const std::shared_ptr<const detail::Router> current = maps.current_router();
    const std::size_t owner = current->route(hash);
    if (owner == detail::Router::kNoOwner) {
      return Status(ErrorCode::kUnavailable, "no active node in the cluster map of epoch " +
                                                 std::to_string(current->epoch()));
    }
    if (Status key_ok = detail::check_key(key, current->owner(owner).limits); !key_ok.ok()) {
      return key_ok;
    }
    // After a REDIRECT, a new owner that cannot be reached is reported as such.
    const auto unreachable = [&](const Status& why) {
      if (!redirected || why.code() != ErrorCode::kConnectionFailed) return why;
      return Status(ErrorCode::kNotOwner,
                    "redirected to " + current->owner(owner).node + ", which " + why.message());
    };
    NodeConnection* connection = current->connection(owner);
    if (connection == nullptr) return unreachable(current->owner(owner).unreachable);
    ResetCall call;
    const Status queued = detail::start_call(
        *connection, call,
        [key](protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
          const std::string_view keys[1] = {key};
          protocol::encode_reset_request(out, id, keys, framing);
        },
        deadline);
    if (!queued.ok()) return unreachable(queued);
    Result<ResetOutcome> outcome = call.wait();
    if (!outcome.ok()) return unreachable(outcome.status());
    switch (outcome->status) {
      case protocol::ResetStatus::kRemoved:
        return true;
      case protocol::ResetStatus::kAbsent:
        return false;
      case protocol::ResetStatus::kInvalidKey:
        return Status(ErrorCode::kInvalidKey, "key is empty or too long");
      case protocol::ResetStatus::kRedirect:
        if (!current->clustered() || redirected) {
          return Status(ErrorCode::kNotOwner, "the node does not own the key (REDIRECT)");
        }
        redirected = true;
        redirects_followed.fetch_add(1, std::memory_order_relaxed);
        if (outcome->epoch > current->epoch()) maps.wait_for_epoch(outcome->epoch, deadline);
        continue;
      case protocol::ResetStatus::kUnavailable: {
        const std::uint64_t pause = detail::retry_pause_ns(jitter);
        if (!current->clustered() || monotonic_now_ns() + pause >= deadline) {
          return Status(ErrorCode::kUnavailable, "the key's owner cannot serve it now");
        }
        unavailable_retries.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::sleep_for(std::chrono::nanoseconds(pause));
        continue;
      }
    }
    return unexpected_reply("RESET");
  }
}

// ---- Client -------------------------------------------------------------------------------

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<Decision> Client::acquire(std::string_view key, const Rule& rule, std::uint32_t cost) {
  return impl_->acquire_sync(AcquireRequest{key, rule, cost, false});
}

Result<Decision> Client::peek(std::string_view key, const Rule& rule, std::uint32_t cost) {
  return impl_->acquire_sync(AcquireRequest{key, rule, cost, true});
}

Result<Decision> Client::acquire(const AcquireRequest& request) {
  return impl_->acquire_sync(request);
}

void Client::acquire_async(const AcquireRequest& request, AcquireCallback done) {
  Status queued = impl_->submit_acquire(request, &done);
  if (queued.ok()) return;
  // Refused before sending: still answer on the I/O thread, as promised.
  Result<Decision> refused(std::move(queued));
  impl_->layer.finish(request, refused, 0);
  asio::post(impl_->io, [done = std::move(done), refused = std::move(refused)]() mutable {
    done(std::move(refused));
  });
}

void Client::acquire_async(std::string_view key, const Rule& rule, std::uint32_t cost,
                           AcquireCallback done) {
  acquire_async(AcquireRequest{key, rule, cost, false}, std::move(done));
}

void Client::acquire_batch_async(std::span<const AcquireRequest> items, BatchCallback done) {
  impl_->batch_async(items, /*probe=*/false, done);
}

void Client::probe_batch_async(std::span<const AcquireRequest> items, BatchCallback done) {
  impl_->batch_async(items, /*probe=*/true, done);
}

Result<bool> Client::reset(std::string_view key) { return impl_->reset(key); }

std::uint64_t Client::cluster_epoch() const { return impl_->maps.epoch(); }

std::size_t Client::node_count() const { return impl_->maps.current_router()->node_count(); }

void Client::close() {
  impl_->closing.store(true, std::memory_order_relaxed);
  if (impl_->owned_io) {
    // Refused here, before close() returns: a call made after it must not reach the server
    // through a write the I/O thread has yet to start.
    {
      std::lock_guard lock(impl_->connections_mu);
      for (auto& c : impl_->connections) c->refuse_new();
    }
    asio::post(impl_->io, [impl = impl_.get()] { impl->shut_down(); });
  } else {
    impl_->shut_down();
  }
}

ClientCounters Client::counters() const {
  ClientCounters sum;
  {
    std::lock_guard lock(impl_->connections_mu);
    for (const auto& c : impl_->connections) {
      const ClientCounters one = c->counters();
      sum.timed_out += one.timed_out;
      sum.withdrawn += one.withdrawn;
      sum.late_replies += one.late_replies;
    }
  }
  sum.map_refreshes = impl_->maps.map_refreshes();
  sum.redirects_followed = impl_->redirects_followed.load(std::memory_order_relaxed);
  sum.unavailable_retries = impl_->unavailable_retries.load(std::memory_order_relaxed);
  impl_->layer.add_counters(sum);
  return sum;
}

ClientMetrics Client::metrics() const { return impl_->layer.metrics(); }

std::vector<NodeBreaker> Client::node_breakers() const {
  std::vector<NodeBreaker> out;
  const std::shared_ptr<const detail::Router> router = impl_->maps.current_router();
  if (router == nullptr) return out;
  // A node's shards are owners of their own that share its breaker: one entry per breaker.
  std::vector<const detail::NodeHealth*> seen;
  for (std::size_t i = 0; i < router->size(); ++i) {
    const detail::OwnerGroup& group = router->owner(i);
    if (group.health == nullptr ||
        std::find(seen.begin(), seen.end(), group.health) != seen.end()) {
      continue;
    }
    seen.push_back(group.health);
    out.push_back({group.node, group.health->down.load(std::memory_order_relaxed)});
  }
  return out;
}

ServerInfo Client::server_info() const { return impl_->maps.seed_info(); }
bool Client::seeded() const { return impl_->maps.seeded(); }
const ClientOptions& Client::options() const { return impl_->options; }

}  // namespace sluice::client
