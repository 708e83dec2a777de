#include "server/socket_peer.h"
#include "log/log.h"

#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>
#include <algorithm>
#include <array>
#include <cstring>
#include <exception>

#include <sys/socket.h>

#include "server/dispatcher.h"
#include "server/shard.h"

namespace sluice::server {

namespace asio = boost::asio;
using asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using protocol::WireErrorCode;

namespace {

// The least an input buffer grows to beyond kBaseInputBuffer (a large frame is arriving).
constexpr std::size_t kGrownInput = 128 * 1024;
// What a handed-over item holds until its task is back: the item and its result slot.
constexpr std::size_t kBacklogItemBytes = sizeof(HandoverItem) + sizeof(protocol::AcquireResult);
// How long a closing connection may take to send its last bytes and see the peer close.
constexpr auto kCloseGrace = std::chrono::seconds(1);

}  // namespace

SocketPeer::SocketPeer(Shard& shard, tcp::socket socket, std::uint16_t this_shard, bool counted)
    : Peer(this_shard),
      shard_(shard),
      socket_(std::move(socket)),
      counted_(counted),
      decoder_(shard.context().config.max_frame),
      write_signal_(shard.io()),
      read_resume_(shard.io()),
      watchdog_timer_(shard.io()),
      last_frame_(SteadyClock::now()) {}

// Runs on the shard thread, or on the stopping thread after the shard threads have exited:
// it must not touch the shard.
SocketPeer::~SocketPeer() = default;

void SocketPeer::start() {
  in_capacity_ = kBaseInputBuffer;
  in_ = std::make_unique_for_overwrite<std::uint8_t[]>(in_capacity_);
  spawn(read_loop());
  spawn(write_loop());
  spawn(watchdog_loop());
}

void SocketPeer::start_refused(WireErrorCode code, std::string_view message) {
  failed_ = true;
  protocol::encode_error(output_.tail(), 0, code, message);
  begin_closing();
  start();
  recharge();
}

void SocketPeer::spawn(asio::awaitable<void> coroutine) {
  asio::co_spawn(
      socket_.get_executor(), std::move(coroutine), [self = self()](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          log::error("shard",
                     fmt::format("shard {}: connection: {}", self->shard_.index(), ex.what()));
        }
        self->close();
      });
}

void SocketPeer::close() {
  if (closed_) return;
  closed_ = true;
  closing_ = true;
  boost::system::error_code ec;
  socket_.close(ec);
  write_signal_.cancel();
  read_resume_.cancel();
  watchdog_timer_.cancel();
  // The buffers are freed when the coroutines have unwound, on this thread, right after.
  shard_.charge_buffers(-static_cast<std::int64_t>(charged_));
  charged_ = 0;
  shard_.on_connection_closed(this, counted_);
}

std::size_t SocketPeer::footprint() const {
  std::size_t bytes = output_.held();
  // Once shed, the input is discarded and its buffer freed as soon as the reader wakes, which
  // shed_for_memory() makes happen at once: it no longer counts.
  if (in_capacity_ > kBaseInputBuffer && !shed_) bytes += in_capacity_ - kBaseInputBuffer;
  return bytes + items_pending() * kBacklogItemBytes;
}

void SocketPeer::recharge() {
  if (closed_) return;
  const std::size_t now = footprint();
  if (now == charged_) return;
  shard_.charge_buffers(static_cast<std::int64_t>(now) - static_cast<std::int64_t>(charged_));
  const bool grew = now > charged_;
  charged_ = now;
  if (grew && shard_.over_buffer_budget()) shard_.enforce_buffer_budget();
}

void SocketPeer::shrink_input() {
  if (in_capacity_ <= kBaseInputBuffer || in_begin_ != in_end_) return;
  in_ = std::make_unique_for_overwrite<std::uint8_t[]>(kBaseInputBuffer);
  in_capacity_ = kBaseInputBuffer;
  in_begin_ = in_end_ = 0;
  recharge();
}

void SocketPeer::shed_for_memory(std::size_t shard_budget) {
  if (!sheddable()) return;
  shed_ = true;
  shard_.engine().counters()[ShardStat::kOverloadClosed].add();
  if (writing_) {
    close();
    return;
  }
  const std::size_t held = charged_;
  output_.drop_queued();
  failed_ = true;
  protocol::encode_error(
      output_.tail(), 0, WireErrorCode::kOverloaded,
      fmt::format("closed: this connection held {} bytes of buffers, the most on a shard over its "
                  "buffer budget of {} bytes (--max-buffer-memory)",
                  held, shard_budget));
  input_held_ = false;
  // Only the reader may free the input buffer: wake it from its read (the writer has no
  // operation on the socket, so only the read is cancelled). Closing, it discards the input.
  if (reading_ && in_capacity_ > kBaseInputBuffer) {
    boost::system::error_code ec;
    socket_.cancel(ec);
  }
  if (!closing_) {
    begin_closing();
  } else {
    read_resume_.cancel();
    wake_writer();
  }
  recharge();
}

