#include <fmt/format.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cluster/membership_file.h"

namespace sluice::cluster {
namespace {

using Errors = std::vector<std::string>;

Errors errors_of(std::string_view text) {
  const auto parsed = parse_membership_file(text, "cluster.txt");
  return parsed ? Errors{} : parsed.error();
}

TEST_CASE("the cluster file lists one node per line, with comments and blank lines",
          "[membership]") {
  const std::string text =
      "# Sluice cluster eu-1\n"
      "\n"
      "node-a 10.0.0.1:7420\n"
      "   \t\n"
      "\tnode-b   [2001:db8::2]:7420   # trailing comment\n"
      "node-c sluice-3.internal:7420#comment right after\r\n"
      "# the end";
  const auto parsed = parse_membership_file(text, "cluster.txt");
  REQUIRE(parsed);
  CHECK(parsed->epoch == 1);
  const std::vector<StaticMember>& members = parsed->members;
  REQUIRE(members.size() == 3);
  CHECK(members[0] == StaticMember{"node-a", {HostKind::kIpv4, "10.0.0.1", 7420}, 3});
  CHECK(members[1] == StaticMember{"node-b", {HostKind::kIpv6, "2001:db8::2", 7420}, 5});
  CHECK(members[2] == StaticMember{"node-c", {HostKind::kName, "sluice-3.internal", 7420}, 6});
}

TEST_CASE("a line with one field says what is missing", "[membership]") {
  CHECK(errors_of("a 10.0.0.1:1\nnode-b\n") ==
        Errors{"cluster.txt:2: node \"node-b\" has no address: expected ID HOST:PORT"});
  CHECK(errors_of("   10.0.0.1:7420   # no id\n") ==
        Errors{"cluster.txt:1: missing node id before the address \"10.0.0.1:7420\""});
}

TEST_CASE("a line with more than two fields is refused", "[membership]") {
  CHECK(errors_of("\n\na 10.0.0.1:1 weight=2\n") ==
        Errors{"cluster.txt:3: unexpected \"weight=2\" after the address: expected ID HOST:PORT"});
}

TEST_CASE("an id of bad bytes or over 64 bytes is refused with its line", "[membership]") {
  CHECK(errors_of("a 10.0.0.1:1\nn\xc3\xb6"
                  "de 10.0.0.2:1\n") ==
        Errors{"cluster.txt:2: node id \"n\\xc3\\xb6de\" has a byte that is not a letter, digit, "
               "'.', '_' or '-'"});
  CHECK(errors_of(std::string(64, 'i') + " 10.0.0.1:1\n" + std::string(65, 'i') +
                  " 10.0.0.2:1\n") == Errors{"cluster.txt:2: node id is 65 bytes, longer than 64"});
}

TEST_CASE("a bad host or port is refused with its line", "[membership]") {
  CHECK(errors_of("a 10.0.0.1\n") ==
        Errors{"cluster.txt:1: address \"10.0.0.1\": expected HOST:PORT"});
  CHECK(errors_of("# x\na h:70000\n") ==
        Errors{"cluster.txt:2: address \"h:70000\": bad port \"70000\", expected 1..65535"});
  CHECK(errors_of("a 300.0.0.1:1\n") ==
        Errors{"cluster.txt:1: address \"300.0.0.1:1\": bad IPv4 address \"300.0.0.1\""});
  CHECK(errors_of("a [::g]:1\n") ==
        Errors{"cluster.txt:1: address \"[::g]:1\": bad IPv6 address \"::g\""});
  CHECK(errors_of("a ::1:7420\n") ==
        Errors{"cluster.txt:1: address \"::1:7420\": an IPv6 address goes in brackets, as in "
               "[::1]:7420"});
  CHECK(errors_of("a host_1:1\n") ==
        Errors{"cluster.txt:1: address \"host_1:1\": bad host name \"host_1\""});
}

TEST_CASE("a bad id and a bad address on one line are both reported", "[membership]") {
  CHECK(errors_of("a/b h:0\n") ==
        Errors{"cluster.txt:1: node id \"a/b\" has a byte that is not a letter, digit, '.', '_' "
               "or '-'",
               "cluster.txt:1: address \"h:0\": bad port \"0\", expected 1..65535"});
}

TEST_CASE("a duplicate id is refused and names the line of the first", "[membership]") {
  CHECK(errors_of("a 10.0.0.1:1\nb 10.0.0.2:1\n\na 10.0.0.3:1\n") ==
        Errors{"cluster.txt:4: node id \"a\" is already on line 1"});
}

TEST_CASE("a duplicate address is refused, however it is spelled", "[membership]") {
  CHECK(errors_of("a 10.0.0.1:1\nb 10.0.0.1:1\n") ==
        Errors{"cluster.txt:2: address 10.0.0.1:1 is already that of node \"a\" on line 1"});
  CHECK(errors_of("a [::1]:7420\nb [0:0::1]:7420\n") ==
        Errors{"cluster.txt:2: address [0:0::1]:7420 is already that of node \"a\" on line 1"});
  CHECK(errors_of("a Sluice.Example:1\nb sluice.example.:1\n") ==
        Errors{"cluster.txt:2: address sluice.example.:1 is already that of node \"a\" on line 1"});
  // Another port is another address.
  CHECK(errors_of("a 10.0.0.1:1\nb 10.0.0.1:2\n").empty());
}

TEST_CASE("a file without nodes is refused at its last line", "[membership]") {
  CHECK(errors_of("") == Errors{"cluster.txt:1: no nodes: expected a line ID HOST:PORT per node"});
  CHECK(errors_of("# nothing yet\n\n# really\n") ==
        Errors{"cluster.txt:3: no nodes: expected a line ID HOST:PORT per node"});
}

TEST_CASE("every error is reported in line order, up to a limit", "[membership]") {
  CHECK(errors_of("a 10.0.0.1:1\nbad\nb h:0\na 10.0.0.2:1\n") ==
        Errors{"cluster.txt:2: node \"bad\" has no address: expected ID HOST:PORT",
               "cluster.txt:3: address \"h:0\": bad port \"0\", expected 1..65535",
               "cluster.txt:4: node id \"a\" is already on line 1"});
  std::string garbage;
  for (int i = 0; i < 100; ++i) garbage += "x\n";
  const Errors errors = errors_of(garbage);
  REQUIRE(errors.size() == kMaxMembershipErrors + 1);
  CHECK(errors[19] == "cluster.txt:20: node \"x\" has no address: expected ID HOST:PORT");
  CHECK(errors[20] == "cluster.txt:21: too many errors, stopping");
}

TEST_CASE("a file of more than 1024 nodes is refused at the first node too many", "[membership]") {
  std::string text;
  for (int i = 0; i < 1025; ++i) text += fmt::format("n{} 10.0.{}.{}:7420\n", i, i / 256, i % 256);
  CHECK(errors_of(text) == Errors{"cluster.txt:1025: more than 1024 nodes"});
}

TEST_CASE("an epoch line sets the map's epoch, once, to a whole number from 1", "[membership]") {
  const auto parsed = parse_membership_file("epoch 7\na 127.0.0.1:1\n", "c.txt");
  REQUIRE(parsed);
  CHECK(parsed->epoch == 7);
  CHECK(parsed->members.size() == 1);
  const std::string bad = "expected `epoch N` with N a whole number from 1 to 999999999999999999";
  CHECK(errors_of("epoch 0\na 127.0.0.1:1\n") == Errors{"cluster.txt:1: " + bad});
  CHECK(errors_of("epoch x\na 127.0.0.1:1\n") == Errors{"cluster.txt:1: " + bad});
  CHECK(errors_of("epoch\na 127.0.0.1:1\n") == Errors{"cluster.txt:1: " + bad});
  CHECK(errors_of("epoch 1 2\na 127.0.0.1:1\n") == Errors{"cluster.txt:1: " + bad});
  CHECK(errors_of("epoch 1\nepoch 2\na 127.0.0.1:1\n") ==
        Errors{"cluster.txt:2: a second epoch line (the first is line 1)"});
  // A node may be named "epoch": its second field is an address.
  const auto named = parse_membership_file("epoch 127.0.0.1:7420\n", "c.txt");
  REQUIRE(named);
  CHECK(named->members.at(0).id == "epoch");
  CHECK(named->epoch == 1);
}

TEST_CASE("read_membership_file reads a file, and says why it cannot", "[membership]") {
  char path[] = "/tmp/sluice-cluster-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string text = "a 10.0.0.1:7420\nb 10.0.0.2:7420\n";
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  const auto parsed = read_membership_file(path);
  REQUIRE(parsed);
  CHECK(parsed->members.size() == 2);

  REQUIRE(truncate(path, 0) == 0);
  CHECK(read_membership_file(path).error() ==
        Errors{std::string(path) + ":1: no nodes: expected a line ID HOST:PORT per node"});
  REQUIRE(truncate(path, kMaxMembershipFileBytes + 1) == 0);
  CHECK(read_membership_file(path).error() ==
        Errors{std::string(path) + ": larger than 1048576 bytes"});
  std::remove(path);
  CHECK(read_membership_file(path).error() ==
        Errors{std::string(path) + ": cannot open: No such file or directory"});
  CHECK(read_membership_file("/").error() == Errors{"/: cannot read: Is a directory"});
}

}  // namespace
}  // namespace sluice::cluster
