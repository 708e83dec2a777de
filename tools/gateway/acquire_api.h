// POST /v1/acquire (docs/GATEWAY.md): the JSON request, checked, and the JSON answer. Pure code.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/client.h"
#include "core/expected.h"
#include "rules/request.h"
#include "tools/gateway/answer.h"

namespace sluice::gateway {

// A request: a policy and a key, or attributes to match.
struct AcquireCall {
  // By policy: both set.
  std::string policy;
  std::string key;
  // By attributes (when `policy` is empty).
  std::string method;
  std::string path;
  std::string client_ip;
  std::vector<std::pair<std::string, std::string>> headers;
  // Units each limit takes instead of its policy's cost; unset: the policy's.
  std::optional<std::uint32_t> cost;
  bool peek = false;

  bool by_policy() const { return !policy.empty(); }
  // The attributes as views into this call (by attributes).
  rules::RequestAttributes attributes() const;
};

// The body parsed and checked: an object with either "policy" and "key" (non-empty strings) or
// "attributes" (an object of optional "method", "path", "client_ip" strings and a "headers"
// object of strings), and optional "cost" (1..4294967295) and "peek" (a boolean); any other
// field is an error. The error names the field.
Expected<AcquireCall> parse_acquire_call(std::string_view body);

// One limit of the answer.
struct LimitReport {
  std::string_view policy;
  std::string_view key;
  bool shadow = false;
  // The decision, or the error of a call that failed (then `decision` is empty).
  std::optional<client::Decision> decision{};
  std::string error{};
};

// {"allowed":..,"status":200|429,"limits":[..],"headers":{..}} as docs/GATEWAY.md shows.
std::string acquire_answer_json(const Answer& answer, std::span<const LimitReport> limits);

// {"error":"..."}
std::string error_json(std::string_view message);

}  // namespace sluice::gateway
