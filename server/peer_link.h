// An outgoing connection from this node to another one (docs/ARCHITECTURE.md, "Node-to-node
// traffic"): it resolves HOST:PORT, connects, says HELLO (protocol 3, framing version 2, the
// node's token), and then carries frames both ways: the owner appends requests to output() and
// calls flush(); every reply frame goes to the reply handler. When the connection fails it is
// retried with a jittered backoff until close(). Everything runs on the io_context given, by
// one thread; the owner's handlers run there too.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "protocol/frame.h"
#include "protocol/messages.h"

namespace sluice::server {

class PeerLink : public std::enable_shared_from_this<PeerLink> {
 public:
  struct Config {
    std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
    std::uint16_t port = 0;
    std::string source;            // local address to connect from (ServerConfig::source_address)
    std::string token;             // sent in HELLO; empty = none
    std::string name = "sluiced";  // HELLO client name, for the other node's logs
    std::uint64_t epoch = 0;       // in the header of every frame sent (set_epoch)
    std::chrono::milliseconds connect_timeout{1000};  // resolve + connect + HELLO
    std::chrono::milliseconds retry_min{20};
    std::chrono::milliseconds retry_max{1000};
    // Output (queued and being written) at most: a flush() that finds more closes the
    // connection ("not reading"), and it is retried as after any failure. The owner keeps
    // below it (the replicator's window); this is the backstop against a peer that stops
    // reading.
    std::size_t max_output_bytes = std::size_t{64} << 20;
  };
  using ReplyHandler = std::function<void(const protocol::Frame&)>;
  // Called with true once HELLO is answered, with false when an up link goes down (and with
  // false once for each failed attempt to bring it up). `why` says what failed.
  using StateHandler = std::function<void(bool up, const std::string& why)>;

  PeerLink(boost::asio::io_context& io, Config config, ReplyHandler on_reply,
           StateHandler on_state);
  ~PeerLink();
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  // Starts the connect / retry loop. Once.
  void start();
  // Closes the connection and stops retrying; no handler runs afterwards. Idempotent.
  void close();

  bool up() const { return up_; }
  // The other node's HELLO reply (its shard ports, limits, node id). REQUIRES: up().
  const protocol::HelloReply& hello() const { return hello_; }

  // Requests are appended here (in framing().version) and sent by flush(). Bytes appended while
  // the link is down are dropped when it comes up: a request must be made while up(). More
  // than config.max_output_bytes waiting at a flush() ends the session.
  protocol::Bytes& output() { return out_queued_; }
  void flush();
  // Output waiting to be sent, queued and in flight.
  std::size_t pending_output() const { return out_queued_.size() + out_writing_.size(); }
  protocol::Framing framing() const { return protocol::Framing::with_epoch(config_.epoch); }
  void set_epoch(std::uint64_t epoch) { config_.epoch = epoch; }
  std::uint32_t next_id() { return ++last_id_ == 0 ? ++last_id_ : last_id_; }

 private:
  boost::asio::awaitable<void> run();
  // One connection: connect, HELLO, then read until it fails. Returns why it ended.
  boost::asio::awaitable<std::string> session();
  boost::asio::awaitable<void> write_loop(std::shared_ptr<bool> alive);
  void fail_session();

  boost::asio::io_context& io_;
  Config config_;
  ReplyHandler on_reply_;
  StateHandler on_state_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer write_signal_;
  boost::asio::steady_timer backoff_;
  boost::asio::steady_timer deadline_;
  std::minstd_rand jitter_;
  protocol::HelloReply hello_;
  protocol::Bytes out_queued_;
  protocol::Bytes out_writing_;
  std::uint32_t last_id_ = 0;
  std::uint64_t sessions_ = 0;  // connection attempts so far
  bool started_ = false;
  bool closed_ = false;
  bool up_ = false;
  bool writing_ = false;
  bool output_overflowed_ = false;  // the session ended at max_output_bytes
};

}  // namespace sluice::server
