// Errors as values for the client API: a Status (code + message) and a Result<T> that holds
// either a value or a failed Status. Nothing in the client API throws after Client::connect.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::client {

enum class ErrorCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument,   // rejected before sending (bad options, cost 0, empty server list)
  kInvalidRule,       // the server refused the rule (unknown algorithm, bad period, ...)
  kInvalidKey,        // empty, or longer than the server's max key
  kNoMemory,          // the owning shard could not store the key
  kTimeout,           // no reply within the call timeout (or connect timeout)
  kConnectionFailed,  // could not connect, or the connection was lost with the call in flight
  kServerError,       // the server sent an ERROR frame for this call (message says which)
  kProtocolError,     // the reply did not parse or did not match the request
  kClosed,            // the client is shutting down
  kOverloaded,        // refused at once: the client already has max_in_flight calls in flight
  kUnauthenticated,   // the server requires a token and refused ours (wrong, or none given)
  kNotOwner,          // the node answered REDIRECT: in its cluster map another node owns the key
  kUnavailable,       // the key's owner cannot serve it now (moving, or no owner): retry later
};

// "ok", "invalid_argument", "invalid_rule", "invalid_key", "no_memory", "timeout",
// "connection_failed", "server_error", "protocol_error", "closed", "overloaded",
// "unauthenticated", "not_owner", "unavailable".
std::string_view error_code_name(ErrorCode code);

class Status {
 public:
  Status() = default;  // ok
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "timeout: no reply within 100 ms", or "ok".
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// Either a T or a failed Status. REQUIRES for value access: ok().
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {}  // REQUIRES: !status.ok()
  Result(ErrorCode code, std::string message) : status_(code, std::move(message)) {}

  bool ok() const { return status_.ok(); }
  explicit operator bool() const { return ok(); }
  const Status& status() const { return status_; }
  ErrorCode code() const { return status_.code(); }

  const T& value() const& { return value_; }
  T& value() & { return value_; }
  T&& value() && { return std::move(value_); }
  const T& operator*() const& { return value_; }
  T& operator*() & { return value_; }
  const T* operator->() const { return &value_; }
  T* operator->() { return &value_; }

 private:
  Status status_;
  T value_{};
};

}  // namespace sluice::client
