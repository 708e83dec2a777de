#include "client/client.h"

#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "client/client_impl.h"
#include "client/node_connection.h"
#include "client/router.h"
#include "cluster/cluster_map.h"
#include "cluster/ring.h"
#include "core/key_hash.h"
#include "net/host_port.h"
#include "protocol/cluster_messages.h"
#include "protocol/messages.h"

namespace sluice::client {

namespace asio = boost::asio;
using detail::Completion;
using detail::NodeConnection;
using detail::ReplySink;
using detail::unexpected_reply;
using protocol::Frame;
using protocol::Opcode;

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kInvalidRule:
      return "invalid_rule";
    case ErrorCode::kInvalidKey:
      return "invalid_key";
    case ErrorCode::kNoMemory:
      return "no_memory";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kConnectionFailed:
      return "connection_failed";
    case ErrorCode::kServerError:
      return "server_error";
    case ErrorCode::kProtocolError:
      return "protocol_error";
    case ErrorCode::kClosed:
      return "closed";
    case ErrorCode::kOverloaded:
      return "overloaded";
    case ErrorCode::kUnauthenticated:
      return "unauthenticated";
    case ErrorCode::kNotOwner:
      return "not_owner";
    case ErrorCode::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

std::string Status::to_string() const {
  std::string out(error_code_name(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

namespace {

// A sync call's sink: the caller blocks in wait() until the I/O thread finishes it. The
// notify happens under the mutex, so the caller cannot return (destroying the sink) before
// the I/O thread is done touching it.
template <typename T>
class SyncCall : public ReplySink {
 public:
  // With `run_io` (connect() on an external io_context that nobody runs yet), runs it while
  // waiting; the connection's own timeout ends the wait.
  Result<T> wait(asio::io_context* run_io = nullptr) {
    std::unique_lock lock(mu_);
    while (!result_.has_value()) {
      if (run_io == nullptr) {
        cv_.wait(lock, [&] { return result_.has_value(); });
        break;
      }
      lock.unlock();
      if (run_io->stopped()) run_io->restart();
      run_io->run_one_for(std::chrono::milliseconds(10));
      lock.lock();
    }
    return std::move(*result_);
  }
  void finish(Result<T> result) {
    std::lock_guard lock(mu_);
    result_.emplace(std::move(result));
    cv_.notify_one();
  }
  void on_failure(std::uint32_t, const Status& status) override { finish(Result<T>(status)); }

 protected:
  ~SyncCall() = default;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Result<T>> result_;
};

class PingCall final : public SyncCall<std::chrono::nanoseconds> {
 public:
  PingCall() : start_ns_(monotonic_now_ns()) {}
  void on_reply(std::uint32_t, const Frame& reply) override {
    if (reply.header.opcode != Opcode::kPing) return finish(unexpected_reply("PING"));
    finish(std::chrono::nanoseconds(monotonic_now_ns() - start_ns_));
  }

 private:
  std::uint64_t start_ns_;
};

// A RESET reply's status, with the epoch its node decided by.
struct ResetOutcome {
  protocol::ResetStatus status = protocol::ResetStatus::kAbsent;
  std::uint64_t epoch = 0;
};

class ResetCall final : public SyncCall<ResetOutcome> {
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

class StatsCall final : public SyncCall<std::vector<Stat>> {
 public:
  void on_reply(std::uint32_t, const Frame& reply) override {
    std::vector<protocol::StatEntry> entries;
    if (reply.header.opcode != Opcode::kStats ||
        !protocol::parse_stats_reply(reply.body, entries)) {
      return finish(unexpected_reply("STATS"));
    }
    std::vector<Stat> stats;
    stats.reserve(entries.size());
    for (protocol::StatEntry& e : entries) stats.push_back(Stat{std::move(e.name), e.value});
    finish(std::move(stats));
  }
};

class ClusterCall final : public SyncCall<protocol::ClusterMapMessage> {
 public:
  void on_reply(std::uint32_t, const Frame& reply) override {
    protocol::ClusterMapMessage map;
    if (reply.header.opcode != Opcode::kCluster ||
        !protocol::parse_cluster_reply(reply.body, map)) {
      return finish(unexpected_reply("CLUSTER"));
    }
    finish(std::move(map));
  }
};

class ReloadCall final : public SyncCall<ReloadOutcome> {
 public:
  void on_reply(std::uint32_t, const Frame& reply) override {
    protocol::ReloadReply answer;
    if (reply.header.opcode != Opcode::kReload ||
        !protocol::parse_reload_reply(reply.body, answer)) {
      return finish(unexpected_reply("RELOAD"));
    }
    ReloadOutcome outcome;
    outcome.epoch = answer.epoch;
    outcome.refusal.assign(answer.message);
    finish(std::move(outcome));
  }
};

class DrainCall final : public SyncCall<ReloadOutcome> {
 public:
  void on_reply(std::uint32_t, const Frame& reply) override {
    protocol::ReloadReply answer;
    if (reply.header.opcode != Opcode::kDrain || !protocol::parse_drain_reply(reply.body, answer)) {
      return finish(unexpected_reply("DRAIN"));
    }
    ReloadOutcome outcome;
    outcome.epoch = answer.epoch;
    outcome.refusal.assign(answer.message);
    finish(std::move(outcome));
  }
};

// Queues a node-level request whose reply goes to `call`; on failure nothing was queued.
template <typename Encode>
Status start_call(NodeConnection& connection, ReplySink& call, Encode encode) {
  Completion completion;
  completion.sink = &call;
  return connection.submit(encode, completion);
}

void encode_stats(protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
  protocol::encode_stats_request(out, id, framing);
}

void encode_reload(protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
  protocol::encode_reload_request(out, id, framing);
}

// "replication.<peer>.<field>" counters, by peer in the order first seen. Ids may hold dots:
// the field is what follows the last one.
std::vector<ReplicationLag> replication_lag(const std::vector<Stat>& stats) {
  constexpr std::string_view kPrefix = "replication.";
  std::vector<ReplicationLag> out;
  for (const Stat& stat : stats) {
    const std::string_view name = stat.name;
    if (!name.starts_with(kPrefix)) continue;
    const std::string_view rest = name.substr(kPrefix.size());
    const std::size_t dot = rest.rfind('.');
    if (dot == std::string_view::npos || dot == 0) continue;
    const std::string_view peer = rest.substr(0, dot);
    const std::string_view field = rest.substr(dot + 1);
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const ReplicationLag& lag) { return lag.peer == peer; });
    if (it == out.end()) {
      out.push_back(ReplicationLag{std::string(peer)});
      it = out.end() - 1;
    }
    if (field == "records") {
      it->records = stat.value;
    } else if (field == "lag_ms") {
      it->lag_ms = stat.value;
    } else if (field == "up") {
      it->up = stat.value != 0;
    }
  }
  return out;
}

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

// Opens once; wait() returns after that. Same notify-under-mutex rule as SyncCall.
class Latch {
 public:
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_one();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

constexpr unsigned kMaxConnectionsPerShard = 1024;
// Request ids are 32-bit and index each connection's pending ring: keep far below that.
constexpr std::size_t kMaxInFlight = std::size_t{1} << 24;

std::uint64_t to_ns(std::chrono::milliseconds ms) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(ms).count());
}

// "HOST:PORT" to an endpoint: IP addresses as they are, names through the resolver (which
// blocks the calling thread for the lookup).
Result<asio::ip::tcp::endpoint> resolve(asio::io_context& io, std::string_view address) {
  const std::optional<net::HostPort> parsed = net::parse_host_port(address);
  if (!parsed) {
    return Status(ErrorCode::kInvalidArgument,
                  "expected HOST:PORT, got \"" + std::string(address) + "\"");
  }
  const std::string& host = parsed->host;
  const std::uint16_t port = parsed->port;
  boost::system::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(host, ec);
  if (!ec) return asio::ip::tcp::endpoint(ip, port);
  asio::ip::tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec || endpoints.empty()) {
    return Status(ErrorCode::kConnectionFailed,
                  "cannot resolve " + std::string(address) + ": " + ec.message());
  }
  return endpoints.begin()->endpoint();
}

// Whether a node other than the seed's that fails at connect() fails it: only when the
// options are wrong for it (a refused token) or it is not Sluice. A node that is down is not
// the client's fault: its keys fail until it answers.
bool fails_connect(const Status& status) {
  return status.code() == ErrorCode::kUnauthenticated || status.code() == ErrorCode::kProtocolError;
}

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
      clock(options.clock != nullptr ? *options.clock : SystemClock::instance()),
      local_layer(options.failure_policy != FailurePolicy::kReport || options.blocked_keys != 0 ||
                  options.breaker_failures != 0 || options.metrics ||
                  (options.lease_duration.count() != 0 && options.lease_keys != 0)),
      blocked(options.blocked_keys),
      fallback(options.fallback_keys, options.gateways),
      lease_clock(options.clock != nullptr ? *options.clock : MonotonicClock::instance()),
      lease_policy{options.lease_keys == 0 ? 0 : to_ns(options.lease_duration),
                   std::max<std::uint32_t>(options.lease_threshold, 1), options.gateways},
      leases(lease_policy.lease_ns == 0 ? 0 : options.lease_keys),
      lease_timer(io) {
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
  // Its own copy of the list: the timer's walk over snapshot() may be under way further up the
  // stack.
  std::vector<NodeConnection*> all;
  {
    std::lock_guard lock(connections_mu);
    for (auto& c : connections) all.push_back(c.get());
  }
  for (NodeConnection* c : all) c->shut_down();  // fails a refresh under way, which wakes waiters
  timer.cancel();
  lease_timer.cancel();
  lease_timer_at_ns = 0;
  cancel_probes();
  batches.for_each([](detail::AsyncBatch& batch) { batch.cancel_pause(); });
  {
    std::lock_guard lock(map_mu);
    ++map_events;
  }
  map_cv.notify_all();
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
  config.map_epoch = &map_epoch;
  config.epoch_floor = &epoch_floor;
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
    if (retired_pending && armed.load(std::memory_order_acquire) && !closed) {
      busy = !close_retired() || busy;
    }
    if (busy) arm_timer();  // not after a callback's close(): see arm_timer()
  }));
}

