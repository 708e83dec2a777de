// The static cluster file (`sluiced --cluster FILE`): the same text on every node, one node per
// line, its id and its address:
//
//   # Sluice cluster "eu-1"
//   node-a 10.0.0.1:7420
//   node-b [2001:db8::2]:7420   # a comment may end a line too
//   node-c sluice-3.internal:7420
//
// and at most one line `epoch N` (N a decimal number, 1 and up; 1 when the line is absent): the
// map's epoch, which a reload that changes the members must raise (sluiced refuses it
// otherwise). Fields are separated by spaces or tabs; '#' starts a comment to the end of the
// line; blank lines and a CR before the LF are ignored. Ids follow check_node_id(), addresses
// parse_node_address() (cluster/node.h). Ids must differ, and so must addresses (by
// NodeAddress::identity(): "[::1]" and "[0::1]" are one address).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/node.h"
#include "core/expected.h"

namespace sluice::cluster {

// The largest file read_membership_file() reads: far more than kMaxRingNodes lines need.
inline constexpr std::size_t kMaxMembershipFileBytes = 1 << 20;
// After this many errors parsing stops, with a last "FILE:LINE: too many errors" at the line it
// stopped on, so that a binary file given by mistake does not print a million lines.
inline constexpr std::size_t kMaxMembershipErrors = 20;

struct StaticMember {
  std::string id;
  NodeAddress address;
  std::size_t line = 0;  // 1-based, where the file lists it
  friend bool operator==(const StaticMember&, const StaticMember&) = default;
};

struct StaticCluster {
  std::uint64_t epoch = 1;
  std::vector<StaticMember> members;  // in file order
  friend bool operator==(const StaticCluster&, const StaticCluster&) = default;
};

// Every problem found, in line order, each "FILE:LINE: message" (for a file that lists no node
// at all, LINE is its last line).
using MembershipErrors = std::vector<std::string>;

// The epoch and the members, or all the errors. Pure: `file_name` only goes into the messages.
Expected<StaticCluster, MembershipErrors> parse_membership_file(std::string_view text,
                                                                std::string_view file_name);

// Reads the file at `path` and parses it. A file that cannot be read, or is larger than
// kMaxMembershipFileBytes, fails with one error "PATH: why".
Expected<StaticCluster, MembershipErrors> read_membership_file(const std::string& path);

}  // namespace sluice::cluster
