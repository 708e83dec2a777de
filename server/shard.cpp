#include "server/shard.h"

#include "net/asio.h"  // before any other Asio header

#include <utility>

#include <fcntl.h>
#include <fmt/core.h>
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
    fmt::print(stderr, "sluiced: shard {}: {}: {}\n", shard, where, ex.what());
  } catch (...) {
    fmt::print(stderr, "sluiced: shard {}: {}: unknown exception\n", shard, where);
  }
}

}  // namespace

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
      table_(TableConfig{.max_bytes = context.config.max_memory / context.shard_count,
                         .sliding_log_cap = context.config.sliding_log_cap,
                         .huge_pages = context.config.huge_pages}),
      dispatcher_(*this),
      replicator_(*this),
      sweep_timer_(io_),
      stop_timer_(io_),
      buffer_budget_(context.config.max_buffer_memory / context.shard_count),
      staging_(context.shard_count) {
  publish_table_stats();  // STATS shows the empty table (and its page size) from the start
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
    counters_[ShardStat::kRejectedConnections].add();
    auto refused = std::make_shared<SocketPeer>(*this, std::move(socket), this_shard, false);
    connections_.insert(refused.get());  // so that stop() closes it too
    refused->start_refused(
        protocol::WireErrorCode::kTooManyConnections,
        fmt::format("too many connections (max {})", context_.config.max_connections));
    return;
  }
  counters_[ShardStat::kConnections].add();
  counters_[ShardStat::kConnectionsTotal].add();
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
    counters_[ShardStat::kRejectedConnections].add();
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
    fmt::print(stderr, "sluiced: shard {}: accept: {}\n", index_, ec.message());
  } else {
    fmt::print(stderr, "sluiced: shard {}: accept: {} ({} more since the last report)\n", index_,
               ec.message(), unlogged_accept_errors_);
  }
  last_accept_log_ = now;
  unlogged_accept_errors_ = 0;
}

void Shard::on_connection_closed(SocketPeer* connection, bool counted) {
  connections_.erase(connection);
  if (counted) {
    counters_[ShardStat::kConnections].sub();
    context_.connections.fetch_sub(1, std::memory_order_relaxed);
  }
  maybe_closed();
}

void Shard::charge_buffers(std::int64_t delta) {
  buffer_bytes_ = static_cast<std::size_t>(static_cast<std::int64_t>(buffer_bytes_) + delta);
  counters_[ShardStat::kBufferBytes].set(buffer_bytes_);
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
    table_.sweep_step(context_.clock->now_ns());
    publish_table_stats();
    if (view_ != nullptr) {
      // Filled outside the lock into the vector published last time: both keep their memory.
      replicator_.lag(lag_scratch_);
      std::lock_guard<std::mutex> lock(lag_mutex_);
      published_lag_.swap(lag_scratch_);
    }
  }
}

protocol::AcquireResult Shard::acquire_local(const KeyHash& hash, const Rule& rule,
                                             std::uint32_t cost, bool peek, std::uint64_t now_ns,
                                             ItemKind kind, std::uint32_t stamp) {
  if (view_ != nullptr) {
    // A node never counts a key it is not the serving primary of (docs/ARCHITECTURE.md).
    std::uint32_t owner = 0;
    Route route = view_->route(hash, owner);
    if (route == Route::kDecide && !fence_open_) route = Route::kUnavailable;
    if (route != Route::kDecide) {
      protocol::AcquireResult result;
      if (route == Route::kRedirect) {
        result.status = protocol::ItemStatus::kRedirect;
        result.limit = owner;
        counters_[ShardStat::kRedirected].add();
      } else {
        result.status = protocol::ItemStatus::kUnavailable;
        counters_[ShardStat::kUnavailable].add();
      }
      return result;
    }
  }
  if (kind == ItemKind::kLease) return lease_local(hash, rule, cost, now_ns);
  if (kind == ItemKind::kGiveBack) {
    protocol::AcquireResult result;
    result.status = protocol::ItemStatus::kAllowed;
    result.limit = rule.capacity();
    result.granted = table_.give_back(hash, rule, cost, stamp, now_ns);
    counters_[ShardStat::kGiveBacks].add();
    counters_[ShardStat::kCreditedUnits].add(result.granted);
    if (result.granted != 0 && view_ != nullptr) replicator_.note(hash);
    return result;
  }
  const TableAnswer answer = table_.acquire(hash, rule, Request{now_ns, cost, peek});
  if (answer.outcome == TableOutcome::kNoMemory) {
    protocol::AcquireResult result;  // all four numbers 0, as for the other failed items
    result.status = protocol::ItemStatus::kNoMemory;
    return result;
  }
  protocol::AcquireResult result = protocol::to_result(answer.decision);
  result.status =
      answer.decision.allowed ? protocol::ItemStatus::kAllowed : protocol::ItemStatus::kDenied;
  if (!peek) {
    counters_[answer.decision.allowed ? ShardStat::kAllowed : ShardStat::kDenied].add();
    // Only an admission changes a record's state (a denial leaves it as it was).
    if (answer.decision.allowed && view_ != nullptr) replicator_.note(hash);
  }
  return result;
}

