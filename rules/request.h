// What the gateway knows about one request, as views into its own buffers: nothing is copied.
#pragma once

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::rules {

struct RequestAttributes {
  std::string_view method;     // "GET"; empty when unknown
  std::string_view path;       // "/v1/items"; anything from a '?' on is ignored
  std::string_view client_ip;  // "10.0.0.7", "::1"; empty when unknown
  std::vector<std::pair<std::string_view, std::string_view>> headers;  // name, value

  // The value of the first header named `name` (ASCII case ignored), or nullopt.
  std::optional<std::string_view> header(std::string_view name) const;
  // The path up to its first '?'.
  std::string_view path_only() const;
};

// ASCII case-insensitive equality, as HTTP compares header names.
bool equal_ignoring_case(std::string_view a, std::string_view b);

}  // namespace sluice::rules
