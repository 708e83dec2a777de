// What the HTTP tests share: a server on 127.0.0.1 with an ephemeral port and its own io
// threads, and a raw blocking client (POSIX sockets with poll timeouts) that sends exact bytes
// and parses responses with Beast's parser, so that each test controls every byte on the wire.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/http/parser.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "http/server.h"
#include "tests/support/slack.h"

namespace sluice::test::http_support {

using namespace std::chrono_literals;

inline constexpr int kSlack = kTimingSlack;  // tests/support/slack.h

// An http::Server on 127.0.0.1, an ephemeral port, its io_context run by `threads` threads.
class HttpFixture {
 public:
  HttpFixture(http::ServerLimits limits, http::Handler handler, unsigned threads = 2)
      : server_(io_, limits, std::move(handler)) {
    server_.start("127.0.0.1", 0);
    for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { io_.run(); });
  }
  ~HttpFixture() { stop(); }

  // Stops the server and waits until the io threads have run out of work: what a clean stop
  // means (no work guard keeps them).
  void stop() {
    server_.stop();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  http::Server& server() { return server_; }
  std::uint16_t port() const { return server_.port(); }

 private:
  boost::asio::io_context io_;
  http::Server server_;
  std::vector<std::thread> threads_;
};

// Polls `condition` until it holds (true) or `timeout` passes (false).
template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout = 5000ms * kSlack) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return condition();
}

using ParsedResponse = boost::beast::http::response<boost::beast::http::string_body>;

// A blocking client connection to 127.0.0.1:port.
class HttpClient {
 public:
  explicit HttpClient(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect");
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~HttpClient() { close(); }
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Sends every byte (false when the server has closed).
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // The next response, or nullopt when the connection ends (or `timeout` passes) first.
  std::optional<ParsedResponse> read_response(std::chrono::milliseconds timeout = 5000ms * kSlack) {
    boost::beast::http::response_parser<boost::beast::http::string_body> parser;
    parser.eager(true);
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (!pending_.empty()) {
        boost::beast::error_code ec;
        const std::size_t used = parser.put(boost::asio::buffer(pending_), ec);
        pending_.erase(0, used);
        if (parser.is_done()) return parser.release();
        if (ec && ec != boost::beast::http::error::need_more) {
          FAIL_CHECK("unparsable response: " << ec.message());
          return std::nullopt;
        }
        if (used != 0) continue;
      }
      if (!read_more(deadline)) return std::nullopt;
    }
  }

  // Whether the server closes the connection (end of stream or reset) within `timeout`,
  // discarding whatever it sends before.
  bool wait_closed(std::chrono::milliseconds timeout = 5000ms * kSlack) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (read_more(deadline)) pending_.clear();
    return closed_;
  }
  bool closed() const { return closed_; }

 private:
  // Reads what is available (waiting until `deadline`); false on end of stream, an error or
  // the deadline.
  bool read_more(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return false;
      char chunk[16384];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        closed_ = true;
        return false;
      }
      pending_.append(chunk, static_cast<std::size_t>(n));
      return true;
    }
  }

  int fd_ = -1;
  std::string pending_;
  bool closed_ = false;
};

inline std::string get(std::string_view target, std::string_view extra_headers = "") {
  return "GET " + std::string(target) + " HTTP/1.1\r\nHost: test\r\n" + std::string(extra_headers) +
         "\r\n";
}

}  // namespace sluice::test::http_support
