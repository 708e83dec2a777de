// One client connection, living on one shard's thread: a reader coroutine that decodes and
// handles the complete frames of each read (pausing while output backs up), a writer coroutine that
// sends everything queued in one write, and a watchdog coroutine for the idle timeout and the close
// grace period. Everything here runs on the shard's thread; other shards reach a connection only
// through hand-over tasks that come back to this shard (docs/ARCHITECTURE.md).
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/key_hash.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace sluice::server {

class Shard;
struct PendingFrame;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `this_shard` is the shard index for a shard port, protocol::kPublicPort for the public one.
  // `counted` says whether the connection holds a slot of max_connections.
  Connection(Shard& shard, boost::asio::ip::tcp::socket socket, std::uint16_t this_shard,
             bool counted);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Starts the reader, writer and watchdog coroutines.
  void start();
  // Sends one ERROR and closes, without reading anything (used over max_connections).
  void start_refused(protocol::ErrorCode code, std::string_view message);
  // Closes the socket and stops the coroutines. Idempotent.
  void close();

  // A frame whose hand-over tasks are all back: encode its reply (unless closed) and forget it.
  void finish_frame(PendingFrame& frame);
  // Sends the queued output now, without blocking, when no write is in flight: a reply usually
  // leaves without a turn of the writer. What the socket does not take, and any error, is left
  // to the writer.
  void flush_now();

 private:
  boost::asio::awaitable<void> read_loop();
  boost::asio::awaitable<void> write_loop();
  boost::asio::awaitable<void> watchdog_loop();
  void spawn(boost::asio::awaitable<void> coroutine);

  // Decodes and handles the complete frames in the input buffer until none is left or
  // should_pause_reading(); sets input_held_ when it stopped with frames possibly left.
  // Returns whether any frame was handled.
  bool handle_input();
  // After handle_input(): notes the activity and wakes the writer.
  void after_input(bool handled_any);
  void handle_frame(const protocol::Frame& frame);
  void handle_hello(std::uint32_t request_id, std::span<const std::uint8_t> body);
  void handle_acquire(std::uint32_t request_id, std::span<const std::uint8_t> body);
  void handle_reset(std::uint32_t request_id, std::span<const std::uint8_t> body);
  void handle_stats(std::uint32_t request_id, std::span<const std::uint8_t> body);
  // Sends the frame's foreign items (staged in the shard) to their owners.
  void hand_over(PendingFrame* frame);
  // A protocol error: counts it, then send_error_and_close().
  void fail(std::uint32_t request_id, protocol::ErrorCode code, std::string_view message);
  // ERROR UNAUTHENTICATED (server/auth.h): counts it, then send_error_and_close().
  void fail_authentication(std::uint32_t request_id, std::string_view message);
  // Queues an ERROR after what is already queued; nothing is handled or sent after it.
  void send_error_and_close(std::uint32_t request_id, protocol::ErrorCode code,
                            std::string_view message);
  // Stops handling input; the writer sends what is queued, then closes.
  void begin_closing();
  bool should_pause_reading() const;
  void wake_writer();
  // Has the queued output sent once the handlers already queued on the shard have run
  // (Shard::queue_flush), by flush_now().
  void flush();

  Shard& shard_;
  boost::asio::ip::tcp::socket socket_;
  const std::uint16_t this_shard_;
  const bool counted_;
  const protocol::FrameDecoder decoder_;

  // Input: bytes [in_begin_, in_end_) of in_ are read and not yet decoded.
  std::unique_ptr<std::uint8_t[]> in_;
  std::size_t in_capacity_ = 0;
  std::size_t in_begin_ = 0;
  std::size_t in_end_ = 0;
  // handle_input() paused with bytes left that may hold complete frames: they are handled
  // before the next socket read.
  bool input_held_ = false;

  // Output: handlers append to out_queued_; the writer swaps it with out_writing_ and sends all.
  protocol::Bytes out_queued_;
  protocol::Bytes out_writing_;

  boost::asio::steady_timer write_signal_;  // the writer sleeps on it; cancel() wakes it
  boost::asio::steady_timer read_resume_;   // the reader sleeps on it while output backs up
  boost::asio::steady_timer watchdog_timer_;

  std::chrono::steady_clock::time_point last_frame_;     // idle timeout counts from here
  std::chrono::steady_clock::time_point closing_since_;  // close grace period counts from here
  std::uint32_t frames_pending_ = 0;                     // frames waiting for hand-over tasks
  bool authenticated_;          // the server needs no token, or a HELLO brought the right one
  bool closing_ = false;        // no more input is handled; close once the output is written
  bool failed_ = false;         // an ERROR is queued: later replies are dropped
  bool reader_done_ = false;    // the peer closed its side (or the read failed)
  bool shutdown_sent_ = false;  // our side is shut down: everything queued was written
  bool closed_ = false;
  bool read_paused_ = false;   // the reader waits on read_resume_ for output to drain
  bool flush_queued_ = false;  // flush_now() is due: flush() need not queue it again
  bool writing_ = false;  // the writer has out_writing_ in flight: flush() must not overtake it

  // Scratch reused by the handlers (no allocation per frame once grown).
  std::vector<protocol::AcquireItem> acquire_items_;
  std::vector<protocol::AcquireResult> acquire_results_;
  std::vector<KeyHash> acquire_hashes_;     // by item index, for the items this shard owns
  std::vector<std::uint32_t> local_items_;  // their indices
  std::vector<std::string_view> reset_keys_;
  std::vector<protocol::ResetStatus> reset_results_;
};

}  // namespace sluice::server
