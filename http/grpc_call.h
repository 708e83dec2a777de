// A unary gRPC call as http::GrpcServer's handlers see it (GrpcCall), the status codes and limits,
// and gRPC's small encodings (grpc-timeout, grpc-message). Free of Asio: http/grpc_session.h and
// its fuzz target use it without a server.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::http {

// The gRPC status codes (grpc/doc/statuscodes.md) this server and its handlers send.
enum class GrpcCode : std::uint8_t {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kResourceExhausted = 8,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
};

struct GrpcLimits {
  // A request message, without its 5-byte prefix (RESOURCE_EXHAUSTED above).
  std::size_t max_message_bytes = 64 * 1024;
  // Open connections at once; the next one is closed at accept (and counted).
  std::uint32_t max_connections = 1024;
  // Calls open at once on one connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS).
  std::uint32_t max_streams = 256;
  // A request's header fields as HTTP/2 counts them (name + value + 32 each); also announced
  // as SETTINGS_MAX_HEADER_LIST_SIZE.
  std::size_t max_header_bytes = 16 * 1024;
  // A connection with no call open that sends nothing this long, or that takes this long to
  // read what is written to it, is closed.
  std::chrono::milliseconds idle_timeout{60'000};
};

class GrpcCall;
namespace detail {
class CallTarget;
// A call whose answer goes to `target` (http/grpc_session.h).
GrpcCall make_call(std::shared_ptr<CallTarget> target, std::int32_t stream, std::string message,
                   std::chrono::steady_clock::time_point deadline);
}  // namespace detail

// One unary call: its request message and deadline, answered once from any thread. Move-only.
class GrpcCall {
 public:
  GrpcCall(GrpcCall&& other) noexcept = default;
  GrpcCall& operator=(GrpcCall&& other) noexcept;
  GrpcCall(const GrpcCall&) = delete;
  GrpcCall& operator=(const GrpcCall&) = delete;
  ~GrpcCall();  // not answered: INTERNAL

  // The request message (without the 5-byte prefix); valid until the call is answered.
  std::string_view message() const { return message_; }
  // From the caller's grpc-timeout; time_point::max() when it sent none.
  std::chrono::steady_clock::time_point deadline() const { return deadline_; }

  // Answers OK with `reply`, a serialized message. A second answer is ignored.
  void answer(std::string reply);
  // Answers with a status other than OK and a message (percent-encoded on the wire).
  void fail(GrpcCode code, std::string_view message);

 private:
  friend GrpcCall detail::make_call(std::shared_ptr<detail::CallTarget> target, std::int32_t stream,
                                    std::string message,
                                    std::chrono::steady_clock::time_point deadline);
  GrpcCall(std::shared_ptr<detail::CallTarget> target, std::int32_t stream, std::string message,
           std::chrono::steady_clock::time_point deadline);
  std::shared_ptr<detail::CallTarget> target_;
  std::int32_t stream_ = 0;
  std::string message_;
  std::chrono::steady_clock::time_point deadline_;
};

using GrpcHandler = std::function<void(GrpcCall call)>;

// grpc-timeout's value ("1-8 digits" then H, M, S, m, u or n) as a duration; nullopt when
// malformed. Exposed for its tests.
std::optional<std::chrono::nanoseconds> parse_grpc_timeout(std::string_view value);
// grpc-message's percent-encoding (bytes outside 0x20-0x7E, and '%', as %XX).
std::string grpc_percent_encode(std::string_view message);

}  // namespace sluice::http
