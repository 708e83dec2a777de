#include "server/connection.h"

#include <utility>

#include <fmt/core.h>
#include <algorithm>
#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <exception>

#include <sys/socket.h>

#include "core/key_hash.h"
#include "core/rule.h"
#include "server/auth.h"
#include "server/shard.h"

namespace sluice::server {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using protocol::ErrorCode;

namespace {

constexpr std::size_t kInitialInput = 32 * 1024;
// Reading and decoding pause while config.max_queued_output bytes wait for the writer, or this
// many frames wait for other shards, so a client that pipelines without reading cannot grow
// memory without bound.
constexpr std::uint32_t kMaxFramesPending = 4096;
// How long a closing connection may take to send its last bytes and see the peer close.
constexpr auto kCloseGrace = std::chrono::seconds(1);

auto redirect(boost::system::error_code& ec) {
  return asio::redirect_error(asio::use_awaitable, ec);
}

}  // namespace

Connection::Connection(Shard& shard, tcp::socket socket, std::uint16_t this_shard, bool counted)
    : shard_(shard),
      socket_(std::move(socket)),
      this_shard_(this_shard),
      counted_(counted),
      decoder_(shard.context().config.max_frame),
      write_signal_(shard.io()),
      read_resume_(shard.io()),
      watchdog_timer_(shard.io()),
      last_frame_(Clock::now()),
      authenticated_(!requires_authentication(shard.context().config)) {}

// Runs on the shard thread, or on the stopping thread after the shard threads have exited:
// it must not touch the shard.
Connection::~Connection() = default;

void Connection::start() {
  in_capacity_ = kInitialInput;
  in_ = std::make_unique_for_overwrite<std::uint8_t[]>(in_capacity_);
  spawn(read_loop());
  spawn(write_loop());
  spawn(watchdog_loop());
}

void Connection::start_refused(ErrorCode code, std::string_view message) {
  failed_ = true;
  protocol::encode_error(out_queued_, 0, code, message);
  begin_closing();
  start();
}

void Connection::spawn(asio::awaitable<void> coroutine) {
  asio::co_spawn(socket_.get_executor(), std::move(coroutine),
                 [self = shared_from_this()](std::exception_ptr e) {
                   if (!e) return;
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::exception& ex) {
                     fmt::print(stderr, "sluiced: shard {}: connection: {}\n", self->shard_.index(),
                                ex.what());
                   }
                   self->close();
                 });
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  closing_ = true;
  boost::system::error_code ec;
  socket_.close(ec);
  write_signal_.cancel();
  read_resume_.cancel();
  watchdog_timer_.cancel();
  shard_.on_connection_closed(this, counted_);
}

void Connection::begin_closing() {
  if (closing_) return;
  closing_ = true;
  closing_since_ = Clock::now();
  watchdog_timer_.cancel();  // re-evaluate: the deadline is now the close grace period
  read_resume_.cancel();
  wake_writer();
}

void Connection::send_error_and_close(std::uint32_t request_id, ErrorCode code,
                                      std::string_view message) {
  if (closing_) return;
  failed_ = true;
  protocol::encode_error(out_queued_, request_id, code, message);
  begin_closing();
}

void Connection::fail(std::uint32_t request_id, ErrorCode code, std::string_view message) {
  shard_.counters()[Stat::kProtocolErrors].add();
  send_error_and_close(request_id, code, message);
}

void Connection::fail_authentication(std::uint32_t request_id, std::string_view message) {
  shard_.counters()[Stat::kAuthFailures].add();
  send_error_and_close(request_id, ErrorCode::kUnauthenticated, message);
}

void Connection::wake_writer() { write_signal_.cancel(); }

void Connection::flush() {
  if (out_queued_.empty() || flush_queued_) return;
  flush_queued_ = true;
  shard_.queue_flush(shared_from_this());
}

void Connection::flush_now() {
  flush_queued_ = false;
  if (out_queued_.empty()) return;
  if (!writing_ && !closed_) {
    // Never blocks; an error (the socket full, or broken) leaves the bytes to the writer.
    const ssize_t sent = ::send(socket_.native_handle(), out_queued_.data(), out_queued_.size(),
                                MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent > 0) out_queued_.erase(out_queued_.begin(), out_queued_.begin() + sent);
    // The reader may have paused on this output since it queued the flush.
    if (read_paused_ && !should_pause_reading()) read_resume_.cancel();
    // All sent: nothing for the writer, unless it is to close the connection after it.
    if (out_queued_.empty() && !closing_) return;
  }
  wake_writer();
}