protocol::AcquireResult Shard::lease_local(const KeyHash& hash, const Rule& rule,
                                           std::uint32_t want, std::uint64_t now_ns) {
  // The grant sluice::lease() makes on a bare state, made on the key's record. A key that
  // cannot be stored answers as denied to the grant, which then stops.
  bool no_memory = false;
  const LeaseGrant grant = grant_lease(Request{now_ns, want, false}, [&](const Request& r) {
    if (no_memory) return Verdict{};  // nothing more is tried once the table is full
    const TableAnswer answer = table_.acquire(hash, rule, r);
    if (answer.outcome == TableOutcome::kNoMemory) no_memory = true;
    return answer.outcome == TableOutcome::kNoMemory ? Verdict{} : answer.decision;
  });
  protocol::AcquireResult result;
  if (no_memory) {
    result.status = protocol::ItemStatus::kNoMemory;
    return result;
  }
  result = protocol::to_result(grant.decision);
  if (grant.granted == 0) {
    result.status = protocol::ItemStatus::kDenied;
    counters_[ShardStat::kDenied].add();
    return result;
  }
  result.status = protocol::ItemStatus::kAllowed;
  result.granted = grant.granted;
  // The stamp its give-back needs (the window, or the grant's millisecond).
  result.retry_after_ms = lease_stamp(rule, now_ns);
  counters_[ShardStat::kAllowed].add();
  counters_[ShardStat::kLeases].add();
  counters_[ShardStat::kLeasedUnits].add(grant.granted);
  if (view_ != nullptr) replicator_.note(hash);
  return result;
}

protocol::ResetStatus Shard::reset_local(const KeyHash& hash, std::uint64_t now_ns) {
  if (view_ != nullptr) {
    std::uint32_t owner = 0;
    Route route = view_->route(hash, owner);
    if (route == Route::kDecide && !fence_open_) route = Route::kUnavailable;
    if (route == Route::kRedirect) {
      counters_[ShardStat::kRedirected].add();
      return protocol::ResetStatus::kRedirect;
    }
    if (route == Route::kUnavailable) {
      counters_[ShardStat::kUnavailable].add();
      return protocol::ResetStatus::kUnavailable;
    }
  }
  if (!table_.reset(hash, now_ns)) return protocol::ResetStatus::kAbsent;
  if (view_ != nullptr) replicator_.note(hash);  // the replica forgets it too
  return protocol::ResetStatus::kRemoved;
}

void Shard::set_view(std::shared_ptr<const ClusterView> view) {
  view_ = std::move(view);
  replicator_.set_view(view_.get());
}

void Shard::apply_record(const protocol::WireRecord& record, std::span<const std::uint64_t> log,
                         std::uint64_t now_ns) {
  RecordImage image;
  image.key = KeyHash{record.fp_lo, record.fp_hi};
  image.algorithm = record.algorithm;
  image.capacity_class = record.capacity_class;
  image.state = CounterState{record.state_a, record.state_b};
  image.idle_at_ns = record.idle_at_ns;
  table_.apply_record(image, log, now_ns);
}

void Shard::pull_page(protocol::Bytes& out, std::uint32_t request_id,
                      const protocol::Framing& framing, const protocol::PullRequest& request,
                      const std::vector<bool>& wanted, const cluster::Ring& ring) {
  const std::uint64_t now_ns = context_.clock->now_ns();
  // A pull of what changed since an earlier one gets this clock back in its reply, to give as
  // its `since` next time (the records' stamps are on this clock).
  std::optional<std::uint64_t> clock;
  if (request.since_ns) clock = now_ns;
  const protocol::RecordFrame frame = protocol::begin_pull_reply(
      out, request_id, protocol::PullReplyHeader{request.fence, false, 0, clock}, framing);
  const ScanResult scanned = table_.scan(
      request.cursor, request.max_records, now_ns,
      [&](const KeyHash& key) { return wanted[ring.partition_of(key)]; },
      [&](const RecordImage& image, std::span<const std::uint64_t> timestamps) {
        protocol::WireRecord record;
        record.fp_lo = image.key.lo;
        record.fp_hi = image.key.hi;
        record.algorithm = image.algorithm;
        record.capacity_class = image.capacity_class;
        record.state_a = image.state.a;
        record.state_b = image.state.b;
        record.idle_at_ns = image.idle_at_ns;
        protocol::add_record(out, frame, record, timestamps);
      },
      request.since_ns.value_or(0));
  protocol::set_pull_reply_header(
      out, frame,
      protocol::PullReplyHeader{request.fence, scanned.done, scanned.next_cursor, clock});
  protocol::finish_records(out, frame);
  counters_[ShardStat::kPullPages].add();
  counters_[ShardStat::kPullRecords].add(scanned.visited);
}

