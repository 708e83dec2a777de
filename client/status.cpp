#include "client/status.h"

#include <string>

namespace sluice::client {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kInvalidRule:
      return "invalid_rule";
    case ErrorCode::kInvalidKey:
      return "invalid_key";
    case ErrorCode::kNoMemory:
      return "no_memory";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kConnectionFailed:
      return "connection_failed";
    case ErrorCode::kServerError:
      return "server_error";
    case ErrorCode::kProtocolError:
      return "protocol_error";
    case ErrorCode::kClosed:
      return "closed";
    case ErrorCode::kOverloaded:
      return "overloaded";
    case ErrorCode::kUnauthenticated:
      return "unauthenticated";
    case ErrorCode::kNotOwner:
      return "not_owner";
    case ErrorCode::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

std::string Status::to_string() const {
  std::string out(error_code_name(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

}  // namespace sluice::client
