#include "server/shard.h"
#include "log/log.h"

#include "net/asio.h"  // before any other Asio header

#include <fcntl.h>
#include <fmt/core.h>
#include <malloc.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <boost/asio/socket_base.hpp>
#include <cerrno>
#include <chrono>
#include <exception>
#include <system_error>
#include <utility>
#include <vector>

#include "server/socket_peer.h"

namespace sluice::server {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr auto kSweepInterval = std::chrono::nanoseconds(CounterTable::kSweepIntervalNs);
// Buffers given back by a shard's connections, at least, before it trims the allocator's heaps.
constexpr std::size_t kTrimAfterFreed = std::size_t{4} << 20;
// Inbox tasks handled per drain() before yielding to the connections of this shard.
constexpr int kDrainBudget = 256;
// Tasks and pending frames kept for reuse per shard, and the largest batch whose vectors are
// worth keeping (bigger ones are freed so the pool stays small).
constexpr std::size_t kMaxPooled = 1024;
constexpr std::size_t kMaxPooledItems = 512;
// Backoff after an accept error that refusing cannot clear, so the loop does not spin.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(20);
constexpr auto kAcceptLogInterval = std::chrono::seconds(1);

bool out_of_descriptors(const boost::system::error_code& ec) {
  return ec == boost::system::errc::too_many_files_open ||
         ec == boost::system::errc::too_many_files_open_in_system;
}

using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

[[noreturn]] void throw_bind_error(const boost::system::error_code& ec, std::string_view what,
                                   const asio::ip::address& address, std::uint16_t port) {
  throw std::system_error(std::error_code(ec.value(), std::system_category()),
                          fmt::format("cannot {} {}:{}", what, address.to_string(), port));
}

// Opens, binds and listens; throws std::system_error naming the address on failure.
std::uint16_t open_acceptor(tcp::acceptor& acceptor, const asio::ip::address& address,
                            std::uint16_t port, bool reuse_port) {
  const tcp::endpoint endpoint(address, port);
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (ec) throw_bind_error(ec, "open a socket for", address, port);
  acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec && reuse_port) acceptor.set_option(ReusePort(true), ec);
  if (ec) throw_bind_error(ec, "set socket options on", address, port);
  acceptor.bind(endpoint, ec);
  if (ec) throw_bind_error(ec, "bind", address, port);
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw_bind_error(ec, "listen on", address, port);
  const std::uint16_t bound = acceptor.local_endpoint(ec).port();
  if (ec) throw_bind_error(ec, "read the port of", address, port);
  return bound;
}

void log_exception(unsigned shard, std::string_view where, std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    log::error("shard", fmt::format("shard {}: {}: {}", shard, where, ex.what()));
  } catch (...) {
    log::error("shard", fmt::format("shard {}: {}: unknown exception", shard, where));
  }
}

}  // namespace

ServerContext::ServerContext() = default;
ServerContext::~ServerContext() = default;

void ServerContext::maybe_release() {
  if (shards_closed.load() != shard_count || tasks_in_flight.load() != 0) return;
  if (released.exchange(true)) return;
  for (auto& shard : shards) {
    Shard* s = shard.get();
    asio::post(s->io(), [s] { s->release_work(); });
  }
}

