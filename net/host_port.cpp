#include "net/host_port.h"

#include <charconv>

namespace sluice::net {

namespace {

std::optional<HostPort> parse(std::string_view text, unsigned min_port) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return std::nullopt;  // IPv6 needs brackets
  }
  if (host.empty() || port.empty()) return std::nullopt;
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value < min_port || value > 65535) {
    return std::nullopt;
  }
  return HostPort{std::string(host), static_cast<std::uint16_t>(value)};
}

}  // namespace

std::optional<HostPort> parse_host_port(std::string_view text) { return parse(text, 1); }

std::optional<HostPort> parse_listen_address(std::string_view text) { return parse(text, 0); }

std::string format_host_port(std::string_view host, std::uint16_t port) {
  const bool v6 = host.find(':') != std::string_view::npos;
  std::string out;
  out.reserve(host.size() + 8);
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

}  // namespace sluice::net
