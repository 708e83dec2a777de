#include "client/client.h"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "client/connection.h"
#include "client/router.h"
#include "core/key_hash.h"
#include "protocol/messages.h"

namespace sluice::client {

namespace asio = boost::asio;
using detail::Completion;
using detail::Connection;
using detail::ReplySink;
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

bool split_host_port(std::string_view text, std::string& host, std::uint16_t& port) {
  std::string_view host_part;
  std::string_view port_part;
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return false;
    }
    host_part = text.substr(1, close - 1);
    port_part = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return false;
    host_part = text.substr(0, colon);
    port_part = text.substr(colon + 1);
    if (host_part.find(':') != std::string_view::npos) return false;  // IPv6 needs brackets
  }
  if (host_part.empty() || port_part.empty()) return false;
  unsigned value = 0;
  const auto [end, ec] =
      std::from_chars(port_part.data(), port_part.data() + port_part.size(), value);
  if (ec != std::errc() || end != port_part.data() + port_part.size() || value == 0 ||
      value > 65535) {
    return false;
  }
  host.assign(host_part);
  port = static_cast<std::uint16_t>(value);
  return true;
}

namespace {

// A sync call's sink: the caller blocks in wait() until the I/O thread finishes it. The
// notify happens under the mutex, so the caller cannot return (destroying the sink) before
// the I/O thread is done touching it.
template <typename T>
class SyncCall : public ReplySink {
 public:
  Result<T> wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return result_.has_value(); });
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

Status unexpected_reply(std::string_view what) {
  return Status(ErrorCode::kProtocolError, "unexpected reply to " + std::string(what));
}

class PingCall final : public SyncCall<std::chrono::nanoseconds> {
 public:
  PingCall() : start_ns_(detail::steady_now_ns()) {}
  void on_reply(std::uint32_t, const Frame& reply) override {
    if (reply.header.opcode != Opcode::kPing) return finish(unexpected_reply("PING"));
    finish(std::chrono::nanoseconds(detail::steady_now_ns() - start_ns_));
  }

 private:
  std::uint64_t start_ns_;
};

class ResetCall final : public SyncCall<bool> {
 public:
  void on_reply(std::uint32_t, const Frame& reply) override {
    std::vector<protocol::ResetStatus> statuses;
    if (reply.header.opcode != Opcode::kReset ||
        !protocol::parse_reset_reply(reply.body, statuses) || statuses.size() != 1) {
      return finish(unexpected_reply("RESET"));
    }
    switch (statuses[0]) {
      case protocol::ResetStatus::kRemoved:
        return finish(true);
      case protocol::ResetStatus::kAbsent:
        return finish(false);
      case protocol::ResetStatus::kInvalidKey:
        return finish(Result<bool>(ErrorCode::kInvalidKey, "key is empty or too long"));
      case protocol::ResetStatus::kRedirect:
        return finish(Result<bool>(ErrorCode::kNotOwner, "the node does not own the key"));
      case protocol::ResetStatus::kUnavailable:
        return finish(Result<bool>(ErrorCode::kUnavailable, "the key's owner cannot serve it now"));
    }
    finish(unexpected_reply("RESET"));
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

// Bytes an ACQUIRE item takes on the wire beyond its key, rounded up (docs/PROTOCOL.md).
constexpr std::size_t kItemOverhead = 32;
constexpr std::size_t kFrameOverhead = 64;
constexpr unsigned kMaxConnectionsPerShard = 1024;
// Request ids are 32-bit and index each connection's pending ring: keep far below that.
constexpr std::size_t kMaxInFlight = std::size_t{1} << 24;

class AsyncBatch;

// Batches are pooled: a warm client reuses them and their vectors, so a batch call allocates
// nothing. Any thread takes one; the I/O thread gives it back after running its callback.
class BatchPool {
 public:
  explicit BatchPool(Client::Impl& impl) : impl_(impl) {}
  ~BatchPool();
  AsyncBatch& take();
  void give(AsyncBatch& batch);

 private:
  Client::Impl& impl_;
  std::mutex mu_;
  std::vector<std::unique_ptr<AsyncBatch>> all_;
  std::vector<AsyncBatch*> free_;
};

}  // namespace

struct Client::Impl {
  Impl(ClientOptions opts, asio::io_context* external)
      : options(std::move(opts)),
        owned_io(external == nullptr ? std::make_unique<asio::io_context>(1) : nullptr),
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
    std::vector<Connection*> all;
    {
      std::lock_guard lock(connections_mu);
      for (auto& c : connections) all.push_back(c.get());
    }
    for (Connection* c : all) c->shut_down();
    timer.cancel();
  }

