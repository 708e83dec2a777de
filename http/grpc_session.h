// Internal to http/ (and its fuzz target): one HTTP/2 connection's gRPC protocol, free of sockets
// and threads. Bytes in (receive), bytes out (take_output), whole calls out to their handlers,
// answers in (respond). http::GrpcServer's connections put it behind a socket and a strand;
// tests/fuzz/grpc_fuzz.cpp feeds it arbitrary bytes.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "http/grpc_call.h"

struct nghttp2_session;

namespace sluice::http::detail {

// Where a call's answer goes (the connection that carries it). Any thread.
class CallTarget {
 public:
  virtual ~CallTarget() = default;
  // `text` is the answer's message when `code` is kOk, else the status's message (as the
  // handler wrote it: the session percent-encodes it for the wire).
  virtual void deliver(std::int32_t stream, GrpcCode code, std::string text) = 0;
};

using MethodTable = std::unordered_map<std::string, GrpcHandler>;

// The counters a session adds to (the server's).
struct SessionCounters {
  std::atomic<std::uint64_t>& calls;
  std::atomic<std::uint64_t>& refused_calls;
};

class GrpcSession {
 public:
  // Hands a whole call (its message without the prefix) to `handler`: the session's owner makes
  // the GrpcCall, whose answer comes back through respond().
  using CallSink =
      std::function<void(const GrpcHandler& handler, std::int32_t stream, std::string message,
                         std::chrono::steady_clock::time_point deadline)>;

  // `limits`, `methods` and the counters must outlive the session. Queues the server's SETTINGS.
  GrpcSession(const GrpcLimits& limits, const MethodTable& methods, SessionCounters counters,
              CallSink sink);
  ~GrpcSession();
  GrpcSession(const GrpcSession&) = delete;
  GrpcSession& operator=(const GrpcSession&) = delete;

  // Feeds received bytes, and hands the calls they complete to their handlers. False when they
  // are not HTTP/2 or break its rules (error() says how): what take_output() then gives (a
  // GOAWAY) is the last to write before closing.
  bool receive(const std::uint8_t* data, std::size_t size);
  const std::string& error() const { return error_; }
  // Appends what is to be sent to `out`. False when the session failed; close.
  bool take_output(std::vector<std::uint8_t>& out);
  // A handler's answer to call `stream`; dropped when the stream has gone or was answered.
  void respond(std::int32_t stream, GrpcCode code, std::string text);
  // GOAWAY: no call after those begun; the session finishes once they are answered.
  void go_away();

  bool wants_read() const;
  // Nothing more to read or write: the connection can close.
  bool finished() const;
  // Calls begun and not yet answered and sent.
  bool has_open_calls() const { return !streams_.empty(); }

 private:
  // What a request stream has said so far, and the answer being sent on it.
  struct Stream {
    const GrpcHandler* handler = nullptr;  // set once the headers make it a call of ours
    std::string path;
    std::string body;  // prefix and message, as received
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    std::size_t header_bytes = 0;
    bool post = false;
    bool grpc_type = false;
    bool bad_timeout = false;
    bool request_ended = false;    // the client's END_STREAM came
    bool answered = false;         // a response was submitted (or the server refused the call)
    std::array<char, 5> prefix{};  // an OK answer: its prefix, then its message
    std::string out;
    std::size_t sent = 0;  // of prefix and message
  };
  struct Callbacks;  // nghttp2's, with access to the session
  friend struct Callbacks;

  Stream* find(std::int32_t id);
  void check_request(std::int32_t id, Stream& s);
  void dispatch_call(std::int32_t id);
  void refuse(std::int32_t id, Stream& s, GrpcCode code, std::string_view message);
  void refuse_http(std::int32_t id, Stream& s, std::string_view status);
  void respond_status(std::int32_t id, Stream& s, GrpcCode code, std::string_view message);

  const GrpcLimits& limits_;
  const MethodTable& methods_;
  SessionCounters counters_;
  CallSink sink_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<std::int32_t, Stream> streams_;
  std::vector<std::int32_t> ready_;        // requests ended during one receive
  std::vector<std::int32_t> dispatching_;  // ready_'s, being handed to their handlers
  std::string error_;
};

}  // namespace sluice::http::detail
