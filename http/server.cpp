#include "http/server.h"

#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>
#include <algorithm>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <system_error>
#include <unordered_set>
#include <utility>

#include "log/log.h"

namespace sluice::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace detail {

struct ServerState {
  ServerState(asio::io_context& io, ServerLimits limits, Handler handler)
      : io(io), limits(limits), handler(std::move(handler)), acceptor(asio::make_strand(io)) {}

  asio::io_context& io;
  const ServerLimits limits;
  const Handler handler;
  tcp::acceptor acceptor;  // on its own strand

  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> bad_requests{0};
  std::atomic<std::uint64_t> connections_total{0};
  std::atomic<std::uint64_t> connections_open{0};
  std::atomic<std::uint64_t> connections_refused{0};
  std::atomic<std::uint64_t> idle_timeouts{0};
  std::atomic<std::uint64_t> read_timeouts{0};

  // The open connections, for stop(). Touched at accept, at close and by stop() only.
  std::mutex mutex;
  bool stopping = false;  // under mutex
  std::unordered_set<Connection*> connections;
};

// One connection: a serving coroutine and a watchdog coroutine on the connection's strand.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<ServerState> state, tcp::socket socket)
      : state_(std::move(state)),
        executor_(socket.get_executor()),
        socket_(std::move(socket)),
        peer_(peer_of(socket_)),
        watchdog_(executor_),
        signal_(executor_),
        // The parser refuses more than the limits; the buffer's own bound only keeps a flood
        // of pipelined requests from growing it without end.
        buffer_(state_->limits.max_header_bytes + state_->limits.max_body_bytes + 64 * 1024) {}