Shard::Shard(ServerContext& context, unsigned index)
    : context_(context),
      index_(index),
      io_(1),
      work_(asio::make_work_guard(io_)),
      engine_(context, index),
      dispatcher_(*this),
      replicator_(io_, engine_),
      sweep_timer_(io_),
      stop_timer_(io_),
      buffer_budget_(context.config.max_buffer_memory / context.shard_count),
      staging_(context.shard_count) {
  engine_.set_changes(&replicator_);
  if (context.engines.size() <= index) context.engines.resize(index + 1, nullptr);
  context.engines[index] = &engine_;
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

Shard::~Shard() {
  // Normally empty: shutdown waits for every task to come home. Free stragglers anyway (the
  // threads have exited, so this thread is the only one left).
  while (HandoverTask* task = inbox_.pop()) delete task;
  if (spare_fd_ >= 0) ::close(spare_fd_);
}

std::uint16_t Shard::listen_public(const asio::ip::address& address, std::uint16_t port) {
  public_acceptor_.emplace(io_);
  return open_acceptor(*public_acceptor_, address, port, /*reuse_port=*/true);
}

std::uint16_t Shard::listen_shard(const asio::ip::address& address, std::uint16_t port) {
  shard_acceptor_.emplace(io_);
  return open_acceptor(*shard_acceptor_, address, port, /*reuse_port=*/false);
}

void Shard::spawn() {
  auto on_exit = [this](const char* what) {
    return [this, what](std::exception_ptr e) {
      if (e) log_exception(index_, what, e);
    };
  };
  if (public_acceptor_) {
    asio::co_spawn(io_, accept_loop(*public_acceptor_, true), on_exit("public accept loop"));
  }
  if (shard_acceptor_) {
    asio::co_spawn(io_, accept_loop(*shard_acceptor_, false), on_exit("shard accept loop"));
  }
  asio::co_spawn(io_, sweep_loop(), on_exit("sweep loop"));
}

void Shard::run() {
  for (;;) {
    try {
      if (context_.config.busy_poll) {
        // Never sleeps: the shard keeps its core and skips the wake-up on every event.
        while (!io_.stopped()) io_.poll();
      } else {
        io_.run();
      }
      return;
    } catch (...) {
      // Handlers do not throw by design; if one does, log it and keep the shard serving.
      log_exception(index_, "event loop", std::current_exception());
    }
  }
}

void Shard::request_stop(bool graceful) {
  asio::post(io_, [this, graceful] { close_all(graceful); });
}

void Shard::release_work() { work_.reset(); }

void Shard::close_all(bool graceful) {
  const auto timeout = context_.config.shutdown_timeout;
  if (!graceful || timeout.count() == 0) {
    stopping_ = true;
    close_connections_now();
  } else if (!stopping_) {
    stopping_ = true;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    // close() removes the connection from the set, so work on a copy.
    const std::vector<SocketPeer*> open(connections_.begin(), connections_.end());
    for (SocketPeer* connection : open) connection->shut_down(deadline);
    stop_timer_.expires_at(deadline);
    stop_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) close_connections_now();
    });
  }
  boost::system::error_code ec;
  if (public_acceptor_) public_acceptor_->close(ec);
  if (shard_acceptor_) shard_acceptor_->close(ec);
  sweep_timer_.cancel();
  replicator_.stop();  // its links would keep the event loop alive
  maybe_closed();
}

void Shard::close_connections_now() {
  stop_timer_.cancel();
  const std::vector<SocketPeer*> open(connections_.begin(), connections_.end());
  for (SocketPeer* connection : open) connection->close();
  maybe_closed();
}

void Shard::maybe_closed() {
  if (!stopping_ || counted_closed_ || !connections_.empty()) return;
  counted_closed_ = true;
  stop_timer_.cancel();
  context_.shards_closed.fetch_add(1);
  context_.maybe_release();
}

asio::awaitable<void> Shard::accept_loop(tcp::acceptor& acceptor, bool public_port) {
  asio::steady_timer backoff(io_);
  while (!stopping_) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(net::redirect(ec));
    if (stopping_ || ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      log_accept_error(ec);
      // Out of descriptors: refuse the newcomer with the spare one and go on at once, since
      // the pending connection is gone. Otherwise (no spare, ENFILE that freeing one cannot
      // cure, a reset before accept) try again shortly.
      if (out_of_descriptors(ec) && refuse_without_descriptor(acceptor)) continue;
      backoff.expires_after(kAcceptBackoff);
      co_await backoff.async_wait(net::redirect(ec));
      continue;
    }
    accept(std::move(socket), public_port);
  }
}

void Shard::accept(tcp::socket socket, bool public_port) {
  boost::system::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);  // replies are small and latency matters
  const std::uint16_t this_shard =
      public_port ? protocol::kPublicPort : static_cast<std::uint16_t>(index_);

  const std::uint32_t before = context_.connections.fetch_add(1, std::memory_order_relaxed);
  if (before >= context_.config.max_connections) {
    context_.connections.fetch_sub(1, std::memory_order_relaxed);
    engine_.counters()[ShardStat::kRejectedConnections].add();
    auto refused = std::make_shared<SocketPeer>(*this, std::move(socket), this_shard, false);
    connections_.insert(refused.get());  // so that stop() closes it too
    refused->start_refused(
        protocol::WireErrorCode::kTooManyConnections,
        fmt::format("too many connections (max {})", context_.config.max_connections));
    return;
  }
  engine_.counters()[ShardStat::kConnections].add();
  engine_.counters()[ShardStat::kConnectionsTotal].add();
  auto connection = std::make_shared<SocketPeer>(*this, std::move(socket), this_shard, true);
  connections_.insert(connection.get());
  connection->start();
}