  Connection& add_connection(std::string name, asio::ip::tcp::endpoint endpoint,
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
    auto connection = std::make_unique<Connection>(io, std::move(config), [this] { arm_timer(); });
    std::lock_guard lock(connections_mu);
    connections.push_back(std::move(connection));
    return *connections.back();
  }

  // Waits for the handshake; with an external io_context, by running it.
  Status wait_ready(Connection& connection) {
    return connection.wait_ready(options.connect_timeout, /*run_io=*/!owned_io);
  }

  // I/O thread: the current list, copied into a reused vector (no allocation per tick).
  const std::vector<Connection*>& snapshot() {
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
      if (ec == asio::error::operation_aborted) return;
      const std::uint64_t now = detail::steady_now_ns();
      bool busy = false;
      for (Connection* c : snapshot()) busy = c->expire(now) || busy;
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
    Connection& connection = router->connection(router->route(hash_key(request.key)));
    Completion completion;
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

  Result<Decision> acquire_sync(const AcquireRequest& request) {
    DecisionWaiter waiter;
    AcquireCallback done = [&waiter](Result<Decision> r) { waiter.set(std::move(r)); };
    if (Status queued = submit_acquire(request, &done); !queued.ok()) return queued;
    return waiter.wait();
  }

  void batch_async(std::span<const AcquireRequest> items, bool probe, BatchCallback& done);

  ClientOptions options;
  std::unique_ptr<asio::io_context> owned_io;  // null with an external io_context
  asio::io_context& io;
  asio::steady_timer timer;
  bool timer_armed = false;  // I/O thread
  bool closed = false;       // I/O thread: shut_down() ran; the timer stays off
  detail::HandlerSlot timer_slot;
  std::chrono::milliseconds tick{10};
  BatchPool batches;                // outlives the connections: failing them completes batches
  detail::InFlightLimit in_flight;  // outlives the connections, which share it
  std::vector<Result<Decision>> completed_results;  // I/O thread: the spare results vector
  std::mutex connections_mu;                        // guards the list; connections live until ~Impl
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<Connection*> io_connections;  // I/O thread: snapshot()'s buffer
  std::unique_ptr<detail::Router> router;
  ServerInfo info;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
};

namespace {

// One async batch: its items grouped by owner and cut into parts, one frame each, within the
// server's max_batch and max_frame. Results go back by item index. Completion is counted with
// one extra hold for the submitting thread, so the batch cannot finish (and be reused) while
// that thread still reads it; whoever drops the last hold completes it on the I/O thread.
class AsyncBatch final : public ReplySink {
 public:
  explicit AsyncBatch(Client::Impl& impl) : impl_(impl) {}

  // Plans, submits and arranges for `done` to run. The caller must not touch the batch after.
  void run(std::span<const AcquireRequest> items, bool probe, BatchCallback& done) {
    probe_ = probe;
    done_ = std::move(done);
    plan(items);
    outstanding_.store(parts_.size() + 1, std::memory_order_relaxed);
    for (std::uint32_t p = 0; p < parts_.size(); ++p) {
      Completion completion;
      completion.sink = this;
      completion.part = p;
      const Part part = parts_[p];
      Status queued =
          impl_.router->connection(part.owner)
              .submit([&](protocol::Bytes& out, std::uint32_t id) { encode(items, part, out, id); },
                      completion);
      if (!queued.ok()) on_failure(p, queued);
    }
    if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Every part was refused (or there were none): still answer on the I/O thread.
      asio::post(impl_.io, detail::in_slot(post_slot_, [this] { complete(); }));
    }
  }