void SocketPeer::begin_closing() {
  if (closing_) return;
  closing_ = true;
  closing_since_ = SteadyClock::now();
  watchdog_timer_.cancel();  // re-evaluate: the deadline is now the close grace period
  read_resume_.cancel();
  wake_writer();
}

void SocketPeer::shut_down(SteadyClock::time_point deadline) {
  if (closed_ || shutting_down_) return;
  shutting_down_ = true;
  shutdown_deadline_ = deadline;
  if (!closing_) {
    // Frames held back by back-pressure were received: they are answered too.
    after_input(handle_input());
    begin_closing();
  } else {
    watchdog_timer_.cancel();  // re-evaluate: the deadline is now the shutdown's
  }
  maybe_send_shutdown_error();
}

void SocketPeer::maybe_send_shutdown_error() {
  if (!shutting_down_ || failed_ || closed_ || frames_pending() != 0) return;
  failed_ = true;
  protocol::encode_error(output_.tail(), 0, WireErrorCode::kShuttingDown,
                         "the server is shutting down");
  recharge();
  flush();
  wake_writer();
}

void SocketPeer::send_error_and_close(std::uint32_t request_id, WireErrorCode code,
                                      std::string_view message) {
  if (closing_) return;
  failed_ = true;
  protocol::encode_error(output_.tail(), request_id, code, message);
  begin_closing();
}

void SocketPeer::reject(std::uint32_t request_id, WireErrorCode code, std::string_view message) {
  send_error_and_close(request_id, code, message);
}

void SocketPeer::wake_writer() { write_signal_.cancel(); }

void SocketPeer::flush() {
  if (output_.queued() == 0 || flush_queued_) return;
  flush_queued_ = true;
  shard_.queue_flush(self());
}

void SocketPeer::flush_now() {
  flush_queued_ = false;
  if (output_.queued() == 0) return;
  // Sealed blocks go first, through the writer: only a tail alone is sent from here.
  if (!writing_ && !closed_ && !output_.has_sealed()) {
    // Never blocks; an error (the socket full, or broken) leaves the bytes to the writer.
    const protocol::Bytes& tail = output_.tail();
    const ssize_t sent =
        ::send(socket_.native_handle(), tail.data(), tail.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent > 0) output_.consume_tail(static_cast<std::size_t>(sent));
    recharge();
    // The reader may have paused on this output since it queued the flush.
    if (read_paused_ && !should_pause_reading()) read_resume_.cancel();
    // All sent: nothing for the writer, unless it is to close the connection after it.
    if (output_.queued() == 0 && !closing_) return;
  }
  wake_writer();
}

bool SocketPeer::should_pause_reading() const {
  const ServerConfig& config = shard_.context().config;
  return output_.size() >= config.max_queued_output || Dispatcher::backlog_full(*this, config);
}

asio::awaitable<void> SocketPeer::read_loop() {
  const std::size_t max_input = protocol::kHeaderSize + decoder_.max_frame();
  for (;;) {
    boost::system::error_code ec;
    if (!closing_ && should_pause_reading()) {
      read_resume_.expires_at(SteadyClock::time_point::max());
      read_paused_ = true;
      co_await read_resume_.async_wait(net::redirect(ec));
      read_paused_ = false;
      if (closed_) break;
      continue;
    }
    if (!closing_ && input_held_) {
      // Frames read before the pause: handle them before reading more (they may be all the
      // client sends, so waiting for new bytes could wait forever). After a spent turn, the
      // handlers already queued on the shard (other connections' reads) run first.
      if (std::exchange(turn_yield_, false)) {
        co_await asio::post(socket_.get_executor(), asio::use_awaitable);
        if (closed_) break;
        continue;
      }
      after_input(handle_input());
      continue;
    }
    if (closing_ || in_begin_ == in_end_) in_begin_ = in_end_ = 0;  // closing: discard input
    if (in_end_ == 0) shrink_input();
    if (in_end_ == in_capacity_) {
      if (in_begin_ > 0) {
        std::memmove(in_.get(), in_.get() + in_begin_, in_end_ - in_begin_);
        in_end_ -= in_begin_;
        in_begin_ = 0;
      } else {
        // A partial frame fills the buffer: grow toward the largest frame the decoder allows
        // (it rejects bigger ones from their header, so this always makes room).
        // At least kGrownInput at once: a grown buffer is then mapped on its own by the
        // allocator (sluiced's M_MMAP_THRESHOLD) and unmapped when freed, instead of leaving
        // 64 KiB pieces behind in the shard's heap (docs/RELIABILITY.md, "What the tests found").
        const std::size_t capacity = std::min(std::max(in_capacity_ * 2, kGrownInput), max_input);
        if (capacity <= in_capacity_) {
          shard_.engine().counters()[ShardStat::kProtocolErrors].add();
          send_error_and_close(0, WireErrorCode::kInternal, "input buffer exhausted");
          continue;
        }
        auto grown = std::make_unique_for_overwrite<std::uint8_t[]>(capacity);
        std::memcpy(grown.get(), in_.get(), in_end_);
        in_ = std::move(grown);
        in_capacity_ = capacity;
        recharge();  // may shed this very connection: look at the state again
        continue;
      }
    }
    reading_ = true;
    const std::size_t n = co_await socket_.async_read_some(
        asio::buffer(in_.get() + in_end_, in_capacity_ - in_end_), net::redirect(ec));
    reading_ = false;
    // Cancelled by shed_for_memory(), so that this loop frees the input: go on closing.
    if (ec == asio::error::operation_aborted && !closed_) continue;
    if (ec) break;  // end of stream, reset, or closed by close()
    if (closing_) continue;
    in_end_ += n;
    after_input(handle_input());
  }
  reader_done_ = true;
  if (closed_) co_return;
  if (!closing_) {
    begin_closing();  // the peer has finished sending: answer what it sent, then close
  } else if (shutdown_sent_) {
    close();  // the ERROR is out and the peer has closed its side
  }
}