bool Connection::should_pause_reading() const {
  return out_queued_.size() >= shard_.context().config.max_queued_output ||
         frames_pending_ >= kMaxFramesPending;
}

asio::awaitable<void> Connection::read_loop() {
  const std::size_t max_input = protocol::kHeaderSize + decoder_.max_frame();
  for (;;) {
    boost::system::error_code ec;
    if (!closing_ && should_pause_reading()) {
      read_resume_.expires_at(Clock::time_point::max());
      read_paused_ = true;
      co_await read_resume_.async_wait(redirect(ec));
      read_paused_ = false;
      if (closed_) break;
      continue;
    }
    if (!closing_ && input_held_) {
      // Frames read before the pause: handle them before reading more (they may be all the
      // client sends, so waiting for new bytes could wait forever).
      after_input(handle_input());
      continue;
    }
    if (closing_ || in_begin_ == in_end_) in_begin_ = in_end_ = 0;  // closing: discard input
    if (in_end_ == in_capacity_) {
      if (in_begin_ > 0) {
        std::memmove(in_.get(), in_.get() + in_begin_, in_end_ - in_begin_);
        in_end_ -= in_begin_;
        in_begin_ = 0;
      } else {
        // A partial frame fills the buffer: grow toward the largest frame the decoder allows
        // (it rejects bigger ones from their header, so this always makes room).
        const std::size_t capacity = std::min(in_capacity_ * 2, max_input);
        if (capacity <= in_capacity_) {
          fail(0, ErrorCode::kInternal, "input buffer exhausted");
          continue;
        }
        auto grown = std::make_unique_for_overwrite<std::uint8_t[]>(capacity);
        std::memcpy(grown.get(), in_.get(), in_end_);
        in_ = std::move(grown);
        in_capacity_ = capacity;
      }
    }
    const std::size_t n = co_await socket_.async_read_some(
        asio::buffer(in_.get() + in_end_, in_capacity_ - in_end_), redirect(ec));
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

asio::awaitable<void> Connection::write_loop() {
  while (!closed_) {
    boost::system::error_code ec;
    if (out_queued_.empty()) {
      // A failed connection stops at its ERROR; one the peer finished waits for its last
      // hand-over replies.
      if (closing_ && (failed_ || frames_pending_ == 0)) break;
      write_signal_.expires_at(Clock::time_point::max());
      co_await write_signal_.async_wait(redirect(ec));
      continue;
    }
    std::swap(out_queued_, out_writing_);
    writing_ = true;
    co_await asio::async_write(socket_, asio::buffer(out_writing_), redirect(ec));
    writing_ = false;
    out_writing_.clear();
    if (ec) {
      close();
      co_return;
    }
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

asio::awaitable<void> Connection::watchdog_loop() {
  const auto idle_timeout = shard_.context().config.idle_timeout;
  while (!closed_) {
    Clock::time_point deadline = Clock::time_point::max();
    if (closing_) {
      deadline = closing_since_ + kCloseGrace;
    } else if (idle_timeout.count() > 0) {
      deadline = last_frame_ + idle_timeout;
    }
    if (Clock::now() >= deadline) {
      if (closing_) {
        close();
        break;
      }
      shard_.counters()[Stat::kIdleClosed].add();
      send_error_and_close(
          0, ErrorCode::kIdleTimeout,
          fmt::format("closed after {} ms without a request", idle_timeout.count()));
      continue;
    }
    boost::system::error_code ec;
    watchdog_timer_.expires_at(deadline);
    co_await watchdog_timer_.async_wait(redirect(ec));
  }
}

void Connection::after_input(bool handled_any) {
  if (handled_any) {
    last_frame_ = Clock::now();
    shard_.publish_table_stats();
  }
  shard_.TEST_record_queued_output(out_queued_.size());
  flush();
}

bool Connection::handle_input() {
  bool any = false;
  input_held_ = false;
  while (!closing_) {
    if (should_pause_reading()) {
      input_held_ = in_begin_ != in_end_;
      break;
    }
    const std::span<const std::uint8_t> input(in_.get() + in_begin_, in_end_ - in_begin_);
    const protocol::DecodeResult decoded = decoder_.decode(input);
    if (decoded.status == protocol::DecodeStatus::kNeedMore) break;
    if (decoded.status == protocol::DecodeStatus::kMalformed) {
      fail(decoded.request_id, decoded.error, decoded.reason);
      break;
    }
    any = true;
    handle_frame(decoded.frame);  // the body stays valid: the buffer moves only before a read
    in_begin_ += decoded.frame_size;
  }
  return any;
}

void Connection::handle_frame(const protocol::Frame& frame) {
  const protocol::FrameHeader& header = frame.header;
  if (!authenticated_ && header.opcode != protocol::Opcode::kHello) {
    return fail_authentication(header.request_id, kHelloFirstMessage);
  }
  if (header.is_reply()) {
    return fail(header.request_id, ErrorCode::kMalformedFrame,
                "a client must not send a reply frame");
  }
  switch (header.opcode) {
    case protocol::Opcode::kHello:
      return handle_hello(header.request_id, frame.body);
    case protocol::Opcode::kPing:
      return protocol::encode_ping(out_queued_, header.request_id, frame.body, /*reply=*/true);
    case protocol::Opcode::kAcquire:
      return handle_acquire(header.request_id, frame.body);
    case protocol::Opcode::kReset:
      return handle_reset(header.request_id, frame.body);
    case protocol::Opcode::kStats:
      return handle_stats(header.request_id, frame.body);
    default:
      return fail(
          header.request_id, ErrorCode::kUnknownOpcode,
          fmt::format("unknown request opcode 0x{:02x}", static_cast<unsigned>(header.opcode)));
  }
}

void Connection::handle_hello(std::uint32_t request_id, std::span<const std::uint8_t> body) {
  protocol::HelloRequest request;
  if (const auto parsed = protocol::parse_hello_request(body, request); !parsed) {
    return fail(request_id, parsed.error, parsed.reason);
  }
  if (request.version < 1) {
    return fail(request_id, ErrorCode::kUnsupportedVersion,
                fmt::format("HELLO version {} is not supported (this server speaks 1 to {})",
                            request.version, protocol::kVersion));
  }
  // Every HELLO is checked: a wrong token closes even an authenticated connection.
  if (!hello_admits(shard_.context().config, request)) {
    return fail_authentication(request_id, kWrongTokenMessage);
  }
  authenticated_ = true;
  const ServerContext& context = shard_.context();
  protocol::HelloReply reply;
  reply.version = std::min(request.version, protocol::kVersion);
  reply.this_shard = this_shard_;
  reply.max_frame = context.config.max_frame;
  reply.max_key = context.config.max_key;
  reply.max_batch = context.config.max_batch;
  reply.shard_ports = context.shard_ports;
  reply.node_id = context.node_id;
  protocol::encode_hello_reply(out_queued_, request_id, reply);
}

void Connection::handle_acquire(std::uint32_t request_id, std::span<const std::uint8_t> body) {
  const ServerContext& context = shard_.context();
  if (const auto parsed =
          protocol::parse_acquire_request(body, context.config.max_batch, acquire_items_);
      !parsed) {
    return fail(request_id, parsed.error, parsed.reason);
  }
  acquire_results_.assign(acquire_items_.size(), protocol::AcquireResult{});
  acquire_hashes_.resize(acquire_items_.size());
  local_items_.clear();
  auto& staging = shard_.staging();
  bool handed_over = false;
  std::uint64_t invalid = 0;
  for (std::size_t i = 0; i < acquire_items_.size(); ++i) {
    const protocol::AcquireItem& item = acquire_items_[i];
    protocol::AcquireResult& result = acquire_results_[i];
    if (validate(item.rule, item.cost, context.config.sliding_log_cap) != RuleError::kOk) {
      result.status = protocol::ItemStatus::kInvalidRule;
      ++invalid;
      continue;
    }
    if (item.key.empty() || item.key.size() > context.config.max_key) {
      result.status = protocol::ItemStatus::kInvalidKey;
      ++invalid;
      continue;
    }
    const KeyHash hash = hash_key(item.key);
    const unsigned owner = shard_for(hash, context.shard_count);
    if (owner != shard_.index()) {
      staging[owner].push_back(
          HandoverItem{hash, item.rule, item.cost, item.peek, static_cast<std::uint32_t>(i)});
      handed_over = true;
      continue;
    }
    acquire_hashes_[i] = hash;
    local_items_.push_back(static_cast<std::uint32_t>(i));
  }
  if (!local_items_.empty()) {
    // The owned items are decided in a second pass, with their records prefetched ahead.
    const std::uint64_t now_ns = context.clock->now_ns();
    shard_.decide_prefetched(
        local_items_.size(), [&](std::size_t k) { return acquire_hashes_[local_items_[k]]; },
        [&](std::size_t k) {
          const std::uint32_t i = local_items_[k];
          const protocol::AcquireItem& item = acquire_items_[i];
          acquire_results_[i] =
              shard_.acquire_local(acquire_hashes_[i], item.rule, item.cost, item.peek, now_ns);
        });
  }
  if (invalid != 0) shard_.counters()[Stat::kInvalidItems].add(invalid);
  if (!handed_over) {
    protocol::encode_acquire_reply(out_queued_, request_id, acquire_results_);
    return;
  }
  PendingFrame* frame = shard_.new_pending_frame();
  frame->opcode = protocol::Opcode::kAcquire;
  frame->request_id = request_id;
  frame->acquire_results.swap(acquire_results_);
  hand_over(frame);
}

void Connection::handle_reset(std::uint32_t request_id, std::span<const std::uint8_t> body) {
  const ServerContext& context = shard_.context();
  if (const auto parsed =
          protocol::parse_reset_request(body, context.config.max_batch, reset_keys_);
      !parsed) {
    return fail(request_id, parsed.error, parsed.reason);
  }
  reset_results_.assign(reset_keys_.size(), protocol::ResetStatus::kAbsent);
  auto& staging = shard_.staging();
  bool handed_over = false;
  std::uint64_t invalid = 0;
  const std::uint64_t now_ns = context.clock->now_ns();
  for (std::size_t i = 0; i < reset_keys_.size(); ++i) {
    const std::string_view key = reset_keys_[i];
    if (key.empty() || key.size() > context.config.max_key) {
      reset_results_[i] = protocol::ResetStatus::kInvalidKey;
      ++invalid;
      continue;
    }
    const KeyHash hash = hash_key(key);
    const unsigned owner = shard_for(hash, context.shard_count);
    if (owner != shard_.index()) {
      HandoverItem item;
      item.hash = hash;
      item.index = static_cast<std::uint32_t>(i);
      staging[owner].push_back(item);
      handed_over = true;
      continue;
    }
    reset_results_[i] = shard_.reset_local(hash, now_ns);
  }
  if (invalid != 0) shard_.counters()[Stat::kInvalidItems].add(invalid);
  if (!handed_over) {
    protocol::encode_reset_reply(out_queued_, request_id, reset_results_);
    return;
  }
  PendingFrame* frame = shard_.new_pending_frame();
  frame->opcode = protocol::Opcode::kReset;
  frame->request_id = request_id;
  frame->reset_results.swap(reset_results_);
  hand_over(frame);
}

void Connection::hand_over(PendingFrame* frame) {
  auto& staging = shard_.staging();
  // Count first: the frame is complete before any of its tasks can come back.
  for (const auto& items : staging) {
    if (!items.empty()) ++frame->tasks_pending;
  }
  ++frames_pending_;
  std::uint64_t items_handed_over = 0;
  for (unsigned owner = 0; owner < staging.size(); ++owner) {
    if (staging[owner].empty()) continue;
    HandoverTask* task = shard_.new_task();
    task->phase = HandoverTask::Phase::kRun;
    task->opcode = frame->opcode;
    task->origin = shard_.index();
    task->connection = shared_from_this();
    task->frame = frame;
    task->items.swap(staging[owner]);  // the staging slot keeps the task's old capacity
    staging[owner].clear();
    items_handed_over += task->items.size();
    shard_.send(owner, task);
  }
  shard_.counters()[Stat::kHandedOver].add(items_handed_over);
}

void Connection::finish_frame(PendingFrame& frame) {
  --frames_pending_;
  if (!closed_ && !failed_) {
    if (frame.opcode == protocol::Opcode::kAcquire) {
      protocol::encode_acquire_reply(out_queued_, frame.request_id, frame.acquire_results);
    } else {
      protocol::encode_reset_reply(out_queued_, frame.request_id, frame.reset_results);
    }
    flush();
  }
  read_resume_.cancel();  // a reader paused on pending frames may go on
}

void Connection::handle_stats(std::uint32_t request_id, std::span<const std::uint8_t> body) {
  if (const auto parsed = protocol::parse_stats_request(body); !parsed) {
    return fail(request_id, parsed.error, parsed.reason);
  }
  shard_.append_stats_reply(out_queued_, request_id);
}

}  // namespace sluice::server
