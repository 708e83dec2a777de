// "HOST:PORT", the way every flag, cluster map and message of Sluice spells an endpoint: an IPv6
// address (any host that contains ':') in brackets, "[::1]:7420". Text only: nothing here
// resolves a name or opens a socket.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::net {

struct HostPort {
  std::string host;  // an IPv6 address without its brackets
  std::uint16_t port = 0;
  friend bool operator==(const HostPort&, const HostPort&) = default;
};

// "127.0.0.1:7420", "name:7420", "[::1]:7420"; the port 1..65535. nullopt when malformed: no
// colon, an empty host or port, an IPv6 address without brackets, a port that is not a number
// in range.
std::optional<HostPort> parse_host_port(std::string_view text);

// An address to listen on: as parse_host_port(), but the port may be 0 (ephemeral).
std::optional<HostPort> parse_listen_address(std::string_view text);

// What parse_host_port() reads back: "127.0.0.1:7420", "[::1]:7420".
std::string format_host_port(std::string_view host, std::uint16_t port);

}  // namespace sluice::net
