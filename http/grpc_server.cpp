#include "http/grpc_server.h"
#include "http/grpc_session.h"

#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/strand.hpp>
#include <mutex>
#include <system_error>
#include <unordered_set>
#include <utility>
#include <vector>

#include "log/log.h"
#include "net/handler_slot.h"

namespace sluice::http {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using net::in_slot;

namespace detail {

class GrpcConnection;

struct GrpcServerState {
  GrpcServerState(asio::io_context& io, GrpcLimits limits)
      : io(io), limits(limits), acceptor(asio::make_strand(io)) {}

  asio::io_context& io;
  const GrpcLimits limits;
  MethodTable methods;     // set before start()
  tcp::acceptor acceptor;  // on its own strand

  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> refused_calls{0};
  std::atomic<std::uint64_t> connections_total{0};
  std::atomic<std::uint64_t> connections_open{0};
  std::atomic<std::uint64_t> connections_refused{0};
  std::atomic<std::uint64_t> protocol_errors{0};
  std::atomic<std::uint64_t> idle_timeouts{0};

  // The open connections, and who waits for them to close (stop()).
  std::mutex mutex;
  bool stopping = false;                            // under mutex
  std::chrono::milliseconds grace{0};               // under mutex
  std::unordered_set<GrpcConnection*> connections;  // under mutex
  std::vector<std::function<void()>> stopped;       // under mutex: run when connections empty

  // Under mutex, with connections empty and stopping: every waiter runs on the io_context.
  void release_waiters() {
    for (auto& waiter : stopped) {
      if (waiter) asio::post(io, std::move(waiter));
    }
    stopped.clear();
  }
};

// One HTTP/2 connection, on its own strand: a GrpcSession fed from the socket, its output
// written back, a watchdog for idle and stuck connections, and the calls it carries.
class GrpcConnection : public std::enable_shared_from_this<GrpcConnection>, public CallTarget {
 public:
  GrpcConnection(std::shared_ptr<GrpcServerState> state, tcp::socket socket)
      : state_(std::move(state)),
        executor_(socket.get_executor()),
        socket_(std::move(socket)),
        watchdog_(executor_),
        session_(state_->limits, state_->methods,
                 SessionCounters{state_->calls, state_->refused_calls},
                 [this](const GrpcHandler& handler, std::int32_t stream, std::string message,
                        Clock::time_point deadline) {
                   handler(make_call(shared_from_this(), stream, std::move(message), deadline));
                 }) {}

  ~GrpcConnection() override { unregister(); }

  // On the strand, once.
  void start(bool stopping, std::chrono::milliseconds grace) {
    last_read_ = Clock::now();
    arm_watchdog();
    if (stopping) go_away(grace);
    read();
    flush();
  }

  // Any thread: the answer of call `stream`.
  void deliver(std::int32_t stream, GrpcCode code, std::string text) override {
    asio::dispatch(executor_,
                   [self = shared_from_this(), stream, code, text = std::move(text)]() mutable {
                     if (self->closed_) return;
                     self->session_.respond(stream, code, std::move(text));
                     self->flush();
                   });
  }

  // On the strand: GOAWAY now, closed once its calls are answered, or at `grace`.
  void go_away(std::chrono::milliseconds grace) {
    if (closed_ || going_away_) return;
    going_away_ = true;
    session_.go_away();
    hard_deadline_ = Clock::now() + grace;
    watchdog_.cancel();  // re-armed with the hard deadline
    flush();
  }

  const asio::any_io_executor& executor() const { return executor_; }

 private:
  void read() {
    socket_.async_read_some(
        asio::buffer(input_),
        in_slot(read_slot_, [self = shared_from_this()](const error_code& ec, std::size_t n) {
          self->on_read(ec, n);
        }));
  }

  void on_read(const error_code& ec, std::size_t n) {
    if (closed_) return;
    if (ec) return close();
    last_read_ = Clock::now();
    if (!session_.receive(input_.data(), n)) {
      // Not HTTP/2, or against its rules: the session has queued its GOAWAY; the connection
      // ends once that is written.
      state_->protocol_errors.fetch_add(1, std::memory_order_relaxed);
      log::warning("grpc", "connection ended: " + session_.error());
      broken_ = true;
      flush();
      return;
    }
    flush();
    if (!closed_ && session_.wants_read()) read();
  }

  // Writes what the session has to send; one write at a time, the rest gathered meanwhile.
  void flush() {
    if (closed_ || writing_) return;
    output_.clear();
    if (!session_.take_output(output_)) broken_ = true;
    if (output_.empty()) {
      if (broken_ || session_.finished()) close();
      return;
    }
    writing_ = true;
    write_started_ = Clock::now();
    asio::async_write(
        socket_, asio::buffer(output_),
        in_slot(write_slot_, [self = shared_from_this()](const error_code& ec, std::size_t) {
          self->writing_ = false;
          if (ec) return self->close();
          self->flush();
        }));
  }

  void arm_watchdog() {
    // Idle: from the last read, while no call is open; with one open, looked at again later.
    const auto idle = state_->limits.idle_timeout;
    Clock::time_point at = hard_deadline_;
    if (!going_away_) at = session_.has_open_calls() ? Clock::now() + idle : last_read_ + idle;
    if (writing_) at = std::min(at, write_started_ + idle);
    watchdog_.expires_at(at);
    watchdog_.async_wait(in_slot(
        watch_slot_, [self = shared_from_this()](const error_code&) { self->on_watchdog(); }));
  }

