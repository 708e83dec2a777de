// A small HTTP/1.1 server (Boost.Beast on Asio) for the daemon's /metrics, /healthz and /readyz
// and the gateway's decision API: keep-alive, pipelining answered in order, explicit limits
// (header and body size, connections, idle time, time to read one request), and a handler that
// may answer later, from any thread.
//
// Threading contract:
//  - The Server runs on an io_context the caller owns and runs, on as many threads as it likes.
//    Each connection lives on its own strand: its reads, writes, timers and its handler calls
//    never run concurrently; different connections run in parallel.
//  - The handler is called on the connection's strand, once per request, in the order the
//    requests arrived. It must not block: it answers through the Responder, at once or later,
//    from any thread (the Responder posts the response to the connection's strand). The next
//    request of that connection (pipelined or not) is handled only after this one's response
//    is written, so responses leave in request order.
//  - A Responder that is destroyed without having been used answers 500, so a lost request
//    never hangs its connection. A response to a connection that has closed is dropped.
//  - start(), port() and counters() are for the owner; stop() may be called from any thread,
//    any number of times. Every Responder must be used or destroyed before the io_context is
//    destroyed (it posts to it); the handler must stay callable until the io_context's run()
//    calls have returned.
//
// What a client sees at each limit (ServerLimits): a malformed request gets 400, a body over
// max_body_bytes 413, a request line and headers over max_header_bytes 431; then the
// connection is closed (after the response is sent; its remaining input is discarded). A
// connection over max_connections is closed at accept, without a response. A connection idle
// between requests longer than idle_timeout, or that takes longer than read_timeout to send one
// whole request once its first byte has arrived (slowloris), or to take a response, is closed.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace sluice::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;
using Status = boost::beast::http::status;

struct ServerLimits {
  // The request line, header fields and the blank line that ends them, in bytes (431 above).
  std::size_t max_header_bytes = 8 * 1024;
  // A request body (Content-Length or chunked), in bytes (413 above).
  std::size_t max_body_bytes = 64 * 1024;
  // Open connections at once; the next one is closed at accept (and counted).
  std::uint32_t max_connections = 1024;
  // A keep-alive connection that sends nothing for this long between requests is closed.
  std::chrono::milliseconds idle_timeout{60'000};
  // From the first byte of a request to its last (and for writing a response): slower
  // connections are closed.
  std::chrono::milliseconds read_timeout{10'000};
};

// Counters since start (relaxed atomics, read from any thread).
struct ServerCounters {
  std::uint64_t requests = 0;             // complete requests passed to the handler
  std::uint64_t bad_requests = 0;         // refused with 400, 413 or 431
  std::uint64_t connections_total = 0;    // accepted and served
  std::uint64_t connections_open = 0;     // open now
  std::uint64_t connections_refused = 0;  // closed at accept: over max_connections
  std::uint64_t idle_timeouts = 0;        // closed after idle_timeout between requests
  std::uint64_t read_timeouts = 0;        // closed after read_timeout in a request or response
};

namespace detail {
class Connection;
struct ServerState;
}  // namespace detail

// Answers one request, once, from any thread. Move-only.
class Responder {
 public:
  Responder(Responder&& other) noexcept = default;
  Responder& operator=(Responder&& other) noexcept;
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  ~Responder();  // not used: answers 500

  // Sends `response`. The server sets its HTTP version, keep-alive (the request's, unless the
  // server closes the connection) and Content-Length. A second call is ignored.
  void send(Response response);
  // The IP address of the connection's peer ("127.0.0.1", "::1"; an IPv4 client of an IPv6
  // listener as its IPv4 address); empty when unknown or after send().
  std::string_view peer() const;

 private:
  friend class detail::Connection;
  explicit Responder(std::shared_ptr<detail::Connection> connection);
  std::shared_ptr<detail::Connection> connection_;
};

using Handler = std::function<void(const Request& request, Responder responder)>;

// Beast's string view (a target, a field's name or value) as a std::string_view.
inline std::string_view as_view(boost::beast::string_view text) {
  return {text.data(), text.size()};
}

// A response with `status`, Content-Type text/plain and `body` (the usual one-line answer).
Response text_response(Status status, std::string body);

class Server {
 public:
  Server(boost::asio::io_context& io, ServerLimits limits, Handler handler);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds `host` (an IP address) and `port` (0 = ephemeral) and starts accepting. Throws
  // std::system_error when the address cannot be bound. Once.
  void start(const std::string& host, std::uint16_t port);
  // The port listened on (after start()).
  std::uint16_t port() const { return port_; }

  // Closes the listener and every connection (a response being written is cut short); the
  // io_context runs out of this server's work once their coroutines have ended. Any thread.
  void stop();

  ServerCounters counters() const;
  const ServerLimits& limits() const;

 private:
  std::shared_ptr<detail::ServerState> state_;
  std::uint16_t port_ = 0;
};

}  // namespace sluice::http
