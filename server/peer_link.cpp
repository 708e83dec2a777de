#include "server/peer_link.h"

#include "net/asio.h"  // before any other Asio header

#include "net/connect.h"

#include <fmt/core.h>
#include <sys/socket.h>
#include <algorithm>
#include <cstring>
#include <limits>

namespace sluice::server {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// Replies from another node can be large (a page of a PULL with sliding logs).
constexpr std::uint32_t kMaxPeerFrame = 64u << 20;
constexpr std::size_t kReadChunk = 64 * 1024;

}  // namespace

PeerLink::PeerLink(asio::io_context& io, Config config, ReplyHandler on_reply,
                   StateHandler on_state)
    : io_(io),
      config_(std::move(config)),
      on_reply_(std::move(on_reply)),
      on_state_(std::move(on_state)),
      socket_(io),
      write_signal_(io),
      backoff_(io),
      deadline_(io),
      jitter_(static_cast<std::uint32_t>(std::hash<std::string>{}(config_.host) ^ config_.port)) {}

PeerLink::~PeerLink() = default;

void PeerLink::start() {
  if (started_) return;
  started_ = true;
  asio::co_spawn(
      io_, [self = shared_from_this()]() { return self->run(); }, asio::detached);
}

void PeerLink::close() {
  if (closed_) return;
  closed_ = true;
  up_ = false;
  boost::system::error_code ec;
  socket_.close(ec);
  write_signal_.cancel();
  backoff_.cancel();
  deadline_.cancel();
}

void PeerLink::flush() {
  if (!up_ || out_queued_.empty()) return;
  if (!writing_) {
    // Straight to the socket when nothing is being written: no coroutine wakes, so a flush
    // allocates nothing. Never blocks; what the socket does not take (or an error) is left to
    // the writer.
    const ssize_t sent = ::send(socket_.native_handle(), out_queued_.data(), out_queued_.size(),
                                MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent > 0) out_queued_.erase(out_queued_.begin(), out_queued_.begin() + sent);
    if (out_queued_.empty()) return;
  }
  if (pending_output() > config_.max_output_bytes) {
    // The peer does not read: drop the connection (its owner queues again what was in flight)
    // rather than let the output grow.
    output_overflowed_ = true;
    out_queued_.clear();
    fail_session();
    return;
  }
  write_signal_.cancel();
}

void PeerLink::fail_session() {
  boost::system::error_code ec;
  socket_.close(ec);
  write_signal_.cancel();
}

asio::awaitable<void> PeerLink::run() {
  auto self = shared_from_this();  // alive while the loop runs
  int failures = 0;
  while (!closed_) {
    std::string why = co_await session();
    if (output_overflowed_) {
      output_overflowed_ = false;
      why = fmt::format("{}:{} does not read: over {} bytes of output waiting", config_.host,
                        config_.port, config_.max_output_bytes);
    }
    const bool was_up = up_;
    up_ = false;
    fail_session();
    out_queued_.clear();
    if (closed_) break;
    on_state_(false, why);
    failures = was_up ? 0 : std::min(failures + 1, 16);
    const auto base = std::min<std::chrono::milliseconds::rep>(
        config_.retry_max.count(), config_.retry_min.count() << std::min(failures, 10));
    // Jitter of -50 % .. +50 %, so that nodes restarting together do not retry in step.
    const auto delay = base / 2 + static_cast<std::chrono::milliseconds::rep>(
                                      jitter_() % static_cast<std::uint32_t>(base + 1));
    boost::system::error_code ec;
    backoff_.expires_after(std::chrono::milliseconds(delay));
    co_await backoff_.async_wait(net::redirect(ec));
  }
}