  void on_reply(std::uint32_t part, const Frame& reply) override {
    const Part& p = parts_[part];
    const std::size_t count = p.end - p.begin;
    if (probe_) {
      const Result<Decision> echoed = detail::probe_echo(reply);
      if (!echoed.ok()) return on_failure(part, unexpected_reply("PING"));
      for (std::uint32_t i = p.begin; i < p.end; ++i) results_[order_[i]] = echoed;
    } else {
      if (reply.header.opcode != Opcode::kAcquire ||
          !protocol::parse_acquire_reply(reply.body, scratch_) || scratch_.size() != count) {
        return on_failure(part, unexpected_reply("ACQUIRE"));
      }
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint32_t item = order_[p.begin + i];
        results_[item] =
            detail::to_decision(scratch_[i], policies_[item].quota, policies_[item].window_ms);
      }
    }
    release();
  }
  void on_failure(std::uint32_t part, const Status& status) override {
    const Part& p = parts_[part];
    for (std::uint32_t i = p.begin; i < p.end; ++i) results_[order_[i]] = Result<Decision>(status);
    release();
  }

 private:
  struct Part {
    std::size_t owner = 0;    // the router's owner index
    std::uint32_t begin = 0;  // into order_
    std::uint32_t end = 0;
  };
  struct Policy {
    std::uint32_t quota = 0;
    std::uint64_t window_ms = 0;
  };

  void plan(std::span<const AcquireRequest> items) {
    detail::Router& router = *impl_.router;
    const ServerInfo& info = impl_.info;
    const auto rejected = static_cast<std::uint32_t>(router.size());
    results_.assign(items.size(), Result<Decision>(ErrorCode::kClosed, "not sent"));
    policies_.resize(items.size());
    owner_.resize(items.size());
    // A counting sort of item indices by owner, keeping item order within an owner.
    start_.assign(router.size() + 2, 0);
    for (std::size_t i = 0; i < items.size(); ++i) {
      policies_[i] = Policy{items[i].rule.limit, items[i].rule.period_ms};
      if (Status key_ok = impl_.check_key(items[i].key); !key_ok.ok()) {
        results_[i] = Result<Decision>(std::move(key_ok));
        owner_[i] = rejected;
      } else {
        owner_[i] = static_cast<std::uint32_t>(router.route(hash_key(items[i].key)));
      }
      ++start_[owner_[i] + 1];
    }
    for (std::size_t c = 1; c < start_.size(); ++c) start_[c] += start_[c - 1];
    order_.resize(items.size());
    next_.assign(start_.begin(), start_.end());
    for (std::size_t i = 0; i < items.size(); ++i) {
      order_[next_[owner_[i]]++] = static_cast<std::uint32_t>(i);
    }
    // Cut each owner's run into frames within the server's limits.
    const std::size_t max_items = std::max<std::size_t>(1, info.max_batch);
    const std::size_t max_bytes =
        info.max_frame > kFrameOverhead * 2 ? info.max_frame - kFrameOverhead : info.max_frame;
    parts_.clear();
    for (std::size_t c = 0; c < router.size(); ++c) {
      std::uint32_t i = start_[c];
      const std::uint32_t end = start_[c + 1];
      while (i < end) {
        Part part{c, i, i};
        std::size_t bytes = 0;
        while (part.end < end && part.end - part.begin < max_items) {
          const std::size_t item_bytes = items[order_[part.end]].key.size() + kItemOverhead;
          if (part.end > part.begin && bytes + item_bytes > max_bytes) break;
          bytes += item_bytes;
          ++part.end;
        }
        parts_.push_back(part);
        i = part.end;
      }
    }
  }