bool Shard::refuse_without_descriptor(tcp::acceptor& acceptor) {
  if (spare_fd_ < 0) spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (spare_fd_ < 0) return false;
  ::close(spare_fd_);
  const int fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
  const int accept_errno = errno;
  if (fd >= 0) {
    protocol::Bytes refusal;
    protocol::encode_error(refusal, 0, protocol::WireErrorCode::kTooManyConnections,
                           "too many connections (out of file descriptors)");
    (void)::send(fd, refusal.data(), refusal.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    // Unread input would make close() send a reset that can destroy the ERROR in flight.
    char sink[4096];
    for (int i = 0; i < 16 && ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
    }
    ::close(fd);
    engine_.counters()[ShardStat::kRejectedConnections].add();
  }
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // EAGAIN: another shard took the connection; the accept loop waits for the next one.
  return fd >= 0 || accept_errno == EAGAIN || accept_errno == EWOULDBLOCK;
}

void Shard::log_accept_error(const boost::system::error_code& ec) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_accept_log_ < kAcceptLogInterval) {
    ++unlogged_accept_errors_;
    return;
  }
  if (unlogged_accept_errors_ == 0) {
    log::error("shard", fmt::format("shard {}: accept: {}", index_, ec.message()));
  } else {
    log::error("shard", fmt::format("shard {}: accept: {} ({} more since the last report)", index_,
                                    ec.message(), unlogged_accept_errors_));
  }
  last_accept_log_ = now;
  unlogged_accept_errors_ = 0;
}

void Shard::on_connection_closed(SocketPeer* connection, bool counted) {
  connections_.erase(connection);
  if (counted) {
    engine_.counters()[ShardStat::kConnections].sub();
    context_.connections.fetch_sub(1, std::memory_order_relaxed);
  }
  maybe_closed();
}

void Shard::charge_buffers(std::int64_t delta) {
  buffer_bytes_ = static_cast<std::size_t>(static_cast<std::int64_t>(buffer_bytes_) + delta);
  buffer_bytes_peak_ = std::max(buffer_bytes_peak_, buffer_bytes_);
  engine_.counters()[ShardStat::kBufferBytes].set(buffer_bytes_);
}

void Shard::enforce_buffer_budget() {
  if (enforcing_ || !over_buffer_budget()) return;
  enforcing_ = true;
  // The biggest holders first; a shed connection gives back almost all it held at once.
  std::vector<std::pair<std::size_t, SocketPeer*>> holders;
  holders.reserve(connections_.size());
  for (SocketPeer* connection : connections_) {
    if (connection->sheddable()) holders.emplace_back(connection->charged(), connection);
  }
  std::sort(holders.begin(), holders.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [charged, connection] : holders) {
    if (!over_buffer_budget() || charged == 0) break;
    connection->shed_for_memory(buffer_budget_);
  }
  enforcing_ = false;
}

void Shard::queue_flush(std::shared_ptr<SocketPeer> connection) {
  // The posted flush_queued() has its operation in the shard's slot: no heap per post.
  if (to_flush_.empty()) asio::post(io_, net::in_slot(flush_slot_, [this] { flush_queued(); }));
  to_flush_.push_back(std::move(connection));
}

void Shard::flush_queued() {
  flushing_.swap(to_flush_);  // a flush_now() may queue again (it does not today)
  for (const std::shared_ptr<SocketPeer>& connection : flushing_) connection->flush_now();
  flushing_.clear();
}

asio::awaitable<void> Shard::sweep_loop() {
  while (!stopping_) {
    boost::system::error_code ec;
    sweep_timer_.expires_after(kSweepInterval);
    co_await sweep_timer_.async_wait(net::redirect(ec));
    if (stopping_) break;
    engine_.sweep(context_.clock->now_ns());
    // Connections gave back megabytes of buffers since the last look: some of them were carved
    // from the middle of the allocator's heaps, which free() does not return to the system.
    if (buffer_bytes_peak_ >= buffer_bytes_ + kTrimAfterFreed) {
      ::malloc_trim(0);
      buffer_bytes_peak_ = buffer_bytes_;
    }
    if (engine_.view() != nullptr) {
      // Filled outside the engine's lock into the vector published last time: both keep their
      // memory.
      replicator_.lag(lag_scratch_);
      engine_.publish_lag(lag_scratch_);
      if (index_ == 0) engine_.log_replica_states();
    }
  }
}

void Shard::set_view(std::shared_ptr<const ClusterView> view) {
  engine_.set_view(std::move(view));
  replicator_.set_view(engine_.view());
}

