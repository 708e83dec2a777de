#include "client/client.h"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "client/client_impl.h"
#include "client/connection.h"
#include "client/router.h"
#include "core/key_hash.h"
#include "protocol/messages.h"

namespace sluice::client {

namespace asio = boost::asio;
using detail::Completion;
using detail::Connection;
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

constexpr unsigned kMaxConnectionsPerShard = 1024;
// Request ids are 32-bit and index each connection's pending ring: keep far below that.
constexpr std::size_t kMaxInFlight = std::size_t{1} << 24;

}  // namespace

Result<Decision> Client::Impl::acquire_sync(const AcquireRequest& request) {
  DecisionWaiter waiter;
  AcquireCallback done = [&waiter](Result<Decision> r) { waiter.set(std::move(r)); };
  if (Status queued = submit_acquire(request, &done); !queued.ok()) return queued;
  return waiter.wait();
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
