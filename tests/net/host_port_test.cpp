#include "net/host_port.h"

#include <catch2/catch.hpp>
#include <string_view>

namespace sluice::net {
namespace {

TEST_CASE("format_host_port puts an IPv6 address in brackets", "[host_port]") {
  CHECK(format_host_port("127.0.0.1", 7420) == "127.0.0.1:7420");
  CHECK(format_host_port("localhost", 80) == "localhost:80");
  CHECK(format_host_port("::1", 7420) == "[::1]:7420");
  CHECK(format_host_port("fe80::1%lo", 1) == "[fe80::1%lo]:1");
  CHECK(format_host_port("::", 0) == "[::]:0");
}

TEST_CASE("parse_host_port reads HOST:PORT, IPv6 hosts in brackets", "[host_port]") {
  CHECK(parse_host_port("127.0.0.1:7420") == HostPort{"127.0.0.1", 7420});
  CHECK(parse_host_port("sluice-1.example:1") == HostPort{"sluice-1.example", 1});
  CHECK(parse_host_port("[::1]:65535") == HostPort{"::1", 65535});
  CHECK(parse_host_port("[fe80::1%lo]:7420") == HostPort{"fe80::1%lo", 7420});
  for (const std::string_view text : {"127.0.0.1:7420", "[::1]:7420", "name:80"}) {
    const auto parsed = parse_host_port(text);
    REQUIRE(parsed.has_value());
    CHECK(format_host_port(parsed->host, parsed->port) == text);
  }
}

TEST_CASE("parse_host_port refuses what is not HOST:PORT", "[host_port]") {
  for (const std::string_view bad :
       {"", "7420", "host", "host:", ":7420", "host:0", "host:65536", "host:-1", "host:80x",
        "host: 80", "::1:7420", "[::1]7420", "[::1]", "[::1:7420", "[]:7420", "a:b:1"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_host_port(bad).has_value());
  }
}

TEST_CASE("parse_listen_address takes port 0 (ephemeral) and refuses the rest as parse_host_port",
          "[host_port]") {
  CHECK(parse_listen_address("127.0.0.1:0") == HostPort{"127.0.0.1", 0});
  CHECK(parse_listen_address("[::1]:9420") == HostPort{"::1", 9420});
  for (const std::string_view bad : {"", "127.0.0.1", "host:65536", "::1:0", "host:-1"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_listen_address(bad).has_value());
  }
}

}  // namespace
}  // namespace sluice::net