  // Runs under the connection's mutex, on the submitting thread.
  void encode(std::span<const AcquireRequest> items, const Part& part, protocol::Bytes& out,
              std::uint32_t id) {
    const std::size_t frame = protocol::begin_acquire_request(out, id);
    for (std::uint32_t k = part.begin; k < part.end; ++k) {
      const AcquireRequest& r = items[order_[k]];
      protocol::add_acquire_item(out, frame, protocol::AcquireItem{r.key, r.rule, r.cost, r.peek});
    }
    protocol::finish_acquire_request(out, frame);
    // A probe sends the same bytes as a PING, which the shard echoes without deciding.
    if (probe_) protocol::set_opcode(out, frame, Opcode::kPing);
  }

  void release() {
    if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) complete();
  }

  // I/O thread, once. The batch goes back to the pool before the callback runs, so a caller
  // that submits again from the callback (or as soon as it sees it) reuses it: the pool never
  // needs more batches than are in flight. The results move out of the batch (vectors
  // swapped, no copy) into a local that the callback's span points into: a batch completed
  // inside the callback (close() fails the others) cannot touch them. The batch takes the
  // I/O thread's spare vector instead, and the results' vector becomes the next spare.
  void complete() {
    const BatchCallback done = std::move(done_);
    done_ = nullptr;
    std::vector<Result<Decision>> results;
    results.swap(impl_.completed_results);  // empty if a completion up the stack holds it
    results.swap(results_);
    impl_.batches.give(*this);
    done(std::span<const Result<Decision>>(results));
    if (results.capacity() > impl_.completed_results.capacity()) {
      impl_.completed_results.swap(results);
    }
  }

  Client::Impl& impl_;
  bool probe_ = false;
  BatchCallback done_;
  std::atomic<std::size_t> outstanding_{0};
  std::vector<Result<Decision>> results_;
  std::vector<Policy> policies_;
  std::vector<std::uint32_t> owner_;  // planning scratch
  std::vector<std::uint32_t> start_;  // per owner: where its items start in order_
  std::vector<std::uint32_t> next_;
  std::vector<std::uint32_t> order_;  // item indices grouped by owner, then by part
  std::vector<Part> parts_;
  std::vector<protocol::AcquireResult> scratch_;  // I/O thread
  detail::HandlerSlot post_slot_;
};

BatchPool::~BatchPool() = default;

AsyncBatch& BatchPool::take() {
  std::lock_guard lock(mu_);
  if (free_.empty()) {
    all_.push_back(std::make_unique<AsyncBatch>(impl_));
    free_.reserve(all_.size());
    return *all_.back();
  }
  AsyncBatch* batch = free_.back();
  free_.pop_back();
  return *batch;
}

void BatchPool::give(AsyncBatch& batch) {
  std::lock_guard lock(mu_);
  free_.push_back(&batch);
}

}  // namespace