asio::awaitable<void> SocketPeer::write_loop() {
  while (!closed_) {
    boost::system::error_code ec;
    if (output_.queued() == 0) {
      // A failed connection stops at its ERROR; one the peer finished waits for its last
      // hand-over replies.
      if (closing_ && (failed_ || frames_pending() == 0)) break;
      write_signal_.expires_at(SteadyClock::time_point::max());
      co_await write_signal_.async_wait(net::redirect(ec));
      continue;
    }
    write_buffers_.clear();
    for (const protocol::Bytes& block : output_.start_write()) {
      write_buffers_.push_back(asio::buffer(block));
    }
    writing_ = true;
    co_await asio::async_write(socket_, write_buffers_, net::redirect(ec));
    writing_ = false;
    output_.finish_write();
    if (ec) {
      close();
      co_return;
    }
    recharge();
    read_resume_.cancel();  // output has drained: a paused reader may go on
  }
  if (closed_) co_return;
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);  // the peer reads our last bytes, then EOF
  shutdown_sent_ = true;
  // Closing while unread input is pending would reset the connection and could destroy the
  // ERROR in flight, so the reader drains input until the peer closes (bounded by the grace).
  if (reader_done_) close();
}

asio::awaitable<void> SocketPeer::watchdog_loop() {
  const auto idle_timeout = shard_.context().config.idle_timeout;
  while (!closed_) {
    SteadyClock::time_point deadline = SteadyClock::time_point::max();
    if (closing_) {
      deadline = shutting_down_ ? shutdown_deadline_ : closing_since_ + kCloseGrace;
    } else if (idle_timeout.count() > 0) {
      deadline = last_frame_ + idle_timeout;
    }
    if (SteadyClock::now() >= deadline) {
      if (closing_) {
        close();
        break;
      }
      shard_.engine().counters()[ShardStat::kIdleClosed].add();
      send_error_and_close(
          0, WireErrorCode::kIdleTimeout,
          fmt::format("closed after {} ms without a request", idle_timeout.count()));
      continue;
    }
    boost::system::error_code ec;
    watchdog_timer_.expires_at(deadline);
    co_await watchdog_timer_.async_wait(net::redirect(ec));
  }
}

void SocketPeer::after_input(bool handled_any) {
  if (handled_any) {
    last_frame_ = SteadyClock::now();
    shard_.engine().publish_table_stats();
  }
  output_.prepare_tail();
  shard_.TEST_record_queued_output(output_.size());
  recharge();
  flush();
}

bool SocketPeer::handle_input() {
  const std::span<const std::uint8_t> input(in_.get() + in_begin_, in_end_ - in_begin_);
  turn_output_mark_ = output_.queued();
  const DispatchResult result = shard_.dispatcher().dispatch_frames(*this, decoder_, input);
  in_begin_ += result.consumed;
  // Paused by back-pressure or a spent turn (not by closing) with bytes left: they may hold
  // whole frames.
  input_held_ = result.stopped_early && !closing_;
  turn_yield_ = input_held_ && !should_pause_reading();
  return result.handled_any;
}

void SocketPeer::frame_finished() {
  output_.prepare_tail();
  if (wants_replies()) flush();
  maybe_send_shutdown_error();
  recharge();
  read_resume_.cancel();  // a reader paused on pending frames may go on
}

}  // namespace sluice::server