  void start() {
    auto self = shared_from_this();
    auto on_exit = [self](std::exception_ptr error) {
      if (!error) return;
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        log::warning("http", fmt::format("connection closed on an error: {}", e.what()));
      }
      self->close();
    };
    asio::co_spawn(executor_, serve(), on_exit);
    asio::co_spawn(executor_, watch(), on_exit);
  }

  // The peer's IP address, read at accept ("" when the socket could not say).
  const std::string& peer() const { return peer_; }

  // On the strand: ends both coroutines.
  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ignored;
    socket_.close(ignored);
    watchdog_.cancel();
    signal_.cancel();
  }

  // Any thread: the handler's answer to the request being handled.
  void deliver(Response response) {
    auto self = shared_from_this();
    asio::post(executor_, [self, response = std::move(response)]() mutable {
      if (self->closed_ || self->response_ || !self->awaiting_response_) return;
      self->response_ = std::move(response);
      self->signal_.cancel();
    });
  }

  // The connection's strand.
  const asio::any_io_executor& executor() const { return executor_; }

  ~Connection() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->connections.erase(this);
    state_->connections_open.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  // What the watchdog closes the connection for when the deadline passes: waiting for a
  // request (idle), reading one or writing a response (read), discarding input after the
  // last response (linger: the normal end, not counted).
  enum class Phase { kNone, kIdle, kReading, kLinger };

  // Sets the watchdog's deadline (on the strand); it closes the connection there.
  void arm(Phase phase, std::chrono::milliseconds timeout) {
    phase_ = phase;
    deadline_ = Clock::now() + timeout;
    if (deadline_ < armed_) watchdog_.cancel();  // re-arms earlier
  }
  void disarm() {
    phase_ = Phase::kNone;
    deadline_ = Clock::time_point::max();
  }

  asio::awaitable<void> watch() {
    while (!closed_) {
      armed_ = deadline_;
      watchdog_.expires_at(armed_);
      error_code ec;
      co_await watchdog_.async_wait(net::redirect(ec));
      if (closed_) break;
      if (phase_ != Phase::kNone && Clock::now() >= deadline_) {
        if (phase_ == Phase::kIdle) state_->idle_timeouts.fetch_add(1, std::memory_order_relaxed);
        if (phase_ == Phase::kReading) {
          state_->read_timeouts.fetch_add(1, std::memory_order_relaxed);
        }
        close();
      }
    }
  }

  // The status for a request the parser refused, or nullopt when the connection simply ended.
  static std::optional<Status> refusal(const error_code& ec) {
    if (ec == beast::http::error::header_limit || ec == beast::http::error::buffer_overflow) {
      return Status::request_header_fields_too_large;
    }
    if (ec == beast::http::error::body_limit) return Status::payload_too_large;
    if (ec == beast::http::error::end_of_stream || ec == beast::http::error::partial_message) {
      return std::nullopt;
    }
    if (ec.category() == make_error_code(beast::http::error::bad_method).category()) {
      return Status::bad_request;
    }
    return std::nullopt;  // a socket error, or closed by the watchdog or stop()
  }

  asio::awaitable<void> serve() {
    const ServerLimits& limits = state_->limits;
    for (;;) {
      error_code ec;
      if (buffer_.size() == 0) {
        arm(Phase::kIdle, limits.idle_timeout);
        co_await socket_.async_wait(tcp::socket::wait_read, net::redirect(ec));
        if (ec || closed_) break;
      }
      arm(Phase::kReading, limits.read_timeout);
      beast::http::request_parser<beast::http::string_body> parser;
      parser.body_limit(limits.max_body_bytes);  // a Content-Length is checked with the header
      co_await read_header(parser, ec);
      if (!ec && !closed_) {
        co_await beast::http::async_read(socket_, buffer_, parser, net::redirect(ec));
      }
      if (closed_) break;
      if (ec) {
        if (const std::optional<Status> status = refusal(ec)) {
          state_->bad_requests.fetch_add(1, std::memory_order_relaxed);
          Response response = text_response(*status, fmt::format("{}\n", ec.message()));
          co_await finish(std::move(response), 11);
        }
        break;
      }
      disarm();
      state_->requests.fetch_add(1, std::memory_order_relaxed);
      Request request = parser.release();
      const bool keep_alive = request.keep_alive();
      const unsigned version = request.version();
      awaiting_response_ = true;
      state_->handler(request, Responder(shared_from_this()));
      while (!response_ && !closed_) {
        signal_.expires_at(Clock::time_point::max());
        co_await signal_.async_wait(net::redirect(ec));
      }
      awaiting_response_ = false;
      if (closed_) break;
      Response response = std::move(*response_);
      response_.reset();
      if (!keep_alive) {
        co_await finish(std::move(response), version);
        break;
      }
      response.version(version);
      response.keep_alive(true);
      response.prepare_payload();
      arm(Phase::kReading, limits.read_timeout);
      co_await beast::http::async_write(socket_, response, net::redirect(ec));
      if (ec || closed_) break;
    }
    close();
  }

  // Reads the request line and headers into `parser`, holding them to max_header_bytes
  // exactly: Beast's own header_limit applies to the request line and the fields separately
  // and depends on how the bytes arrived, so it is set above ours and ours is counted here.
  asio::awaitable<void> read_header(beast::http::request_parser<beast::http::string_body>& parser,
                                    error_code& ec) {
    const std::size_t limit = state_->limits.max_header_bytes;
    parser.header_limit(static_cast<std::uint32_t>(
        std::min<std::size_t>(2 * limit + 4096, std::numeric_limits<std::uint32_t>::max())));
    parser.eager(false);  // stop after the header: its size is checked before the body is read
    std::size_t header_bytes = 0;
    for (;;) {
      if (buffer_.size() != 0) {
        const std::size_t used = parser.put(buffer_.data(), ec);
        buffer_.consume(used);
        header_bytes += used;
        if (ec == beast::http::error::need_more) ec = {};
        if (ec) co_return;
        if (parser.is_header_done()) break;
      }
      // What is buffered is all header so far (the parser has not found its end).
      if (header_bytes + buffer_.size() > limit) break;
      const std::size_t room = std::min<std::size_t>(4096, buffer_.max_size() - buffer_.size());
      const std::size_t n =
          co_await socket_.async_read_some(buffer_.prepare(room), net::redirect(ec));
      buffer_.commit(n);
      if (ec == asio::error::eof) ec = beast::http::error::end_of_stream;
      if (ec || closed_) co_return;
    }
    if (header_bytes + (parser.is_header_done() ? 0 : buffer_.size()) > limit) {
      ec = beast::http::error::header_limit;
    }
  }

  // Sends the last response (Connection: close), shuts the sending side down and reads what
  // the client still sends until it closes, so that unread input does not make the kernel
  // reset the connection and destroy the response in flight.
  asio::awaitable<void> finish(Response response, unsigned version) {
    response.version(version);
    response.keep_alive(false);
    response.prepare_payload();
    error_code ec;
    arm(Phase::kReading, state_->limits.read_timeout);
    co_await beast::http::async_write(socket_, response, net::redirect(ec));
    if (ec || closed_) co_return;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    arm(Phase::kLinger, std::min(state_->limits.read_timeout, std::chrono::milliseconds(1000)));
    char scratch[4096];
    while (!ec && !closed_) {
      co_await socket_.async_read_some(asio::buffer(scratch), net::redirect(ec));
    }
  }

  std::shared_ptr<ServerState> state_;
  const asio::any_io_executor executor_;
  static std::string peer_of(const tcp::socket& socket) {
    error_code ec;
    const auto endpoint = socket.remote_endpoint(ec);
    if (ec) return std::string();
    // An IPv4 client of an IPv6 listener ("::ffff:10.0.0.7") is the IPv4 address it is.
    const auto address = endpoint.address();
    if (address.is_v6() && address.to_v6().is_v4_mapped()) {
      return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, address.to_v6())
          .to_string();
    }
    return address.to_string();
  }

  tcp::socket socket_;
  std::string peer_;
  asio::steady_timer watchdog_;
  asio::steady_timer signal_;  // wakes serve() when the response arrives
  beast::flat_buffer buffer_;
  Phase phase_ = Phase::kNone;
  Clock::time_point deadline_ = Clock::time_point::max();
  Clock::time_point armed_ = Clock::time_point::max();
  bool closed_ = false;
  bool awaiting_response_ = false;
  std::optional<Response> response_;
};

}  // namespace detail

