// SocketPeer: one connection accepted by a shard (from a client, or from another node), the
// transport half of a request's path, the Peer (server/peer.h) the dispatcher sees over a socket
// (tests/server/memory_node.h has MemoryPeer, the same in memory). It moves bytes and frames, and
// the shard's Dispatcher executes them (server/dispatcher.h). A reader coroutine hands the
// complete frames of each read to the dispatcher (pausing while output backs up), a writer
// coroutine sends everything queued in one write, and a watchdog coroutine keeps the idle
// timeout and the close grace period. Everything here runs on the shard's thread; other shards
// reach a connection only through hand-over tasks that come back to this shard
// (docs/ARCHITECTURE.md).
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "protocol/frame.h"
#include "protocol/messages.h"
#include "server/peer.h"
#include "server/reply_queue.h"

namespace sluice::server {

class Shard;

class SocketPeer final : public Peer {
 public:
  // `this_shard` is the shard index for a shard port, protocol::kPublicPort for the public one.
  // `counted` says whether the connection holds a slot of max_connections.
  SocketPeer(Shard& shard, boost::asio::ip::tcp::socket socket, std::uint16_t this_shard,
             bool counted);
  ~SocketPeer() override;

  // Starts the reader, writer and watchdog coroutines.
  void start();
  // Sends one ERROR and closes, without reading anything (used over max_connections).
  void start_refused(protocol::WireErrorCode code, std::string_view message);
  // Closes the socket and stops the coroutines. Idempotent.
  void close();
  // The server is stopping: handles the complete frames already received (past back-pressure),
  // reads nothing more, and once every frame is answered queues ERROR SHUTTING_DOWN, sends
  // everything and closes, by `deadline` at the latest (then it is closed as it is).
  void shut_down(std::chrono::steady_clock::time_point deadline);

  // Peer: what the dispatcher sees.
  protocol::Bytes& reply_buffer() override { return output_.tail(); }
  bool wants_replies() const override { return !closed_ && !failed_; }
  void reject(std::uint32_t request_id, protocol::WireErrorCode code,
              std::string_view message) override;
  void frame_finished() override;
  bool stop_dispatching() const override {
    return closing_ || (!shutting_down_ && (should_pause_reading() || turn_spent()));
  }

  // Output one turn of the reader may produce before it lets the shard's other connections
  // go first: a client whose requests each cost a large reply (STATS, a large PING) cannot
  // hold the shard for longer than this much copying.
  static constexpr std::size_t kTurnOutput = 16 * 1024;

  // Bytes of buffers this connection has charged to its shard's budget (footprint()).
  std::size_t charged() const { return charged_; }
  // Whether shed_for_memory() would still do something.
  bool sheddable() const { return !closed_ && !shed_; }
  // Out of buffer memory: drops the queued output and the input held, and closes with ERROR
  // OVERLOADED (at once, without it, when a write is in flight: a client that does not read
  // its last write would never see it). `shard_budget` is named in the message.
  void shed_for_memory(std::size_t shard_budget);

  // Sends the queued output now, without blocking, when no write is in flight: a reply usually
  // leaves without a turn of the writer. What the socket does not take, and any error, is left
  // to the writer.
  void flush_now();

 private:
  boost::asio::awaitable<void> read_loop();
  boost::asio::awaitable<void> write_loop();
  boost::asio::awaitable<void> watchdog_loop();
  void spawn(boost::asio::awaitable<void> coroutine);

  // Has the dispatcher handle the complete frames in the input buffer until none is left or
  // stop_dispatching(); sets input_held_ when it stopped with frames possibly left.
  // Returns whether any frame was handled.
  bool handle_input();
  // After handle_input(): notes the activity and wakes the writer.
  void after_input(bool handled_any);
  // Queues an ERROR after what is already queued; nothing is handled or sent after it.
  void send_error_and_close(std::uint32_t request_id, protocol::WireErrorCode code,
                            std::string_view message);
  // Stops handling input; the writer sends what is queued, then closes.
  void begin_closing();
  // Shutting down with every frame answered: queues ERROR SHUTTING_DOWN (once).
  void maybe_send_shutdown_error();
  bool should_pause_reading() const;
  // This turn's replies reached kTurnOutput (handle_input() sets the mark).
  bool turn_spent() const { return output_.queued() >= turn_output_mark_ + kTurnOutput; }
  void wake_writer();
  // Has the queued output sent once the handlers already queued on the shard have run
  // (Shard::queue_flush), by flush_now().
  void flush();
  // What the connection's buffers hold now, as counted against the buffer budget: input grown
  // beyond kBaseInputBuffer, both output buffers' capacity, and its cross-shard backlog.
  std::size_t footprint() const;
  // Charges the change of footprint() to the shard; enforces the budget when it grew.
  void recharge();
  // Gives an input buffer grown for a large frame back, once it holds nothing.
  void shrink_input();
  std::shared_ptr<SocketPeer> self() {
    return std::static_pointer_cast<SocketPeer>(shared_from_this());
  }

  Shard& shard_;
  boost::asio::ip::tcp::socket socket_;
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
  // output_.queued() when the current handle_input() began (turn_spent()).
  std::size_t turn_output_mark_ = 0;
  // input_held_ because the turn was spent, not by back-pressure: yield, then go on.
  bool turn_yield_ = false;

  // Output: handlers append to its tail; the writer sends everything queued in one write.
  ReplyQueue output_;
  std::vector<boost::asio::const_buffer> write_buffers_;  // the blocks of the write in flight

  boost::asio::steady_timer write_signal_;  // the writer sleeps on it; cancel() wakes it
  boost::asio::steady_timer read_resume_;   // the reader sleeps on it while output backs up
  boost::asio::steady_timer watchdog_timer_;

  std::chrono::steady_clock::time_point last_frame_;         // idle timeout counts from here
  std::chrono::steady_clock::time_point closing_since_;      // close grace period counts from here
  std::chrono::steady_clock::time_point shutdown_deadline_;  // when shutting_down_
  bool shutting_down_ = false;                               // shut_down() was called
  bool closing_ = false;        // no more input is handled; close once the output is written
  bool failed_ = false;         // an ERROR is queued: later replies are dropped
  bool reader_done_ = false;    // the peer closed its side (or the read failed)
  bool shutdown_sent_ = false;  // our side is shut down: everything queued was written
  bool closed_ = false;
  bool read_paused_ = false;   // the reader waits on read_resume_ for output to drain
  bool flush_queued_ = false;  // flush_now() is due: flush() need not queue it again
  bool writing_ = false;       // the writer has a write in flight: flush() must not overtake it
  bool reading_ = false;       // the reader waits in async_read_some, on in_
  bool shed_ = false;          // closed by shed_for_memory()
  std::size_t charged_ = 0;
};

}  // namespace sluice::server