// ---- Impl: routing and calls --------------------------------------------------------------

namespace {

// Router versions, unique in the process: a thread's cache entry can never match a router of
// another client, even one at the address of a client destroyed since.
std::atomic<std::uint64_t> router_versions{0};

// One router per thread, of the client it last served.
struct CachedRouter {
  std::uint64_t version = 0;  // 0: empty
  std::shared_ptr<const detail::Router> router;
};
thread_local CachedRouter cached;

}  // namespace

void Client::Impl::publish(std::shared_ptr<const detail::Router> next) {
  std::lock_guard lock(router_mu);
  router = std::move(next);
  router_version.store(router_versions.fetch_add(1, std::memory_order_relaxed) + 1,
                       std::memory_order_release);
}

const detail::Router& Client::Impl::cached_router() {
  // A version read before the router: a publish() in between leaves an older version beside
  // the newer router, and the next call takes the router again.
  const std::uint64_t version = router_version.load(std::memory_order_acquire);
  if (cached.version != version || version == 0) {
    cached.router = current_router();
    cached.version = version;
  }
  return *cached.router;
}

Status Client::Impl::check_key(std::string_view key, const detail::NodeLimits& limits) {
  if (key.empty()) return Status(ErrorCode::kInvalidKey, "key is empty");
  if (key.size() > limits.max_key) {
    return Status(ErrorCode::kInvalidKey, "key is " + std::to_string(key.size()) +
                                              " bytes, the server's max key is " +
                                              std::to_string(limits.max_key));
  }
  return Status();
}