asio::awaitable<std::string> PeerLink::session() {
  boost::system::error_code ec;
  const std::string where = fmt::format("{}:{}", config_.host, config_.port);
  socket_ = tcp::socket(io_);
  // The handshake's deadline: a timer that closes the socket, the way Boost 1.74 times out. Its
  // handler may run after this session has ended, so it checks the session's number.
  const std::uint64_t session = ++sessions_;
  auto timed_out = std::make_shared<bool>(false);
  deadline_.expires_after(config_.connect_timeout);
  deadline_.async_wait([this, self = shared_from_this(), session,
                        timed_out](const boost::system::error_code& waited) {
    if (waited || up_ || closed_ || session != sessions_) return;
    *timed_out = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
  });
  struct CancelDeadline {
    asio::steady_timer& timer;
    ~CancelDeadline() { timer.cancel(); }
  } cancel_deadline{deadline_};

  tcp::resolver resolver(io_);
  const auto endpoints = co_await resolver.async_resolve(config_.host, std::to_string(config_.port),
                                                         net::redirect(ec));
  if (ec) co_return fmt::format("resolve {}: {}", where, ec.message());
  ec = co_await net::connect_from(socket_, socket_, endpoints, config_.source);
  if (ec) co_return fmt::format("connect {}: {}", where, *timed_out ? "timed out" : ec.message());
  socket_.set_option(tcp::no_delay(true), ec);

  protocol::Bytes request;
  protocol::encode_hello_request(
      request, 0, protocol::HelloRequest{protocol::kVersion, config_.name, config_.token},
      framing());
  co_await asio::async_write(socket_, asio::buffer(request), net::redirect(ec));
  if (ec) co_return fmt::format("HELLO to {}: {}", where, ec.message());

  const protocol::FrameDecoder decoder(kMaxPeerFrame);
  protocol::Bytes in(kReadChunk);
  std::size_t begin = 0, end = 0;
  bool handshaken = false;
  auto alive = std::make_shared<bool>(true);
  struct EndWriter {
    std::shared_ptr<bool> alive;
    ~EndWriter() { *alive = false; }
  } end_writer{alive};
  for (;;) {
    // Every whole frame in the buffer.
    for (;;) {
      const protocol::DecodeResult decoded =
          decoder.decode(std::span<const std::uint8_t>(in.data() + begin, end - begin));
      if (decoded.status == protocol::DecodeStatus::kNeedMore) break;
      if (decoded.status == protocol::DecodeStatus::kMalformed) {
        co_return fmt::format("{} sent a malformed frame: {}", where, decoded.reason);
      }
      begin += decoded.frame_size;
      const protocol::Frame& frame = decoded.frame;
      if (frame.header.opcode == protocol::Opcode::kError) {
        protocol::ErrorReply error;
        (void)protocol::parse_error(frame.body, error);
        co_return fmt::format("{} refused: {}: {}", where, protocol::error_code_name(error.code),
                              error.message);
      }
      if (!handshaken) {
        if (frame.header.opcode != protocol::Opcode::kHello ||
            !protocol::parse_hello_reply(frame.body, hello_)) {
          co_return fmt::format("{} did not answer HELLO as a Sluice node", where);
        }
        if (hello_.version < 3) {
          co_return fmt::format("{} speaks protocol {}, a cluster needs 3", where, hello_.version);
        }
        handshaken = true;
        deadline_.cancel();
        up_ = true;
        out_queued_.clear();  // requests are made while up, never before
        asio::co_spawn(
            io_, [self = shared_from_this(), alive]() { return self->write_loop(alive); },
            asio::detached);
        on_state_(true, "");
        if (closed_) co_return "closed";
        continue;
      }
      on_reply_(frame);
      if (closed_) co_return "closed";
    }
    // Room for the next read: move what is left to the front, grow for a large frame.
    if (begin > 0) {
      std::memmove(in.data(), in.data() + begin, end - begin);
      end -= begin;
      begin = 0;
    }
    if (end == in.size()) in.resize(std::min<std::size_t>(in.size() * 2, kMaxPeerFrame + 64));
    const std::size_t n = co_await socket_.async_read_some(
        asio::buffer(in.data() + end, in.size() - end), net::redirect(ec));
    if (ec) {
      co_return fmt::format("{} {}: {}", handshaken ? "read from" : "HELLO from", where,
                            *timed_out ? "timed out" : ec.message());
    }
    end += n;
  }
}

asio::awaitable<void> PeerLink::write_loop(std::shared_ptr<bool> alive) {
  auto self = shared_from_this();
  while (*alive && !closed_) {
    boost::system::error_code ec;
    if (out_queued_.empty()) {
      write_signal_.expires_at(asio::steady_timer::time_point::max());
      co_await write_signal_.async_wait(net::redirect(ec));
      continue;
    }
    std::swap(out_queued_, out_writing_);
    writing_ = true;
    co_await asio::async_write(socket_, asio::buffer(out_writing_), net::redirect(ec));
    writing_ = false;
    out_writing_.clear();
    if (ec) {
      fail_session();  // the reader sees the error and ends the session
      co_return;
    }
  }
}

}  // namespace sluice::server
