// A blocking HTTP/2 client for the gRPC server's tests: nghttp2's client session over a POSIX
// socket with poll timeouts, so that each test chooses every header and byte of its requests
// (the malformed ones a gRPC library would never send) without a gRPC library in the test.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tests/grpc/h2_request.h"
#include "tests/support/slack.h"

namespace sluice::test::h2 {

using namespace std::chrono_literals;

inline constexpr int kSlack = kTimingSlack;  // tests/support/slack.h

// What came back on one stream: headers and trailers in one map (grpc-status is in either).
struct Reply {
  std::map<std::string, std::string> fields;
  std::string data;
  bool closed = false;
  std::optional<std::uint32_t> reset;  // RST_STREAM's error code, when one came

  std::string field(const std::string& name) const {
    auto it = fields.find(name);
    return it == fields.end() ? "<absent>" : it->second;
  }
  int grpc_status() const {
    return fields.count("grpc-status") ? std::stoi(field("grpc-status")) : -1;
  }
  // The message of an OK answer: its 5-byte prefix checked and removed.
  std::string message() const {
    REQUIRE(data.size() >= 5);
    CHECK(data[0] == 0);
    return data.substr(5);
  }
};

class Client {
 public:
  explicit Client(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    nghttp2_session_callbacks* cb = nullptr;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, &on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, &on_close);
    nghttp2_session_client_new(&session_, cb, this);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
    pump_out();
  }
  ~Client() {
    nghttp2_session_del(session_);
    if (fd_ >= 0) ::close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Starts a request with `headers` and `body` (none: HEADERS alone). With `end` false the
  // request stays open after its body. Returns the stream id.
  std::int32_t start(const Headers& headers, std::optional<std::string> body = std::nullopt,
                     bool end = true) {
    const std::int32_t id = submit_request(session_, headers, std::move(body), end, bodies_);
    REQUIRE(id > 0);
    replies_[id];
    pump_out();
    return id;
  }

  // A gRPC call of `message` to `path` (more headers after the usual ones).
  std::int32_t call(const std::string& path, std::string_view message, Headers more = {}) {
    return start(grpc_headers(path, std::move(more)), framed(message));
  }

  // Runs the connection until stream `id` has closed; REQUIREs it within `timeout`.
  Reply wait(std::int32_t id, std::chrono::milliseconds timeout = 5000ms * kSlack) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!replies_[id].closed) {
      INFO("stream " << id << " not closed in time, or the connection ended");
      REQUIRE(pump_in(until));
    }
    return replies_[id];
  }

  // Runs the connection until the server closes it; false at `timeout`.
  bool wait_closed(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (pump_in(until)) {
    }
    return peer_closed_;
  }

  bool goaway() const { return goaway_; }
  std::uint32_t remote_setting(nghttp2_settings_id id) const {
    return nghttp2_session_get_remote_settings(session_, id);
  }
  // Runs the connection for a while (to take SETTINGS, or see nothing happen).
  void idle(std::chrono::milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (pump_in(until)) {
    }
  }

 private:
  static Client& self(void* p) { return *static_cast<Client*>(p); }
  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                       std::size_t nlen, const std::uint8_t* value, std::size_t vlen, std::uint8_t,
                       void* p) {
    self(p)
        .replies_[frame->hd.stream_id]
        .fields[std::string(reinterpret_cast<const char*>(name), nlen)] =
        std::string(reinterpret_cast<const char*>(value), vlen);
    return 0;
  }
  static int on_data(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
                     std::size_t len, void* p) {
    self(p).replies_[id].data.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }
  static int on_frame(nghttp2_session*, const nghttp2_frame* frame, void* p) {
    if (frame->hd.type == NGHTTP2_GOAWAY) self(p).goaway_ = true;
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
      self(p).replies_[frame->hd.stream_id].reset = frame->rst_stream.error_code;
    }
    return 0;
  }
  static int on_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* p) {
    self(p).replies_[id].closed = true;
    return 0;
  }
  void pump_out() {
    for (;;) {
      const std::uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n <= 0) return;
      std::size_t off = 0;
      while (off < static_cast<std::size_t>(n)) {
        const ssize_t w = ::send(fd_, data + off, static_cast<std::size_t>(n) - off, MSG_NOSIGNAL);
        if (w <= 0) return;  // the server closed: what it said is read by pump_in
        off += static_cast<std::size_t>(w);
      }
    }
  }

  // One read (within `until`) fed to the session, and what it answers sent. False when the
  // connection has ended or the time is up.
  bool pump_in(std::chrono::steady_clock::time_point until) {
    if (peer_closed_) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    std::uint8_t buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      peer_closed_ = true;
      return false;
    }
    nghttp2_session_mem_recv(session_, buf, static_cast<std::size_t>(n));
    pump_out();
    return true;
  }

  int fd_ = -1;
  nghttp2_session* session_ = nullptr;
  std::map<std::int32_t, Reply> replies_;
  std::vector<std::unique_ptr<Body>> bodies_;
  bool goaway_ = false;
  bool peer_closed_ = false;
};

}  // namespace sluice::test::h2
