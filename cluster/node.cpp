#include "cluster/node.h"

#include <fmt/format.h>

#include <array>

#include "net/host_port.h"

namespace sluice::cluster {
namespace {

constexpr std::size_t kMaxHostNameLength = 253;  // without a final '.' (RFC 1035)
constexpr std::size_t kMaxLabelLength = 63;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 0..max in decimal, 1..digits long, without a leading zero (but "0" itself).
bool parse_decimal(std::string_view text, std::size_t max_digits, std::uint32_t max,
                   std::uint32_t& out) {
  if (text.empty() || text.size() > max_digits) return false;
  if (text.size() > 1 && text[0] == '0') return false;
  std::uint32_t value = 0;
  for (const char c : text) {
    if (!is_digit(c)) return false;
    value = value * 10 + static_cast<std::uint32_t>(c - '0');
  }
  if (value > max) return false;
  out = value;
  return true;
}

bool parse_ipv4(std::string_view text, std::array<std::uint8_t, 4>& out) {
  for (std::size_t part = 0; part < 4; ++part) {
    const std::size_t dot = text.find('.');
    const bool last = part == 3;
    if (last != (dot == std::string_view::npos)) return false;
    std::uint32_t value = 0;
    if (!parse_decimal(text.substr(0, dot), 3, 255, value)) return false;
    out[part] = static_cast<std::uint8_t>(value);
    if (!last) text.remove_prefix(dot + 1);
  }
  return true;
}

// RFC 4291 section 2.2 text forms: eight groups of 1..4 hex digits, at most one "::" standing
// for one or more zero groups, and optionally the last 32 bits as an IPv4 address.
bool parse_ipv6(std::string_view text, std::array<std::uint8_t, 16>& out) {
  std::array<std::uint16_t, 8> groups{};
  std::size_t count = 0;
  int gap = -1;  // the group index where "::" stands
  std::size_t i = 0;
  if (text.starts_with("::")) {
    gap = 0;
    i = 2;
  } else if (text.starts_with(":")) {
    return false;
  }
  while (i < text.size()) {
    if (count == 8) return false;
    const std::size_t colon = text.find(':', i);
    const std::string_view group =
        text.substr(i, colon == std::string_view::npos ? colon : colon - i);
    if (group.find('.') != std::string_view::npos) {
      std::array<std::uint8_t, 4> v4{};
      if (colon != std::string_view::npos || count > 6 || !parse_ipv4(group, v4)) return false;
      groups[count++] = static_cast<std::uint16_t>(v4[0] << 8 | v4[1]);
      groups[count++] = static_cast<std::uint16_t>(v4[2] << 8 | v4[3]);
      break;
    }
    if (group.empty() || group.size() > 4) return false;
    std::uint32_t value = 0;
    for (const char c : group) {
      const int digit = hex_value(c);
      if (digit < 0) return false;
      value = value << 4 | static_cast<std::uint32_t>(digit);
    }
    groups[count++] = static_cast<std::uint16_t>(value);
    if (colon == std::string_view::npos) break;
    if (colon + 1 < text.size() && text[colon + 1] == ':') {
      if (gap >= 0) return false;
      gap = static_cast<int>(count);
      i = colon + 2;
    } else {
      i = colon + 1;
      if (i == text.size()) return false;  // a single ':' at the end
    }
  }
  if (gap < 0 ? count != 8 : count > 7) return false;
  std::array<std::uint16_t, 8> full{};
  const std::size_t head = gap < 0 ? count : static_cast<std::size_t>(gap);
  for (std::size_t g = 0; g < head; ++g) full[g] = groups[g];
  for (std::size_t g = head; g < count; ++g) full[8 - (count - g)] = groups[g];
  for (std::size_t g = 0; g < 8; ++g) {
    out[2 * g] = static_cast<std::uint8_t>(full[g] >> 8);
    out[2 * g + 1] = static_cast<std::uint8_t>(full[g] & 0xff);
  }
  return true;
}

bool is_host_name(std::string_view name) {
  if (name.ends_with('.')) name.remove_suffix(1);
  if (name.empty() || name.size() > kMaxHostNameLength) return false;
  while (true) {
    const std::size_t dot = name.find('.');
    const std::string_view label = name.substr(0, dot);
    if (label.empty() || label.size() > kMaxLabelLength) return false;
    if (label.front() == '-' || label.back() == '-') return false;
    for (const char c : label) {
      if (!is_alpha(c) && !is_digit(c) && c != '-') return false;
    }
    if (dot == std::string_view::npos) return true;
    name.remove_prefix(dot + 1);
  }
}

bool only_digits_and_dots(std::string_view text) {
  for (const char c : text) {
    if (!is_digit(c) && c != '.') return false;
  }
  return true;
}

}  // namespace

std::string check_node_id(std::string_view id) {
  if (id.empty()) return "empty node id";
  if (id.size() > kMaxNodeIdLength) {
    return fmt::format("node id is {} bytes, longer than {}", id.size(), kMaxNodeIdLength);
  }
  for (const char c : id) {
    if (!is_alpha(c) && !is_digit(c) && c != '.' && c != '_' && c != '-') {
      return fmt::format("node id {} has a byte that is not a letter, digit, '.', '_' or '-'",
                         quote_for_message(id));
    }
  }
  return {};
}

std::string NodeAddress::text() const { return net::format_host_port(host, port); }

std::string NodeAddress::identity() const {
  std::string out;
  switch (kind) {
    case HostKind::kIpv4:
      out = host;  // canonical already: no leading zeros
      break;
    case HostKind::kIpv6: {
      std::array<std::uint8_t, 16> bytes{};
      parse_ipv6(host, bytes);
      out = "[";
      for (const std::uint8_t b : bytes) out += fmt::format("{:02x}", b);
      out += "]";
      break;
    }
    case HostKind::kName:
      out = host;
      if (out.ends_with('.')) out.pop_back();
      for (char& c : out) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      }
      break;
  }
  return fmt::format("{}:{}", out, port);
}

