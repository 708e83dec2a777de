// Node ids and node addresses, as the cluster file, etcd and the cluster map spell them. One set
// of rules for every source, so that an id or address one of them accepts, all of them accept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/expected.h"

namespace sluice::cluster {

// A node id is 1..kMaxNodeIdLength bytes of [A-Za-z0-9._-]: safe in a file, an etcd key, a log
// line and a URL without quoting, and hashed byte for byte into the ring (docs/PROTOCOL.md 10.1).
inline constexpr std::size_t kMaxNodeIdLength = 64;

// Empty when `id` is a valid node id, else why not: "empty node id", "node id \"a b\" has a
// byte that is not a letter, digit, '.', '_' or '-'", "node id is 70 bytes, longer than 64".
std::string check_node_id(std::string_view id);

enum class HostKind : std::uint8_t { kIpv4, kIpv6, kName };

struct NodeAddress {
  HostKind kind = HostKind::kName;
  std::string host;  // as written; an IPv6 address without its brackets
  std::uint16_t port = 0;

  // "10.0.0.1:7420", "[::1]:7420", "sluice-1.example:7420": what parse_node_address reads back.
  std::string text() const;
  // Equal for two spellings of one address: names in lower case, IPv6 addresses as their 16
  // bytes ("[::1]" and "[0:0::1]" agree). A name and an IP address are never equal: there is no
  // DNS here.
  std::string identity() const;

  friend bool operator==(const NodeAddress&, const NodeAddress&) = default;
};

// Parses "HOST:PORT". HOST is one of
//  - an IPv4 address: four decimal parts 0..255 without leading zeros ("010" could be octal);
//  - an IPv6 address in brackets, "[::1]", "[2001:db8::7]", "[::ffff:10.0.0.1]" (no zone id);
//  - a DNS name: labels of 1..63 letters, digits and '-' that neither start nor end with '-',
//    separated by '.', 253 bytes at most, with or without a final '.'. A HOST made only of
//    digits and dots is read as an IPv4 address, so "10.0.0.256" is refused, not looked up.
// PORT is 1..65535 in decimal without leading zeros. Only the syntax is checked: nothing is
// resolved. The error says which part is wrong: "address \"h\": expected HOST:PORT".
Expected<NodeAddress> parse_node_address(std::string_view text);

// `text` in double quotes for a message: bytes outside printable ASCII as \xNN, and cut after
// 64 bytes with "...", so that a garbage line cannot flood a log.
std::string quote_for_message(std::string_view text);

}  // namespace sluice::cluster