PendingFrame* Shard::new_pending_frame() {
  if (free_frames_.empty()) return new PendingFrame();
  PendingFrame* frame = free_frames_.back().release();
  free_frames_.pop_back();
  return frame;
}

void Shard::recycle_pending_frame(PendingFrame* frame) {
  std::unique_ptr<PendingFrame> owned(frame);
  if (free_frames_.size() < kMaxPooled && owned->acquire_results.capacity() <= kMaxPooledItems &&
      owned->reset_results.capacity() <= kMaxPooledItems &&
      owned->inspect_log.capacity() <= kMaxPooledItems) {
    owned->tasks_pending = 0;
    owned->items_handed_over = 0;
    free_frames_.push_back(std::move(owned));
  }
}

HandoverTask* Shard::new_task() {
  HandoverTask* task = nullptr;
  if (free_tasks_.empty()) {
    task = new HandoverTask();
  } else {
    task = free_tasks_.back().release();
    free_tasks_.pop_back();
  }
  context_.tasks_in_flight.fetch_add(1);  // after the allocation, which may throw
  return task;
}

void Shard::recycle_task(HandoverTask* task) {
  std::unique_ptr<HandoverTask> owned(task);
  owned->peer.reset();
  owned->frame = nullptr;
  owned->items.clear();
  if (free_tasks_.size() < kMaxPooled && owned->items.capacity() <= kMaxPooledItems) {
    free_tasks_.push_back(std::move(owned));
  }
}

void Shard::send(unsigned to, HandoverTask* task) {
  Shard& target = *context_.shards[to];
  target.inbox_.push(task);
  // Pairs with drain(): whoever flips the flag from false posts the one drain().
  if (!target.drain_scheduled_.exchange(true)) {
    Shard* t = &target;
    asio::post(target.io_, [t] { t->drain(); });
  }
}

void Shard::drain() {
  int handled = 0;
  while (handled < kDrainBudget) {
    HandoverTask* task = inbox_.pop();
    if (task == nullptr) break;
    ++handled;
    if (task->phase == HandoverTask::Phase::kRun) {
      run_task(task);
    } else {
      finish_task(task);
    }
  }
  if (handled == kDrainBudget) {
    // More may be waiting: stay scheduled, but let this shard's connections run first.
    asio::post(io_, [this] { drain(); });
    return;
  }
  // Dekker-style hand-off with send(): store false, then look at the queue (both seq_cst).
  // A producer that pushed before our look is seen here; one that pushes after it finds the
  // flag false and posts a new drain().
  drain_scheduled_.store(false);
  if (inbox_.empty()) return;
  if (!drain_scheduled_.exchange(true)) asio::post(io_, [this] { drain(); });
}

void Shard::run_task(HandoverTask* task) {
  const std::uint64_t now_ns = context_.clock->now_ns();
  PendingFrame& frame = *task->frame;
  if (task->opcode == protocol::Opcode::kAcquire) {
    const std::vector<HandoverItem>& items = task->items;
    engine_.decide_prefetched(
        items.size(), [&](std::size_t k) { return items[k].hash; },
        [&](std::size_t k) {
          const HandoverItem& item = items[k];
          frame.acquire_results[item.index] = engine_.acquire(
              item.hash, item.rule, item.cost, item.peek, now_ns, item.kind, item.stamp);
        });
  } else if (task->opcode == protocol::Opcode::kInspect) {
    engine_.inspect(task->items.at(0).hash, now_ns, frame.inspect, frame.inspect_log);
  } else {
    engine_.check_fence();
    for (const HandoverItem& item : task->items) {
      frame.reset_results[item.index] = engine_.reset(item.hash, now_ns);
    }
  }
  // Publish before the answer leaves: a client that sees the reply and then asks for STATS
  // sees this shard's table as of this task.
  engine_.publish_table_stats();
  task->phase = HandoverTask::Phase::kDone;
  send(task->origin, task);  // the task belongs to its origin again: do not touch it after this
}

void Shard::finish_task(HandoverTask* task) {
  PendingFrame* frame = task->frame;
  std::shared_ptr<Peer> peer = std::move(task->peer);
  recycle_task(task);
  if (--frame->tasks_pending == 0) {
    dispatcher_.finish_frame(*peer, *frame);
    recycle_pending_frame(frame);
  }
  peer.reset();
  context_.tasks_in_flight.fetch_sub(1);
  if (stopping_) context_.maybe_release();
}

}  // namespace sluice::server