Expected<NodeAddress> parse_node_address(std::string_view text) {
  const auto fail = [&](std::string_view why) {
    return Unexpected{fmt::format("address {}: {}", quote_for_message(text), why)};
  };
  NodeAddress address;
  std::string_view port;
  if (text.starts_with('[')) {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return fail("expected [IPV6]:PORT");
    }
    address.kind = HostKind::kIpv6;
    address.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    std::array<std::uint8_t, 16> bytes{};
    if (!parse_ipv6(address.host, bytes)) {
      return fail(fmt::format("bad IPv6 address {}", quote_for_message(address.host)));
    }
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return fail("expected HOST:PORT");
    const std::string_view host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return fail("an IPv6 address goes in brackets, as in [::1]:7420");
    }
    if (host.empty()) return fail("expected HOST:PORT, the host is missing");
    address.host = host;
    if (only_digits_and_dots(host)) {
      std::array<std::uint8_t, 4> bytes{};
      if (!parse_ipv4(host, bytes)) {
        return fail(fmt::format("bad IPv4 address {}", quote_for_message(host)));
      }
      address.kind = HostKind::kIpv4;
    } else if (is_host_name(host)) {
      address.kind = HostKind::kName;
    } else {
      return fail(fmt::format("bad host name {}", quote_for_message(host)));
    }
  }
  std::uint32_t value = 0;
  if (!parse_decimal(port, 5, 65535, value) || value == 0) {
    return fail(fmt::format("bad port {}, expected 1..65535", quote_for_message(port)));
  }
  address.port = static_cast<std::uint16_t>(value);
  return address;
}

std::string quote_for_message(std::string_view text) {
  constexpr std::size_t kShown = 64;
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < kShown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += text.size() > kShown ? "...\"" : "\"";
  return out;
}

}  // namespace sluice::cluster
