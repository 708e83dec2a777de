// A gRPC server of unary calls: HTTP/2 (nghttp2, a well-kept implementation of its framing,
// HPACK and flow control) on Asio, with gRPC's own layer (length-prefixed messages, grpc-status
// trailers, grpc-timeout) written here. It runs on an io_context the caller owns, so a handler
// that asks the Sluice client on the same io_context answers without a thread hop
// (docs/GATEWAY.md, "Why not gRPC's C++ server").
//
// Threading contract:
//  - The caller owns and runs the io_context, on as many threads as it likes. Each connection
//    lives on its own strand; its handler calls run there.
//  - A handler gets a GrpcCall and answers it once, at once or later, from any thread (the
//    answer goes to the connection's strand, inline when already there). A call destroyed
//    unanswered answers INTERNAL, so a lost call never hangs its caller.
//  - An answer to a call whose stream or connection has gone is dropped.
//
// What a client sees at each limit (GrpcLimits), and on bad input:
//  - a :method other than POST gets HTTP 405, a content-type other than application/grpc[+...]
//    HTTP 415, an unknown path grpc-status UNIMPLEMENTED, a message over max_message_bytes
//    RESOURCE_EXHAUSTED, a body that is not one whole message INTERNAL, a compressed message
//    UNIMPLEMENTED (only identity is accepted), a malformed grpc-timeout INTERNAL; each on its
//    own stream, the connection carrying on;
//  - a request's header list over max_header_bytes resets its stream;
//  - bytes that are not HTTP/2 (or break its rules) end the connection with GOAWAY;
//  - more than max_streams calls at once on a connection are refused by HTTP/2 itself
//    (SETTINGS_MAX_CONCURRENT_STREAMS), a connection over max_connections is closed at accept,
//    one with no call open that sends nothing for idle_timeout gets GOAWAY and is closed, and
//    so is one that leaves its answers unread for idle_timeout.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "http/grpc_call.h"

namespace sluice::http {

namespace detail {
struct GrpcServerState;
}  // namespace detail

// Counters since start (relaxed atomics, read from any thread).
struct GrpcCounters {
  std::uint64_t calls = 0;                // passed to a handler
  std::uint64_t refused_calls = 0;        // answered by the server itself (the list above)
  std::uint64_t connections_total = 0;    // accepted and served
  std::uint64_t connections_open = 0;     // open now
  std::uint64_t connections_refused = 0;  // closed at accept: over max_connections
  std::uint64_t protocol_errors = 0;      // connections ended for breaking HTTP/2
  std::uint64_t idle_timeouts = 0;        // closed after idle_timeout
};

class GrpcServer {
 public:
  GrpcServer(boost::asio::io_context& io, GrpcLimits limits);
  ~GrpcServer();  // stop(0)
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // Serves `path` ("/package.Service/Method") with `handler`. Before start().
  void add_method(std::string path, GrpcHandler handler);
  // Binds `host` (an IP address) and `port` (0 = ephemeral) and starts accepting. Throws
  // std::system_error when the address cannot be bound. Once.
  void start(const std::string& host, std::uint16_t port);
  std::uint16_t port() const { return port_; }

  // Stops accepting and sends GOAWAY on every connection: each closes once its calls are
  // answered and written, or when `grace` has passed. Then `stopped` runs once (on the
  // io_context), the server's work on the io_context being over. Any thread; later calls only
  // run their own `stopped`.
  void stop(std::chrono::milliseconds grace, std::function<void()> stopped = {});

  GrpcCounters counters() const;
  const GrpcLimits& limits() const;

 private:
  std::shared_ptr<detail::GrpcServerState> state_;
  std::uint16_t port_ = 0;
};

}  // namespace sluice::http
