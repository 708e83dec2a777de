#include <catch2/catch.hpp>

#include <string>

#include "cluster/node.h"

namespace sluice::cluster {
namespace {

std::string address_error(std::string_view text) {
  const Expected<NodeAddress> address = parse_node_address(text);
  return address ? "ok" : address.error();
}

TEST_CASE("node ids are 1 to 64 letters, digits, dots, underscores and dashes", "[node]") {
  CHECK(check_node_id("node-1").empty());
  CHECK(check_node_id("A.b_C-9").empty());
  CHECK(check_node_id(std::string(64, 'x')).empty());
  CHECK(check_node_id("") == "empty node id");
  CHECK(check_node_id(std::string(65, 'x')) == "node id is 65 bytes, longer than 64");
  CHECK(check_node_id("a:b") ==
        "node id \"a:b\" has a byte that is not a letter, digit, '.', '_' or '-'");
  CHECK(check_node_id(std::string("a\0b", 3)) ==
        "node id \"a\\x00b\" has a byte that is not a letter, digit, '.', '_' or '-'");
  CHECK_FALSE(check_node_id("n\xc3\xb6"
                            "de")
                  .empty());
  CHECK_FALSE(check_node_id("a/b").empty());
}

TEST_CASE("addresses may be IPv4, bracketed IPv6 or DNS names, with a port", "[node]") {
  const NodeAddress v4 = parse_node_address("10.0.0.1:7420").value();
  CHECK(v4 == NodeAddress{HostKind::kIpv4, "10.0.0.1", 7420});
  CHECK(v4.text() == "10.0.0.1:7420");

  const NodeAddress v6 = parse_node_address("[2001:db8::7]:1").value();
  CHECK(v6 == NodeAddress{HostKind::kIpv6, "2001:db8::7", 1});
  CHECK(v6.text() == "[2001:db8::7]:1");

  const NodeAddress name = parse_node_address("Sluice-1.eu.example.:65535").value();
  CHECK(name == NodeAddress{HostKind::kName, "Sluice-1.eu.example.", 65535});

  for (const char* good :
       {"0.0.0.0:1", "255.255.255.255:7420", "[::]:7420", "[::1]:7420", "[1::]:7420",
        "[1:2:3:4:5:6:7:8]:7420", "[1:2:3:4:5:6:7::]:7420", "[::ffff:10.0.0.1]:7420",
        "[1:2:3:4:5:6:1.2.3.4]:7420", "[ABCD:ef01::]:7420", "localhost:7420", "a:7420",
        "9lives.io:7420", "x--y.z:7420"}) {
    INFO(good);
    CHECK(address_error(good) == "ok");
  }
}

TEST_CASE("a bad address says which part is wrong", "[node]") {
  CHECK(address_error("10.0.0.1") == "address \"10.0.0.1\": expected HOST:PORT");
  CHECK(address_error(":7420") == "address \":7420\": expected HOST:PORT, the host is missing");
  CHECK(address_error("h:0") == "address \"h:0\": bad port \"0\", expected 1..65535");
  CHECK(address_error("h:65536") == "address \"h:65536\": bad port \"65536\", expected 1..65535");
  CHECK(address_error("h:07420") == "address \"h:07420\": bad port \"07420\", expected 1..65535");
  CHECK(address_error("h:") == "address \"h:\": bad port \"\", expected 1..65535");
  CHECK(address_error("h:+1") == "address \"h:+1\": bad port \"+1\", expected 1..65535");
  CHECK(address_error("10.0.0.256:1") ==
        "address \"10.0.0.256:1\": bad IPv4 address \"10.0.0.256\"");
  CHECK(address_error("1.2.3:1") == "address \"1.2.3:1\": bad IPv4 address \"1.2.3\"");
  CHECK(address_error("01.2.3.4:1") == "address \"01.2.3.4:1\": bad IPv4 address \"01.2.3.4\"");
  CHECK(address_error("1.2.3.4.5:1") == "address \"1.2.3.4.5:1\": bad IPv4 address \"1.2.3.4.5\"");
  CHECK(address_error("::1:7420") ==
        "address \"::1:7420\": an IPv6 address goes in brackets, as in [::1]:7420");
  CHECK(address_error("[::1]") == "address \"[::1]\": expected [IPV6]:PORT");
  CHECK(address_error("[::1]7420") == "address \"[::1]7420\": expected [IPV6]:PORT");
  CHECK(address_error("-a:1") == "address \"-a:1\": bad host name \"-a\"");
  CHECK(address_error("a_b:1") == "address \"a_b:1\": bad host name \"a_b\"");
  CHECK(address_error("a..b:1") == "address \"a..b:1\": bad host name \"a..b\"");
  CHECK(address_error(std::string(64, 'a') + ":1") == "address \"" + std::string(64, 'a') +
                                                          "...\": bad host name \"" +
                                                          std::string(64, 'a') + "\"");
  for (const char* bad : {"[::g]:1", "[1:2]:1", "[1::2::3]:1", "[:1::]:1", "[1:]:1", "[:::]:1",
                          "[12345::]:1", "[1:2:3:4:5:6:7:8:9]:1", "[::1:2:3:4:5:6:7:8]:1",
                          "[1.2.3.4::]:1", "[::1.2.3]:1", "[fe80::1%eth0]:1", "[]:1"}) {
    INFO(bad);
    CHECK(address_error(bad).find("bad IPv6 address") != std::string::npos);
  }
  // A DNS name is at most 253 bytes, each label at most 63.
  std::string name;
  for (int i = 0; i < 4; ++i) name += std::string(63, 'a') + ".";
  CHECK(address_error(name.substr(0, 253) + ":1") == "ok");
  CHECK(address_error(name.substr(0, 254) + "b:1").find("bad host name") != std::string::npos);
  CHECK(address_error(std::string(64, 'a') + ".b:1").find("bad host name") != std::string::npos);
}

TEST_CASE("two spellings of one address have one identity", "[node]") {
  const auto identity = [](std::string_view text) {
    return parse_node_address(text).value().identity();
  };
  CHECK(identity("[::1]:7420") == identity("[0:0::0:1]:7420"));
  CHECK(identity("[::1]:7420") == "[00000000000000000000000000000001]:7420");
  CHECK(identity("[::FFFF:10.0.0.1]:1") == identity("[::ffff:a00:1]:1"));
  CHECK(identity("Node.Example.:7420") == identity("node.example:7420"));
  CHECK(identity("10.0.0.1:7420") != identity("10.0.0.1:7421"));
  CHECK(identity("[::1]:7420") != identity("[::2]:7420"));
}

TEST_CASE("text in messages is quoted, escaped and cut short", "[node]") {
  CHECK(quote_for_message("ok") == "\"ok\"");
  CHECK(quote_for_message("a\"b\\c\n") == "\"a\\x22b\\x5cc\\x0a\"");
  CHECK(quote_for_message(std::string(65, 'x')) == "\"" + std::string(64, 'x') + "...\"");
}

}  // namespace
}  // namespace sluice::cluster