void Client::Impl::batch_async(std::span<const AcquireRequest> items, bool probe,
                               BatchCallback& done) {
  if (items.size() != 1) return batches.take().run(items, probe, done);
  // One item: a plain acquire whose callback takes a span of one; no batch state to touch.
  Status queued = submit_acquire(items[0], nullptr, &done, probe);
  if (queued.ok()) return;
  asio::post(io, [done = std::move(done), queued = std::move(queued)]() mutable {
    const Result<Decision> refused(std::move(queued));
    done(std::span<const Result<Decision>>(&refused, 1));
  });
}

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
  auto impl = std::make_unique<Impl>(std::move(options), external);
  const ClientOptions& opts = impl->options;

  Status last(ErrorCode::kConnectionFailed, "no server answered");
  Connection* public_port = nullptr;
  asio::ip::tcp::endpoint public_endpoint;
  for (const std::string& server : opts.servers) {
    std::string host;
    std::uint16_t port = 0;
    if (!split_host_port(server, host, port)) {
      return Status(ErrorCode::kInvalidArgument, "expected HOST:PORT, got \"" + server + "\"");
    }
    boost::system::error_code ec;
    asio::ip::tcp::resolver resolver(impl->io);
    const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (ec || endpoints.empty()) {
      last = Status(ErrorCode::kConnectionFailed, "cannot resolve " + server + ": " + ec.message());
      continue;
    }
    const asio::ip::tcp::endpoint endpoint = endpoints.begin()->endpoint();
    Connection& candidate = impl->add_connection(server, endpoint, protocol::kPublicPort);
    if (Status ready = impl->wait_ready(candidate); !ready.ok()) {
      last = ready;
      continue;  // the failed connection stays owned by impl, idle
    }
    public_port = &candidate;
    public_endpoint = endpoint;
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

  // owners[i]: the connections that carry owner i's keys.
  std::vector<std::vector<Connection*>> owners;
  const asio::ip::address address = public_endpoint.address();
  const std::string host = address.is_v6() ? "[" + address.to_string() + "]" : address.to_string();
  if (opts.shard_aware && !hello.shard_ports.empty()) {
    for (std::size_t i = 0; i < hello.shard_ports.size(); ++i) {
      const asio::ip::tcp::endpoint endpoint(address, hello.shard_ports[i]);
      auto& group = owners.emplace_back();
      for (unsigned k = 0; k < opts.connections_per_shard; ++k) {
        group.push_back(&impl->add_connection(host + ":" + std::to_string(hello.shard_ports[i]),
                                              endpoint, static_cast<std::uint16_t>(i)));
        group.back()->begin_connect();  // all handshakes overlap
      }
    }
  } else {
    auto& group = owners.emplace_back(1, public_port);
    for (unsigned k = 1; k < opts.connections_per_shard; ++k) {
      group.push_back(
          &impl->add_connection(impl->info.endpoint, public_endpoint, protocol::kPublicPort));
      group.back()->begin_connect();
    }
  }
  for (const auto& group : owners) {
    for (Connection* c : group) {
      if (Status ready = impl->wait_ready(*c); !ready.ok()) return ready;
    }
  }
  if (external != nullptr && external->stopped()) external->restart();
  impl->router = std::make_unique<detail::SingleNodeRouter>(*public_port, std::move(owners));
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

void Client::acquire_async(const AcquireRequest& request, AcquireCallback done) {
  Status queued = impl_->submit_acquire(request, &done);
  if (queued.ok()) return;
  // Refused before sending: still answer on the I/O thread, as promised.
  asio::post(impl_->io, [done = std::move(done), queued = std::move(queued)]() mutable {
    done(Result<Decision>(std::move(queued)));
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

Result<bool> Client::reset(std::string_view key) {
  if (Status key_ok = impl_->check_key(key); !key_ok.ok()) return key_ok;
  ResetCall call;
  Completion completion;
  completion.sink = &call;
  Connection& connection = impl_->router->connection(impl_->router->route(hash_key(key)));
  Status queued = connection.submit(
      [key](protocol::Bytes& out, std::uint32_t id) {
        const std::string_view keys[1] = {key};
        protocol::encode_reset_request(out, id, keys);
      },
      completion);
  if (!queued.ok()) return queued;
  return call.wait();
}

Result<std::chrono::nanoseconds> Client::ping() {
  PingCall call;
  Completion completion;
  completion.sink = &call;
  Status queued = impl_->router->control().submit(
      [](protocol::Bytes& out, std::uint32_t id) {
        protocol::encode_ping(out, id, std::span<const std::uint8_t>(), false);
      },
      completion);
  if (!queued.ok()) return queued;
  return call.wait();
}

Result<std::vector<Stat>> Client::stats() {
  StatsCall call;
  Completion completion;
  completion.sink = &call;
  Status queued = impl_->router->control().submit(
      [](protocol::Bytes& out, std::uint32_t id) { protocol::encode_stats_request(out, id); },
      completion);
  if (!queued.ok()) return queued;
  return call.wait();
}

void Client::close() {
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
  std::lock_guard lock(impl_->connections_mu);
  for (const auto& c : impl_->connections) {
    const ClientCounters one = c->counters();
    sum.timed_out += one.timed_out;
    sum.withdrawn += one.withdrawn;
    sum.late_replies += one.late_replies;
  }
  return sum;
}

const ServerInfo& Client::server_info() const { return impl_->info; }
const ClientOptions& Client::options() const { return impl_->options; }

}  // namespace sluice::client