std::vector<Replicator::PeerLag> Shard::published_lag() const {
  std::lock_guard<std::mutex> lock(lag_mutex_);
  return published_lag_;
}

void Shard::publish_table_stats() {
  const TableStats stats = table_.stats();
  counters_[ShardStat::kKeys].set(stats.keys);
  counters_[ShardStat::kMemoryBytes].set(stats.memory_bytes);
  counters_[ShardStat::kSlots].set(stats.slots);
  counters_[ShardStat::kExpired].set(stats.expired);
  counters_[ShardStat::kEvicted].set(stats.evicted);
  counters_[ShardStat::kFailedInserts].set(stats.failed_inserts);
  counters_[ShardStat::kHugePages].set(stats.huge_pages ? 1 : 0);
}

void Shard::append_stats_reply(protocol::Bytes& out, std::uint32_t request_id,
                               const protocol::Framing& framing) {
  const std::uint64_t now_ns = context_.clock->now_ns();
  const auto refresh_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(context_.config.stats_refresh).count());
  // A clock that stepped back also rebuilds: the snapshot is never older than the bound says.
  if (!stats_built_ || now_ns < stats_built_ns_ || now_ns - stats_built_ns_ >= refresh_ns) {
    rebuild_stats_snapshot(now_ns);
  }
  protocol::encode_stats_reply_with_body(out, request_id, stats_body_, framing);
}

void Shard::rebuild_stats_snapshot(std::uint64_t now_ns) {
  constexpr std::size_t kStats = static_cast<std::size_t>(ShardStat::kCount);
  if (stats_entries_.empty()) {
    stats_entries_.reserve((context_.shard_count + 1) * kStats);
    for (std::size_t s = 0; s < kStats; ++s)
      stats_entries_.push_back({fmt::format("total.{}", kShardStatNames[s]), 0});
    for (unsigned i = 0; i < context_.shard_count; ++i) {
      for (std::size_t s = 0; s < kStats; ++s)
        stats_entries_.push_back({fmt::format("shard.{}.{}", i, kShardStatNames[s]), 0});
    }
  }
  publish_table_stats();
  for (std::size_t s = 0; s < kStats; ++s) stats_entries_[s].value = 0;
  for (unsigned i = 0; i < context_.shard_count; ++i) {
    const ShardCounters& counters = context_.shards[i]->counters();
    for (std::size_t s = 0; s < kStats; ++s) {
      const std::uint64_t value = counters.values[s].get();
      stats_entries_[s].value += value;
      stats_entries_[(i + 1) * kStats + s].value = value;
    }
  }
  // Replication lag per replica node, over every shard: "replication.<node>.<name>".
  stats_entries_.resize((context_.shard_count + 1) * kStats);
  if (view_ != nullptr) {
    std::vector<Replicator::PeerLag> lag;
    for (unsigned i = 0; i < context_.shard_count; ++i) {
      for (const Replicator::PeerLag& peer : context_.shards[i]->published_lag()) {
        auto it = std::find_if(lag.begin(), lag.end(),
                               [&](const Replicator::PeerLag& l) { return l.node == peer.node; });
        if (it == lag.end()) {
          lag.push_back(peer);
          continue;
        }
        it->queued += peer.queued;
        it->unacked += peer.unacked;
        it->oldest_ms = std::max(it->oldest_ms, peer.oldest_ms);
        it->up = it->up && peer.up;
      }
    }
    for (const Replicator::PeerLag& peer : lag) {
      const std::string prefix = "replication." + peer.node + ".";
      stats_entries_.push_back({prefix + "records", peer.queued + peer.unacked});
      stats_entries_.push_back({prefix + "lag_ms", peer.oldest_ms});
      stats_entries_.push_back({prefix + "up", peer.up ? 1u : 0u});
    }
  }
  stats_body_.clear();
  protocol::encode_stats_body(stats_body_, stats_entries_);
  stats_built_ns_ = now_ns;
  stats_built_ = true;
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
      owned->reset_results.capacity() <= kMaxPooledItems) {
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
    decide_prefetched(
        items.size(), [&](std::size_t k) { return items[k].hash; },
        [&](std::size_t k) {
          const HandoverItem& item = items[k];
          frame.acquire_results[item.index] = acquire_local(
              item.hash, item.rule, item.cost, item.peek, now_ns, item.kind, item.stamp);
        });
  } else {
    check_fence();
    for (const HandoverItem& item : task->items) {
      frame.reset_results[item.index] = reset_local(item.hash, now_ns);
    }
  }
  // Publish before the answer leaves: a client that sees the reply and then asks for STATS
  // sees this shard's table as of this task.
  publish_table_stats();
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