  void on_watchdog() {
    if (closed_) return;
    const auto now = Clock::now();
    const auto idle = state_->limits.idle_timeout;
    if (going_away_ && now >= hard_deadline_) return close();
    if (writing_ && now - write_started_ >= idle) {
      state_->idle_timeouts.fetch_add(1, std::memory_order_relaxed);
      return close();
    }
    if (!going_away_ && !session_.has_open_calls() && now - last_read_ >= idle) {
      // GOAWAY, and a second to write it before the socket is closed.
      state_->idle_timeouts.fetch_add(1, std::memory_order_relaxed);
      go_away(std::chrono::milliseconds(1000));
    }
    arm_watchdog();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    watchdog_.cancel();
    unregister();  // closed: a call still held elsewhere keeps only the object
  }

  // Off the server's list (once): stop()'s waiters run when the list is empty.
  void unregister() {
    std::lock_guard lock(state_->mutex);
    if (state_->connections.erase(this) == 0) return;
    state_->connections_open.fetch_sub(1, std::memory_order_relaxed);
    if (state_->stopping && state_->connections.empty()) state_->release_waiters();
  }

  std::shared_ptr<GrpcServerState> state_;
  asio::any_io_executor executor_;
  tcp::socket socket_;
  asio::steady_timer watchdog_;
  GrpcSession session_;
  std::array<std::uint8_t, 16 * 1024> input_{};
  std::vector<std::uint8_t> output_;
  Clock::time_point last_read_{};
  Clock::time_point write_started_{};
  Clock::time_point hard_deadline_ = Clock::time_point::max();
  bool writing_ = false;
  bool going_away_ = false;
  bool broken_ = false;
  bool closed_ = false;
  net::HandlerSlot read_slot_;
  net::HandlerSlot write_slot_;
  net::HandlerSlot watch_slot_;
};

}  // namespace detail

// ---- GrpcServer -------------------------------------------------------------------------------

namespace {

void accept_next(const std::shared_ptr<detail::GrpcServerState>& state) {
  state->acceptor.async_accept(
      asio::make_strand(state->io), [state](const error_code& ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !state->acceptor.is_open()) return;
        if (!ec) {
          bool stopping = false;
          std::chrono::milliseconds grace{0};
          std::shared_ptr<detail::GrpcConnection> connection;
          {
            std::lock_guard lock(state->mutex);
            stopping = state->stopping;
            grace = state->grace;
            if (state->connections.size() >= state->limits.max_connections) {
              state->connections_refused.fetch_add(1, std::memory_order_relaxed);
              error_code ignored;
              socket.close(ignored);
            } else {
              error_code ignored;
              socket.set_option(tcp::no_delay(true), ignored);
              connection = std::make_shared<detail::GrpcConnection>(state, std::move(socket));
              state->connections.insert(connection.get());
              state->connections_open.fetch_add(1, std::memory_order_relaxed);
              state->connections_total.fetch_add(1, std::memory_order_relaxed);
            }
          }
          if (connection) {
            asio::dispatch(connection->executor(),
                           [connection, stopping, grace] { connection->start(stopping, grace); });
          }
        }
        accept_next(state);
      });
}

}  // namespace

GrpcServer::GrpcServer(asio::io_context& io, GrpcLimits limits)
    : state_(std::make_shared<detail::GrpcServerState>(io, limits)) {}

GrpcServer::~GrpcServer() { stop(std::chrono::milliseconds(0)); }

void GrpcServer::add_method(std::string path, GrpcHandler handler) {
  state_->methods[std::move(path)] = std::move(handler);
}

void GrpcServer::start(const std::string& host, std::uint16_t port) {
  const tcp::endpoint endpoint(asio::ip::make_address(host), port);
  state_->acceptor.open(endpoint.protocol());
  state_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  state_->acceptor.bind(endpoint);
  state_->acceptor.listen(asio::socket_base::max_listen_connections);
  port_ = state_->acceptor.local_endpoint().port();
  accept_next(state_);
}

void GrpcServer::stop(std::chrono::milliseconds grace, std::function<void()> stopped) {
  auto state = state_;
  std::vector<std::shared_ptr<detail::GrpcConnection>> open;
  {
    std::lock_guard lock(state->mutex);
    state->stopped.push_back(std::move(stopped));
    if (!state->stopping) {
      state->stopping = true;
      state->grace = grace;
      for (detail::GrpcConnection* c : state->connections) {
        // A connection being destroyed is still listed until its destructor takes the lock.
        auto held = c->weak_from_this().lock();
        if (held) open.push_back(std::move(held));
      }
    }
    if (state->connections.empty()) state->release_waiters();
  }
  asio::dispatch(state->acceptor.get_executor(), [state] {
    error_code ignored;
    state->acceptor.close(ignored);
  });
  for (auto& c : open) {
    asio::dispatch(c->executor(), [c, grace] { c->go_away(grace); });
  }
}

GrpcCounters GrpcServer::counters() const {
  const auto get = [](const std::atomic<std::uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  return GrpcCounters{get(state_->calls),
                      get(state_->refused_calls),
                      get(state_->connections_total),
                      get(state_->connections_open),
                      get(state_->connections_refused),
                      get(state_->protocol_errors),
                      get(state_->idle_timeouts)};
}

const GrpcLimits& GrpcServer::limits() const { return state_->limits; }

}  // namespace sluice::http
