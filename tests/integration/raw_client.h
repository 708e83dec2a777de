// A small blocking client for the integration tests, written over Asio sockets and the
// protocol encoders only (it does not use client/). Every operation has a deadline, so a
// server that never answers fails a test instead of hanging it. Not thread-safe: one client
// per thread. Helpers throw std::runtime_error on anything unexpected; Catch2 reports it.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/rule.h"
#include "protocol/cluster_messages.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace sluice::test {

struct ReceivedFrame {
  protocol::FrameHeader header;
  protocol::Bytes body;
};

class RawClient {
 public:
  enum class ReadEnd { kFrame, kClosed, kTimeout };

  explicit RawClient(std::uint16_t port,
                     std::chrono::milliseconds timeout = std::chrono::seconds(5))
      : RawClient("127.0.0.1", port, timeout) {}
  // To a node on another address (the partition tests give each node its own 127.0.0.x).
  RawClient(const std::string& host, std::uint16_t port,
            std::chrono::milliseconds timeout = std::chrono::seconds(5))
      : socket_(io_), timeout_(timeout) {
    const boost::asio::ip::tcp::endpoint endpoint(boost::asio::ip::make_address(host), port);
    boost::system::error_code result;
    bool done = false;
    socket_.async_connect(endpoint, [&](const boost::system::error_code& ec) {
      result = ec;
      done = true;
    });
    if (!run_until_done(done)) result = boost::asio::error::timed_out;
    if (result)
      throw std::runtime_error("connect to port " + std::to_string(port) + ": " + result.message());
    socket_.set_option(boost::asio::ip::tcp::no_delay(true));
  }

  std::uint32_t next_id() { return ++last_id_; }

  // The framing of the requests this client sends (version 1 unless told otherwise), and the
  // epoch in the header of the last reply call() returned (0 in framing version 1).
  void set_framing(const protocol::Framing& framing) { framing_ = framing; }
  std::uint64_t last_epoch() const { return last_epoch_; }

  // The node's cluster map (CLUSTER).
  protocol::ClusterMapMessage cluster() {
    const std::uint32_t id = next_id();
    protocol::Bytes out;
    protocol::encode_cluster_request(out, id, framing_);
    const ReceivedFrame reply = call(out, id);
    protocol::ClusterMapMessage map;
    if (!protocol::parse_cluster_reply(reply.body, map)) throw std::runtime_error("bad CLUSTER");
    return map;
  }

  // RELOAD: the epoch in force after it, and "" or why the file was refused.
  struct ReloadAnswer {
    std::uint64_t epoch = 0;
    std::string message;
  };
  ReloadAnswer reload() {
    const std::uint32_t id = next_id();
    protocol::Bytes out;
    protocol::encode_reload_request(out, id, framing_);
    const ReceivedFrame reply = call(out, id);
    protocol::ReloadReply answer;
    if (!protocol::parse_reload_reply(reply.body, answer)) throw std::runtime_error("bad RELOAD");
    return {answer.epoch, std::string(answer.message)};
  }

  // Writes all the bytes; false when the connection is gone or the write timed out.
  bool send(std::span<const std::uint8_t> bytes) {
    boost::system::error_code result;
    bool done = false;
    boost::asio::async_write(socket_, boost::asio::buffer(bytes.data(), bytes.size()),
                             [&](const boost::system::error_code& ec, std::size_t) {
                               result = ec;
                               done = true;
                             });
    return run_until_done(done) && !result;
  }

  // Closes our sending side: the server sees end of stream after what was sent.
  void shutdown_send() {
    boost::system::error_code ignored;
    socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
  }

  // The next frame, or why there is none (the peer closed or reset, or the deadline passed).
  ReadEnd read(ReceivedFrame& out, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const protocol::FrameDecoder decoder(1u << 30);
      const protocol::DecodeResult decoded = decoder.decode(input_);
      if (decoded.status == protocol::DecodeStatus::kMalformed) {
        throw std::runtime_error("the server sent a malformed frame: " +
                                 std::string(decoded.reason));
      }
      if (decoded.status == protocol::DecodeStatus::kOk) {
        out.header = decoded.frame.header;
        out.body.assign(decoded.frame.body.begin(), decoded.frame.body.end());
        input_.erase(input_.begin(), input_.begin() + static_cast<long>(decoded.frame_size));
        return ReadEnd::kFrame;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return ReadEnd::kTimeout;
      std::uint8_t chunk[16384];
      boost::system::error_code result;
      std::size_t n = 0;
      bool done = false;
      socket_.async_read_some(boost::asio::buffer(chunk),
                              [&](const boost::system::error_code& ec, std::size_t k) {
                                result = ec;
                                n = k;
                                done = true;
                              });
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      run_until_done(done, std::max(left, std::chrono::milliseconds(1)));
      // A read that succeeded as the deadline passed still delivered its bytes: keep them.
      if (!result) {
        input_.insert(input_.end(), chunk, chunk + n);
        continue;
      }
      if (result == boost::asio::error::operation_aborted) return ReadEnd::kTimeout;
      return ReadEnd::kClosed;
    }
  }

  // The next frame; throws when there is none within the client's timeout.
  ReceivedFrame read() {
    ReceivedFrame frame;
    const ReadEnd end = read(frame, timeout_);
    if (end == ReadEnd::kClosed) throw std::runtime_error("the server closed the connection");
    if (end == ReadEnd::kTimeout) throw std::runtime_error("no reply within the deadline");
    return frame;
  }