// ---- Responder -------------------------------------------------------------------------------

Responder::Responder(std::shared_ptr<detail::Connection> connection)
    : connection_(std::move(connection)) {}

Responder& Responder::operator=(Responder&& other) noexcept {
  if (this != &other) {
    if (connection_) send(text_response(Status::internal_server_error, "no response\n"));
    connection_ = std::move(other.connection_);
  }
  return *this;
}

std::string_view Responder::peer() const {
  return connection_ ? std::string_view(connection_->peer()) : std::string_view();
}

Responder::~Responder() {
  if (connection_) send(text_response(Status::internal_server_error, "no response\n"));
}

void Responder::send(Response response) {
  if (!connection_) return;
  std::shared_ptr<detail::Connection> connection = std::move(connection_);
  connection_.reset();
  connection->deliver(std::move(response));
}

Response text_response(Status status, std::string body) {
  Response response(status, 11);
  response.set(boost::beast::http::field::content_type, "text/plain; charset=utf-8");
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

// ---- Server ----------------------------------------------------------------------------------

namespace {

asio::awaitable<void> accept_loop(std::shared_ptr<detail::ServerState> state) {
  for (;;) {
    tcp::socket socket(asio::make_strand(state->io));
    error_code ec;
    co_await state->acceptor.async_accept(socket, net::redirect(ec));
    if (ec == asio::error::operation_aborted || !state->acceptor.is_open()) co_return;
    if (ec) continue;  // e.g. out of descriptors: the next accept may succeed
    std::shared_ptr<detail::Connection> connection;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      if (state->stopping) co_return;
      if (state->connections_open.load(std::memory_order_relaxed) >=
          state->limits.max_connections) {
        state->connections_refused.fetch_add(1, std::memory_order_relaxed);
        socket.close(ec);
        continue;
      }
      state->connections_open.fetch_add(1, std::memory_order_relaxed);
      state->connections_total.fetch_add(1, std::memory_order_relaxed);
      connection = std::make_shared<detail::Connection>(state, std::move(socket));
      state->connections.insert(connection.get());
    }
    connection->start();
  }
}

}  // namespace

Server::Server(boost::asio::io_context& io, ServerLimits limits, Handler handler)
    : state_(std::make_shared<detail::ServerState>(io, limits, std::move(handler))) {}

Server::~Server() { stop(); }

void Server::start(const std::string& host, std::uint16_t port) {
  error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            fmt::format("bad address '{}'", host));
  }
  const tcp::endpoint endpoint(address, port);
  tcp::acceptor& acceptor = state_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) port_ = acceptor.local_endpoint(ec).port();
  if (ec) {
    throw std::system_error(std::error_code(ec.value(), std::system_category()),
                            fmt::format("cannot listen on {}:{}", host, port));
  }
  asio::co_spawn(acceptor.get_executor(), accept_loop(state_), asio::detached);
}

void Server::stop() {
  std::shared_ptr<detail::ServerState> state = state_;
  // Taken under the lock, closed (and dropped: maybe the last reference, whose destructor
  // takes the lock) outside it.
  std::vector<std::shared_ptr<detail::Connection>> open;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    if (state->stopping) return;
    state->stopping = true;
    for (detail::Connection* connection : state->connections) {
      // Empty when the connection is being destroyed right now (its destructor waits for the
      // lock to unregister).
      if (auto alive = connection->weak_from_this().lock()) open.push_back(std::move(alive));
    }
  }
  for (std::shared_ptr<detail::Connection>& connection : open) {
    asio::post(connection->executor(), [connection] { connection->close(); });
  }
  open.clear();
  asio::post(state->acceptor.get_executor(), [state] {
    error_code ignored;
    state->acceptor.close(ignored);
  });
}

ServerCounters Server::counters() const {
  const detail::ServerState& s = *state_;
  constexpr auto kRelaxed = std::memory_order_relaxed;
  return ServerCounters{
      .requests = s.requests.load(kRelaxed),
      .bad_requests = s.bad_requests.load(kRelaxed),
      .connections_total = s.connections_total.load(kRelaxed),
      .connections_open = s.connections_open.load(kRelaxed),
      .connections_refused = s.connections_refused.load(kRelaxed),
      .idle_timeouts = s.idle_timeouts.load(kRelaxed),
      .read_timeouts = s.read_timeouts.load(kRelaxed),
  };
}

const ServerLimits& Server::limits() const { return state_->limits; }

}  // namespace sluice::http