Status Client::Impl::submit_acquire(const AcquireRequest& request, AcquireCallback* done,
                                    BatchCallback* batch_done, bool probe, bool checked_locally) {
  const std::shared_ptr<const detail::Router> current = current_router();
  const bool keep =
      !probe && (current->clustered() || local_layer || request.failure_policy.has_value());
  if (keep && request.key.size() > detail::ResendCopy::kKeyBytes) {
    // A key too long for the connection's copy: a batch keeps it, so that a REDIRECT or an
    // UNAVAILABLE can send it again and the local layer can settle its answer.
    batches.take(/*one_item=*/true).run_one(request, probe, done, batch_done);
    return Status();
  }
  if (request.key.empty()) return Status(ErrorCode::kInvalidKey, "key is empty");
  const KeyHash hash = hash_key(request.key);
  const std::size_t owner = current->route(hash);
  if (owner == detail::Router::kNoOwner) {
    return Status(ErrorCode::kUnavailable,
                  "no active node in the cluster map of epoch " + std::to_string(current->epoch()));
  }
  if (Status key_ok = check_key(request.key, current->owner(owner).limits); !key_ok.ok()) {
    return key_ok;
  }
  if (keep && !checked_locally && answers_locally(request, hash, current->owner(owner))) {
    // The blocked cache or a down node may answer it here: a one-item batch asks, and answers
    // on the I/O thread either way.
    batches.take(/*one_item=*/true).run_one(request, probe, done, batch_done);
    return Status();
  }
  NodeConnection* connection = current->connection(owner);
  if (connection == nullptr) {
    note_call(current->owner(owner).health, true);
    return current->owner(owner).unreachable;
  }
  // A hot key asks for a lease with this request (which pays its cost from the grant); a kept
  // request's key fits the connection's copy (a longer one went to a batch above).
  const std::uint32_t lease_units =
      keep && !probe ? lease_request(request, hash, current->owner(owner)) : 0;
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
  if (!queued.ok() && owner_failure(queued)) note_call(connection->health(), true);
  return queued;
}

Result<Decision> Client::Impl::acquire_sync(const AcquireRequest& request) {
  if ((local_layer || closing.load(std::memory_order_relaxed)) && !request.key.empty()) {
    // Answered here when it can be, on the calling thread: no hop to the I/O thread.
    const detail::Router& current = cached_router();
    const KeyHash hash = hash_key(request.key);
    const std::size_t owner = current.route(hash);
    if (owner != detail::Router::kNoOwner &&
        check_key(request.key, current.owner(owner).limits).ok()) {
      if (std::optional<Result<Decision>> local =
              local_answer(request, hash, current.owner(owner))) {
        count(request, *local, 0);
        return std::move(*local);
      }
    }
  }
  DecisionWaiter waiter;
  AcquireCallback done = [&waiter](Result<Decision> r) { waiter.set(std::move(r)); };
  if (Status queued = submit_acquire(request, &done, nullptr, false, /*checked_locally=*/true);
      !queued.ok()) {
    Result<Decision> refused(std::move(queued));
    finish(request, refused, 0);
    return refused;
  }
  return waiter.wait();
}