  // Reads (and discards) frames until the server closes: true, or the deadline passes: false.
  bool wait_closed(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      ReceivedFrame frame;
      const ReadEnd end =
          read(frame, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
      if (end == ReadEnd::kClosed) return true;
      if (end == ReadEnd::kTimeout) return false;
    }
  }

  // Sends one request frame and returns its reply; throws on an ERROR or a mismatched id.
  ReceivedFrame call(const protocol::Bytes& request, std::uint32_t id) {
    if (!send(request)) throw std::runtime_error("send failed");
    ReceivedFrame reply = read();
    if (reply.header.opcode == protocol::Opcode::kError) {
      protocol::ErrorReply error;
      (void)protocol::parse_error(reply.body, error);
      throw std::runtime_error("ERROR reply: " + std::string(error.message));
    }
    if (reply.header.request_id != id || !reply.header.is_reply()) {
      throw std::runtime_error("reply does not match the request");
    }
    last_epoch_ = reply.header.epoch;
    return reply;
  }

  // `token` is sent from version 2 on (version 1 has no token field).
  protocol::HelloReply hello(std::uint8_t version = protocol::kVersion,
                             std::string_view token = "") {
    const std::uint32_t id = next_id();
    protocol::Bytes out;
    protocol::encode_hello_request(out, id, protocol::HelloRequest{version, "raw_client", token},
                                   framing_);
    const ReceivedFrame reply = call(out, id);
    protocol::HelloReply hello;
    if (!protocol::parse_hello_reply(reply.body, hello)) throw std::runtime_error("bad HELLO");
    return hello;
  }

  bool ping() {
    const std::uint32_t id = next_id();
    protocol::Bytes out;
    const std::uint8_t payload[] = {1, 2, 3};
    protocol::encode_ping(out, id, payload, false, framing_);
    const ReceivedFrame reply = call(out, id);
    return reply.body == protocol::Bytes{1, 2, 3};
  }

  std::vector<protocol::AcquireResult> acquire(std::span<const protocol::AcquireItem> items) {
    const std::uint32_t id = next_id();
    protocol::Bytes out;
    protocol::encode_acquire_request(out, id, items, framing_);
    const ReceivedFrame reply = call(out, id);
    std::vector<protocol::AcquireResult> results;
    if (!protocol::parse_acquire_reply(reply.body, results)) {
      throw std::runtime_error("bad ACQUIRE reply");
    }
    if (results.size() != items.size()) throw std::runtime_error("ACQUIRE reply size");
    return results;
  }

  protocol::AcquireResult acquire(std::string_view key, const Rule& rule, std::uint32_t cost = 1) {
    const protocol::AcquireItem item{key, rule, cost, false};
    return acquire(std::span(&item, 1)).at(0);
  }

  std::vector<protocol::ResetStatus> reset(std::span<const std::string_view> keys) {
    const std::uint32_t id = next_id();
    protocol::Bytes out;
    protocol::encode_reset_request(out, id, keys, framing_);
    const ReceivedFrame reply = call(out, id);
    std::vector<protocol::ResetStatus> statuses;
    if (!protocol::parse_reset_reply(reply.body, statuses)) {
      throw std::runtime_error("bad RESET reply");
    }
    return statuses;
  }

  // INSPECT: the node's answer, with a sliding log's timestamps copied out of the reply.
  struct Inspected {
    protocol::InspectReply reply;  // reply.record.log_bytes is cleared: use `log`
    std::vector<std::uint64_t> log;
  };
  Inspected inspect(std::string_view key) {
    const std::uint32_t id = next_id();
    protocol::Bytes out;
    protocol::encode_inspect_request(out, id, key, framing_);
    const ReceivedFrame reply = call(out, id);
    Inspected inspected;
    if (!protocol::parse_inspect_reply(reply.body, inspected.reply)) {
      throw std::runtime_error("bad INSPECT reply");
    }
    for (std::uint32_t i = 0; i < inspected.reply.record.log_count; ++i) {
      inspected.log.push_back(inspected.reply.record.log_at(i));
    }
    inspected.reply.record.log_bytes = {};
    return inspected;
  }

  std::map<std::string, std::uint64_t> stats() {
    const std::uint32_t id = next_id();
    protocol::Bytes out;
    protocol::encode_stats_request(out, id, framing_);
    const ReceivedFrame reply = call(out, id);
    std::vector<protocol::StatEntry> entries;
    if (!protocol::parse_stats_reply(reply.body, entries)) {
      throw std::runtime_error("bad STATS reply");
    }
    std::map<std::string, std::uint64_t> stats;
    for (auto& entry : entries) stats[entry.name] = entry.value;
    return stats;
  }

 private:
  protocol::Framing framing_;
  std::uint64_t last_epoch_ = 0;
  // Runs the pending operation, whose handler sets `done`, until it completes (true) or the
  // deadline passes; then cancels it and waits for its handler (false). Either way the handler
  // has run on return, so a result it stored just as the deadline passed is still there.
  bool run_until_done(const bool& done,
                      std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
    io_.restart();
    io_.run_for(timeout.value_or(timeout_));
    if (done) return true;
    boost::system::error_code ignored;
    socket_.cancel(ignored);
    io_.restart();
    io_.run();
    return false;
  }

  boost::asio::io_context io_{1};
  boost::asio::ip::tcp::socket socket_;
  std::chrono::milliseconds timeout_;
  std::uint32_t last_id_ = 0;
  protocol::Bytes input_;
};

}  // namespace sluice::test