Result<bool> Client::Impl::reset(std::string_view key) {
  const KeyHash hash = hash_key(key);
  blocked.unblock_key(detail::blocked_key_tag(hash));
  // The key starts afresh at its owner: units this client leased of it would come on top.
  leases.forget_key(key);
  const std::uint64_t deadline = monotonic_now_ns() + timeout_ns;
  std::uint64_t jitter = deadline | 1;
  bool redirected = false;
  for (;;) {
    const std::shared_ptr<const detail::Router> current = current_router();
    const std::size_t owner = current->route(hash);
    if (owner == detail::Router::kNoOwner) {
      return Status(ErrorCode::kUnavailable, "no active node in the cluster map of epoch " +
                                                 std::to_string(current->epoch()));
    }
    if (Status key_ok = check_key(key, current->owner(owner).limits); !key_ok.ok()) return key_ok;
    // After a REDIRECT, a new owner that cannot be reached is reported as such.
    const auto unreachable = [&](const Status& why) {
      if (!redirected || why.code() != ErrorCode::kConnectionFailed) return why;
      return Status(ErrorCode::kNotOwner,
                    "redirected to " + current->owner(owner).node + ", which " + why.message());
    };
    NodeConnection* connection = current->connection(owner);
    if (connection == nullptr) return unreachable(current->owner(owner).unreachable);
    ResetCall call;
    Completion completion;
    completion.sink = &call;
    completion.deadline_ns = deadline;
    Status queued = connection->submit(
        [key](protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
          const std::string_view keys[1] = {key};
          protocol::encode_reset_request(out, id, keys, framing);
        },
        completion);
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
        if (outcome->epoch > current->epoch()) wait_for_epoch(outcome->epoch, deadline);
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

// ---- Impl: the cluster --------------------------------------------------------------------

detail::NodeLink& Client::Impl::add_link(std::string id, std::string address) {
  auto link = std::make_unique<detail::NodeLink>();
  link->id = std::move(id);
  link->address = std::move(address);
  link->limits = detail::NodeLimits{info.max_frame, info.max_key, info.max_batch, 0};
  Result<asio::ip::tcp::endpoint> endpoint = resolve(io, link->address);
  if (!endpoint.ok()) {
    link->unreachable = Status(ErrorCode::kConnectionFailed, endpoint.status().message());
  } else {
    // Shard-aware, the public port carries only the first HELLO; keys go to the shards.
    const unsigned publics = options.shard_aware ? 1 : options.connections_per_shard;
    for (unsigned k = 0; k < publics; ++k) {
      link->publics.push_back(&add_connection(link->address, *endpoint, protocol::kPublicPort));
      link->publics.back()->set_health(link->health.get());
      link->publics.back()->begin_connect();
    }
  }
  links.push_back(std::move(link));
  return *links.back();
}

bool Client::Impl::learn_hello(detail::NodeLink& link) {
  if (link.hello_known || link.publics.empty() || !link.publics.front()->ready()) return false;
  const protocol::HelloReply hello = link.publics.front()->hello();
  link.limits = detail::NodeLimits{hello.max_frame, hello.max_key, hello.max_batch, hello.version};
  link.hello_known = true;
  if (options.shard_aware && !hello.shard_ports.empty() && link.shards.empty()) {
    const asio::ip::address address = link.publics.front()->config().endpoint.address();
    const std::string host = address.to_string();
    for (std::size_t i = 0; i < hello.shard_ports.size(); ++i) {
      const asio::ip::tcp::endpoint endpoint(address, hello.shard_ports[i]);
      auto& group = link.shards.emplace_back();
      for (unsigned k = 0; k < options.connections_per_shard; ++k) {
        group.push_back(&add_connection(net::format_host_port(host, hello.shard_ports[i]), endpoint,
                                        static_cast<std::uint16_t>(i)));
        group.back()->set_health(link.health.get());
        group.back()->begin_connect();  // all handshakes overlap
      }
    }
  }
  return true;
}

detail::NodeLink* Client::Impl::link_of(const NodeConnection& connection) {
  for (auto& link : links) {
    for (const NodeConnection* c : link->publics) {
      if (c == &connection) return link.get();
    }
    for (const auto& shard : link->shards) {
      for (const NodeConnection* c : shard) {
        if (c == &connection) return link.get();
      }
    }
  }
  return nullptr;
}

bool Client::Impl::adopt(cluster::ClusterMap map, NodeConnection* via,
                         std::optional<std::size_t> self) {
  if (current_map && map.epoch() <= current_map->epoch()) return false;
  // A node outside any cluster that has joined one: its link becomes the answering node's.
  if (via != nullptr && self && *self < map.nodes().size()) {
    if (detail::NodeLink* from = link_of(*via); from != nullptr && from->id.empty()) {
      from->id = map.nodes()[*self].id;
      from->address = map.nodes()[*self].address;
    }
  }
  const cluster::Ring& ring = map.ring();
  std::vector<const detail::NodeLink*> next(ring.nodes().size(), nullptr);
  for (std::size_t i = 0; i < next.size(); ++i) {
    const cluster::ClusterNode& node =
        map.nodes()[map.node_index(static_cast<cluster::NodeIndex>(i))];
    detail::NodeLink* link = nullptr;
    for (auto& l : links) {
      if (l->id == node.id && l->address == node.address) link = l.get();
    }
    if (link == nullptr) {
      link = &add_link(node.id, node.address);
    } else if (link->retired) {
      // Back in the ring: reconnect at once, as for a new node.
      link->retired = false;
      for (NodeConnection* c : link->publics) c->begin_connect();
      for (const auto& shard : link->shards) {
        for (NodeConnection* c : shard) c->begin_connect();
      }
    }
    next[i] = link;
  }
  // Nodes out of the ring get no new calls; their connections close once the calls in flight
  // on them are answered (a REDIRECT then sends an item on) or time out. The seed's public
  // connection stays: ping(), stats() and cluster() use it.
  for (auto& l : links) {
    if (l->retired || std::find(next.begin(), next.end(), l.get()) != next.end()) continue;
    if (!l->publics.empty() && l->publics.front() == control) continue;
    l->retired = true;
    retired_pending = true;
  }
  ring_links = std::move(next);
  const std::uint64_t epoch = map.epoch();
  current_map = std::move(map);
  rebuild_router();
  map_epoch.store(epoch, std::memory_order_relaxed);
  if (epoch_floor.load(std::memory_order_relaxed) < epoch) {
    epoch_floor.store(epoch, std::memory_order_relaxed);
  }
  if (retired_pending && armed.load(std::memory_order_acquire)) arm_timer();
  return true;
}

void Client::Impl::rebuild_router() {
  if (current_map) {
    publish(detail::Router::for_cluster(*control, *current_map, ring_links, options.shard_aware));
  } else {
    publish(detail::Router::for_node(*control, *links.front(), options.shard_aware));
  }
}

bool Client::Impl::close_retired() {
  bool all_closed = true;
  for (auto& link : links) {
    if (!link->retired) continue;
    for (NodeConnection* c : link->publics) all_closed = c->close_if_idle() && all_closed;
    for (const auto& shard : link->shards) {
      for (NodeConnection* c : shard) all_closed = c->close_if_idle() && all_closed;
    }
  }
  retired_pending = !all_closed;
  return all_closed;
}

void Client::Impl::request_refresh(NodeConnection& via) {
  if (closed) return;
  if (refresh_via != nullptr) {  // one at a time: the next one goes when this one ends
    refresh_again = &via;
    return;
  }
  {
    std::lock_guard lock(map_mu);
    refreshing = true;
  }
  refresh_via = &via;
  Completion completion;
  completion.sink = &refresh_sink;
  Status queued = via.submit(
      [](protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
        protocol::encode_cluster_request(out, id, framing);
      },
      completion);
  if (!queued.ok()) on_refresh_failure();
}

void Client::Impl::on_refresh_reply(const Frame& reply) {
  protocol::ClusterMapMessage message;
  if (reply.header.opcode != Opcode::kCluster ||
      !protocol::parse_cluster_reply(reply.body, message)) {
    return on_refresh_failure();
  }
  if (message.epoch != 0 || !message.nodes.empty()) {
    Expected<cluster::ClusterMap> map = detail::map_from_message(message);
    if (!map) return on_refresh_failure();
    std::optional<std::size_t> self;
    if (message.self != protocol::kNotAMember) self = message.self;
    if (adopt(std::move(map).value(), refresh_via, self)) {
      map_refreshes.fetch_add(1, std::memory_order_relaxed);
    }
  }
  end_refresh();
}

void Client::Impl::on_refresh_failure() { end_refresh(); }

void Client::Impl::end_refresh() {
  refresh_via = nullptr;
  NodeConnection* again = std::exchange(refresh_again, nullptr);
  {
    std::lock_guard lock(map_mu);
    refreshing = false;
    ++map_events;
  }
  map_cv.notify_all();
  const std::uint64_t have = map_epoch.load(std::memory_order_relaxed);
  if (again != nullptr && !closed && epoch_floor.load(std::memory_order_relaxed) > have) {
    // A newer epoch was seen while this refresh was under way and it did not bring it.
    request_refresh(*again);
  } else {
    // The next reply above the map in force starts a refresh again (this one may have failed).
    epoch_floor.store(have, std::memory_order_relaxed);
  }
  waking.swap(map_waiters);
  for (detail::AsyncBatch* batch : waking) batch->on_map();  // may wait again: map_waiters
  waking.clear();
}

bool Client::Impl::wait_for_map(detail::AsyncBatch& batch) {
  if (closed || refresh_via == nullptr) return false;
  map_waiters.push_back(&batch);
  return true;
}

void Client::Impl::wait_for_epoch(std::uint64_t epoch, std::uint64_t deadline_ns) {
  std::unique_lock lock(map_mu);
  const std::uint64_t events = map_events;
  const std::chrono::steady_clock::time_point until{std::chrono::nanoseconds(deadline_ns)};
  map_cv.wait_until(lock, until, [&] {
    return map_epoch.load(std::memory_order_relaxed) >= epoch || !refreshing ||
           map_events != events;
  });
}

void Client::Impl::catch_up() {
  if (closed) return;
  bool learned = false;
  for (auto& link : links) learned = learn_hello(*link) || learned;
  if (learned) rebuild_router();
  const std::uint64_t missed = missed_epoch.load(std::memory_order_relaxed);
  if (missed > epoch_floor.load(std::memory_order_relaxed)) {
    epoch_floor.store(missed, std::memory_order_relaxed);
    request_refresh(*control);
  }
}

void Client::Impl::on_newer_epoch(NodeConnection& connection, std::uint64_t epoch) {
  if (!armed.load(std::memory_order_acquire)) {
    std::uint64_t seen = missed_epoch.load(std::memory_order_relaxed);
    while (epoch > seen && !missed_epoch.compare_exchange_weak(seen, epoch)) {
    }
    return;
  }
  if (closed || epoch <= epoch_floor.load(std::memory_order_relaxed)) return;
  epoch_floor.store(epoch, std::memory_order_relaxed);  // once per epoch, not per reply
  request_refresh(connection);
}

void Client::Impl::on_resend_needed(const AcquireRequest& request, std::uint64_t deadline_ns,
                                    const protocol::AcquireResult& answer,
                                    std::uint64_t reply_epoch, AcquireCallback* done,
                                    BatchCallback* batch_done) {
  batches.take(/*one_item=*/true)
      .resume_one(request, deadline_ns, answer, reply_epoch, done, batch_done);
}

void Client::Impl::on_ready(NodeConnection& connection) {
  if (!armed.load(std::memory_order_acquire) || closed) return;
  detail::NodeLink* link = link_of(connection);
  if (link != nullptr && link->publics.front() == &connection && learn_hello(*link)) {
    rebuild_router();
  }
}

// ---- Client -------------------------------------------------------------------------------

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::connect_on(ClientOptions options,
                                                   asio::io_context* external) {
  if (options.servers.empty()) {
    return Status(ErrorCode::kInvalidArgument, "no servers given");
  }
  if (options.timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return Status(ErrorCode::kInvalidArgument, "timeouts must be positive");
  }
  // Deadlines are counted in nanoseconds: a larger timeout would overflow them.
  options.timeout = std::min(options.timeout, kMaxTimeout);
  options.connect_timeout = std::min(options.connect_timeout, kMaxTimeout);
  if (options.max_in_flight == 0 || options.max_in_flight > kMaxInFlight) {
    return Status(ErrorCode::kInvalidArgument,
                  "max_in_flight must be 1.." + std::to_string(kMaxInFlight));
  }
  if (options.connections_per_shard == 0 ||
      options.connections_per_shard > kMaxConnectionsPerShard) {
    return Status(ErrorCode::kInvalidArgument,
                  "connections_per_shard must be 1.." + std::to_string(kMaxConnectionsPerShard));
  }
  // Refused rather than cut: a cut token is a wrong one. The message never shows the token.
  if (options.auth_token.size() > protocol::kMaxTokenLength) {
    return Status(
        ErrorCode::kInvalidArgument,
        "auth_token is longer than " + std::to_string(protocol::kMaxTokenLength) + " bytes");
  }
  if (options.gateways == 0 || options.gateways > 65535) {
    return Status(ErrorCode::kInvalidArgument, "gateways must be 1..65535");
  }
  if (options.fallback_keys == 0) {
    return Status(ErrorCode::kInvalidArgument, "fallback_keys must be at least 1");
  }
  if (options.lease_duration.count() < 0 || options.lease_duration > std::chrono::minutes(1)) {
    return Status(ErrorCode::kInvalidArgument, "lease_duration must be 0..60s");
  }
  for (const std::string& server : options.servers) {
    if (!net::parse_host_port(server)) {
      return Status(ErrorCode::kInvalidArgument, "expected HOST:PORT, got \"" + server + "\"");
    }
  }
  auto impl = std::make_unique<Impl>(std::move(options), external);
  const ClientOptions& opts = impl->options;

  // The seed: the first server that answers HELLO.
  Status last(ErrorCode::kConnectionFailed, "no server answered");
  NodeConnection* public_port = nullptr;
  asio::ip::tcp::endpoint public_endpoint;
  for (const std::string& server : opts.servers) {
    Result<asio::ip::tcp::endpoint> endpoint = resolve(impl->io, server);
    if (!endpoint.ok()) {
      last = endpoint.status();
      continue;
    }
    NodeConnection& candidate = impl->add_connection(server, *endpoint, protocol::kPublicPort);
    if (Status ready = impl->wait_ready(candidate); !ready.ok()) {
      last = ready;
      continue;  // the failed connection stays owned by impl, idle
    }
    public_port = &candidate;
    public_endpoint = *endpoint;
    impl->info.endpoint = server;
    break;
  }
  if (public_port == nullptr) return last;

  const protocol::HelloReply hello = public_port->hello();
  impl->info.node_id = hello.node_id;
  impl->info.shard_ports = hello.shard_ports;
  impl->info.max_frame = hello.max_frame;
  impl->info.max_key = hello.max_key;
  impl->info.max_batch = hello.max_batch;
  impl->control = public_port;
  {
    auto seed = std::make_unique<detail::NodeLink>();
    seed->address = impl->info.endpoint;
    seed->publics.push_back(public_port);
    if (!opts.shard_aware) {
      for (unsigned k = 1; k < opts.connections_per_shard; ++k) {
        seed->publics.push_back(
            &impl->add_connection(impl->info.endpoint, public_endpoint, protocol::kPublicPort));
        seed->publics.back()->begin_connect();
      }
    }
    for (NodeConnection* c : seed->publics) c->set_health(seed->health.get());
    impl->links.push_back(std::move(seed));
    impl->learn_hello(*impl->links.front());  // its shard connections start connecting
  }

  // The seed's map: a node outside any cluster is the only node; a member names the others. A
  // node of an older protocol knows no CLUSTER and is outside any cluster.
  Result<protocol::ClusterMapMessage> message{protocol::ClusterMapMessage{}};
  if (hello.version >= detail::kFirstClusterVersion) {
    ClusterCall call;
    Completion completion;
    completion.sink = &call;
    Status queued = public_port->submit(
        [](protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
          protocol::encode_cluster_request(out, id, framing);
        },
        completion);
    if (!queued.ok()) return queued;
    message = call.wait(impl->owned_io ? nullptr : &impl->io);
    if (!message.ok()) return message.status();
  }
  if (message->epoch != 0 || !message->nodes.empty()) {
    Expected<cluster::ClusterMap> map = detail::map_from_message(*message);
    if (!map) {
      return Status(ErrorCode::kProtocolError, "the cluster map from " + impl->info.endpoint +
                                                   " is not valid: " + map.error());
    }
    std::optional<std::size_t> self;
    if (message->self != protocol::kNotAMember) self = message->self;
    impl->adopt(std::move(map).value(), public_port, self);
  }

  // Every other node's public port, then every shard: all connect at once (eager), so that
  // no call pays for a handshake and every key goes straight to its shard.
  std::vector<bool> up(impl->links.size(), true);
  for (std::size_t l = 1; l < impl->links.size(); ++l) {
    detail::NodeLink& link = *impl->links[l];
    if (link.retired || link.publics.empty()) {
      up[l] = false;
      continue;
    }
    Status ready = impl->wait_ready(*link.publics.front());
    if (!ready.ok() && fails_connect(ready)) return ready;
    up[l] = ready.ok();
    if (ready.ok()) impl->learn_hello(link);
  }
  for (std::size_t l = 0; l < impl->links.size(); ++l) {
    if (!up[l]) continue;
    detail::NodeLink& link = *impl->links[l];
    std::vector<NodeConnection*> all(link.publics.begin(), link.publics.end());
    for (const auto& shard : link.shards) all.insert(all.end(), shard.begin(), shard.end());
    for (NodeConnection* c : all) {
      Status ready = impl->wait_ready(*c);
      // The seed's node must be whole, as a single node always had to be.
      if (!ready.ok() && (l == 0 || fails_connect(ready))) return ready;
      if (!ready.ok()) break;
    }
  }
  if (external != nullptr && external->stopped()) external->restart();
  impl->rebuild_router();
  impl->armed.store(true, std::memory_order_release);
  asio::post(impl->io, [raw = impl.get()] { raw->catch_up(); });
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Result<std::unique_ptr<Client>> Client::connect(ClientOptions options) {
  return connect_on(std::move(options), nullptr);
}

Result<std::unique_ptr<Client>> Client::connect(ClientOptions options, asio::io_context& io) {
  return connect_on(std::move(options), &io);
}

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
  impl_->finish(request, refused, 0);
  asio::post(impl_->io, [done = std::move(done), refused = std::move(refused)]() mutable {
    done(std::move(refused));
  });
}

void Client::acquire_async(std::string_view key, const Rule& rule, std::uint32_t cost,
                           AcquireCallback done) {
  acquire_async(AcquireRequest{key, rule, cost, false}, std::move(done));
}

void Client::acquire_batch(std::span<const AcquireRequest> items,
                           std::vector<Result<Decision>>& results) {
  Latch latch;
  acquire_batch_async(items, [&results, &latch](std::span<const Result<Decision>> answered) {
    results.assign(answered.begin(), answered.end());
    latch.open();
  });
  latch.wait();
}

void Client::acquire_batch_async(std::span<const AcquireRequest> items, BatchCallback done) {
  impl_->batch_async(items, /*probe=*/false, done);
}

void Client::probe_batch_async(std::span<const AcquireRequest> items, BatchCallback done) {
  impl_->batch_async(items, /*probe=*/true, done);
}

std::vector<Result<Decision>> Client::acquire_batch(std::span<const AcquireRequest> items) {
  std::vector<Result<Decision>> results;
  acquire_batch(items, results);
  return results;
}

Result<bool> Client::reset(std::string_view key) { return impl_->reset(key); }

Result<std::chrono::nanoseconds> Client::ping() {
  PingCall call;
  Completion completion;
  completion.sink = &call;
  Status queued = impl_->control->submit(
      [](protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
        protocol::encode_ping(out, id, std::span<const std::uint8_t>(), false, framing);
      },
      completion);
  if (!queued.ok()) return queued;
  return call.wait();
}

Result<std::vector<Stat>> Client::stats() {
  StatsCall call;
  Completion completion;
  completion.sink = &call;
  Status queued = impl_->control->submit(
      [](protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
        protocol::encode_stats_request(out, id, framing);
      },
      completion);
  if (!queued.ok()) return queued;
  return call.wait();
}

Result<ClusterInfo> Client::cluster() {
  // A node of an older protocol is outside any cluster and knows no CLUSTER.
  if (impl_->control->hello().version < detail::kFirstClusterVersion) return ClusterInfo{};
  ClusterCall call;
  Completion completion;
  completion.sink = &call;
  Status queued = impl_->control->submit(
      [](protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
        protocol::encode_cluster_request(out, id, framing);
      },
      completion);
  if (!queued.ok()) return queued;
  Result<protocol::ClusterMapMessage> message = call.wait();
  if (!message.ok()) return message.status();
  ClusterInfo out;
  out.epoch = message->epoch;
  if (message->epoch == 0 && message->nodes.empty()) return out;
  Expected<cluster::ClusterMap> map = detail::map_from_message(*message);
  if (!map) {
    return Status(ErrorCode::kProtocolError,
                  "the cluster map from " + impl_->info.endpoint + " is not valid: " + map.error());
  }
  const cluster::Ring& ring = map->ring();
  out.ring_version = ring.params().hash_version;
  out.partition_bits = ring.params().partition_bits;
  out.partitions = ring.partition_count();
  out.vnodes_per_node = ring.params().vnodes_per_node;
  std::vector<std::uint32_t> primaries(ring.nodes().size(), 0);
  std::vector<std::uint32_t> replicas(ring.nodes().size(), 0);
  for (const cluster::PartitionOwners& owners : ring.partitions()) {
    if (owners.primary != cluster::kNoNode) ++primaries[owners.primary];
    if (owners.replica != cluster::kNoNode) ++replicas[owners.replica];
  }
  for (const cluster::ClusterNode& node : map->nodes()) {
    ClusterNodeInfo info;
    info.id = node.id;
    info.address = node.address;
    info.state = std::string(cluster::node_state_name(node.state));
    if (const std::optional<cluster::NodeIndex> index = ring.find(node.id)) {
      info.primary_partitions = primaries[*index];
      info.replica_partitions = replicas[*index];
    }
    out.nodes.push_back(std::move(info));
  }
  if (message->self != protocol::kNotAMember) out.self = message->self;

  // Every node's STATS at once, over the client's connection to it.
  const std::shared_ptr<const detail::Router> router = impl_->current_router();
  std::vector<std::unique_ptr<StatsCall>> calls(out.nodes.size());
  for (std::size_t i = 0; i < out.nodes.size(); ++i) {
    ClusterNodeInfo& node = out.nodes[i];
    Status why;
    NodeConnection* connection = router->clustered() ? router->node_control(node.id, why) : nullptr;
    if (connection == nullptr) {
      node.stats_status =
          why.ok() ? Status(ErrorCode::kConnectionFailed, "the client routes to no node " + node.id)
                   : why;
      continue;
    }
    calls[i] = std::make_unique<StatsCall>();
    if (Status queued = start_call(*connection, *calls[i], encode_stats); !queued.ok()) {
      node.stats_status = queued;
      calls[i].reset();
    }
  }
  for (std::size_t i = 0; i < out.nodes.size(); ++i) {
    if (!calls[i]) continue;
    Result<std::vector<Stat>> stats = calls[i]->wait();
    if (!stats.ok()) {
      out.nodes[i].stats_status = stats.status();
      continue;
    }
    out.nodes[i].replication = replication_lag(*stats);
  }
  return out;
}

Result<ReloadOutcome> Client::reload() {
  ReloadCall call;
  if (Status queued = start_call(*impl_->control, call, encode_reload); !queued.ok()) {
    return queued;
  }
  Result<ReloadOutcome> outcome = call.wait();
  if (!outcome.ok()) return outcome.status();
  outcome->node_id = impl_->info.node_id;
  outcome->address = impl_->info.endpoint;
  return outcome;
}

Result<std::vector<ReloadOutcome>> Client::reload_all() {
  const std::shared_ptr<const detail::Router> router = impl_->current_router();
  if (!router->clustered()) {
    Result<ReloadOutcome> one = reload();
    if (!one.ok() && one.code() == ErrorCode::kClosed) return one.status();
    if (one.ok()) return std::vector<ReloadOutcome>{std::move(*one)};
    ReloadOutcome failed;
    failed.node_id = impl_->info.node_id;
    failed.address = impl_->info.endpoint;
    failed.status = one.status();
    return std::vector<ReloadOutcome>{std::move(failed)};
  }
  const cluster::ClusterMap& map = *router->map();
  const std::vector<std::string>& ids = map.ring().nodes();
  std::vector<ReloadOutcome> out(ids.size());
  std::vector<std::unique_ptr<ReloadCall>> calls(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    out[i].node_id = ids[i];
    out[i].address = map.nodes()[map.node_index(static_cast<cluster::NodeIndex>(i))].address;
    Status why;
    NodeConnection* connection = router->node_control(ids[i], why);
    if (connection == nullptr) {
      out[i].status = why;
      continue;
    }
    calls[i] = std::make_unique<ReloadCall>();
    if (Status queued = start_call(*connection, *calls[i], encode_reload); !queued.ok()) {
      out[i].status = queued;
      calls[i].reset();
    }
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!calls[i]) continue;
    Result<ReloadOutcome> answer = calls[i]->wait();
    if (!answer.ok()) {
      out[i].status = answer.status();
      continue;
    }
    out[i].epoch = answer->epoch;
    out[i].refusal = std::move(answer->refusal);
  }
  for (const ReloadOutcome& outcome : out) {
    if (outcome.status.code() == ErrorCode::kClosed) return outcome.status;
  }
  return out;
}

Result<ReloadOutcome> Client::drain(std::string_view node_id) {
  const std::shared_ptr<const detail::Router> router = impl_->current_router();
  if (!router->clustered()) {
    return Status(ErrorCode::kInvalidArgument,
                  "the seed is not a cluster member: no node to drain");
  }
  const cluster::ClusterNode* node = router->map()->find(node_id);
  if (node == nullptr) {
    return Status(ErrorCode::kInvalidArgument, "no node '" + std::string(node_id) +
                                                   "' in the cluster map of epoch " +
                                                   std::to_string(router->map()->epoch()));
  }
  Status why;
  NodeConnection* connection = router->node_control(node->id, why);
  if (connection == nullptr) return why;
  DrainCall call;
  const std::string id(node_id);
  if (Status queued = start_call(
          *connection, call,
          [&id](protocol::Bytes& out, std::uint32_t request, const protocol::Framing& framing) {
            protocol::encode_drain_request(out, request, id, framing);
          });
      !queued.ok()) {
    return queued;
  }
  Result<ReloadOutcome> outcome = call.wait();
  if (!outcome.ok()) return outcome.status();
  outcome->node_id = node->id;
  outcome->address = node->address;
  return outcome;
}

std::uint64_t Client::cluster_epoch() const {
  return impl_->map_epoch.load(std::memory_order_relaxed);
}

std::size_t Client::node_count() const { return impl_->current_router()->node_count(); }

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
  sum.map_refreshes = impl_->map_refreshes.load(std::memory_order_relaxed);
  sum.redirects_followed = impl_->redirects_followed.load(std::memory_order_relaxed);
  sum.unavailable_retries = impl_->unavailable_retries.load(std::memory_order_relaxed);
  sum.blocked_cache_hits = impl_->blocked_hits.load(std::memory_order_relaxed);
  sum.fallback_decisions = impl_->fallback_decisions.load(std::memory_order_relaxed);
  sum.node_down_events = impl_->node_down_events.load(std::memory_order_relaxed);
  sum.node_up_events = impl_->node_up_events.load(std::memory_order_relaxed);
  sum.lease_decisions = impl_->lease_decisions.load(std::memory_order_relaxed);
  sum.leases = impl_->leases_granted.load(std::memory_order_relaxed);
  sum.leased_units = impl_->leased_units.load(std::memory_order_relaxed);
  sum.returned_units = impl_->returned_units.load(std::memory_order_relaxed);
  sum.credited_units = impl_->credited_units.load(std::memory_order_relaxed);
  return sum;
}

ClientMetrics Client::metrics() const {
  ClientMetrics out = impl_->metrics.snapshot();
  out.node_down_events = impl_->node_down_events.load(std::memory_order_relaxed);
  out.node_up_events = impl_->node_up_events.load(std::memory_order_relaxed);
  return out;
}

const ServerInfo& Client::server_info() const { return impl_->info; }
const ClientOptions& Client::options() const { return impl_->options; }

}  // namespace sluice::client
