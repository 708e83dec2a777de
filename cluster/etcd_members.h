// The membership records of the etcd mode (issue 14; docs/ARCHITECTURE.md, "Membership records
// in etcd"): the key each node keeps under its lease and the text of its value, and the cluster
// map a read of all of them gives. Pure logic, no I/O: the etcd client (etcd/) moves the bytes.
//
//   key    /sluice/<cluster>/members/<node-id>
//   value  sluice-member 1 state=<joining|active|draining> address=<HOST:PORT>
//
// Fields are `name=value`, separated by one space, after the format's name and version; a
// reader ignores fields it does not know (a later version may add some), and refuses a record
// without `state` or `address`, or of another version.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/cluster_map.h"
#include "core/expected.h"

namespace sluice::cluster {

inline constexpr std::uint32_t kMemberRecordVersion = 1;

// A cluster name follows the rules of a node id (check_node_id): it is part of every key.
// Empty when valid, else why not.
std::string check_cluster_name(std::string_view name);
// "/sluice/NAME/members/": what a node watches and ranges over.
std::string members_prefix(std::string_view cluster);
// "/sluice/NAME/members/ID".
std::string member_key(std::string_view cluster, std::string_view node_id);

// The most shard ports a record lists (sluiced's --shards is at most this).
inline constexpr std::size_t kMaxRecordShards = 1024;

// A member's record: the node, and the ports its shards listen on (shard i at shard_ports[i];
// empty when the record does not say, as a node before them wrote it).
struct MemberRecord {
  ClusterNode node;
  std::vector<std::uint16_t> shard_ports;
  friend bool operator==(const MemberRecord&, const MemberRecord&) = default;
};

// The value a node keeps under its key:
//   sluice-member 1 state=STATE address=HOST:PORT[ shards=P0,P1,...]
// REQUIRES: node.state is joining, active or draining; at most kMaxRecordShards ports.
std::string encode_member_value(const ClusterNode& node,
                                const std::vector<std::uint16_t>& shard_ports = {});
// The record a key and its value describe, in cluster `cluster`, or why not: a key outside the
// cluster's prefix, an invalid id, another format or version, a missing or bad state or
// address, a bad list of shard ports. The state `down` is never written to etcd (an absent key
// is a dead node), so it is refused too.
Expected<MemberRecord> decode_member_record(std::string_view cluster, std::string_view key,
                                            std::string_view value);
// Its node alone.
Expected<ClusterNode> decode_member(std::string_view cluster, std::string_view key,
                                    std::string_view value);

// A read of the prefix: every (key, value) at one etcd revision.
struct MemberEntry {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;  // etcd's: when the key was created (0: not known)
};
struct MembersView {
  Expected<ClusterMap> map;           // the map of the valid records, epoch = revision
  std::vector<std::string> rejected;  // one message per record left out, with its key
};
// The cluster map of the records read at `revision` (the epoch: revisions only grow, so do
// epochs). A record that does not decode is left out and reported, and so is one at the address
// of another: of the two, the one created later (by create_revision, then by key) is left out,
// so that a node started by mistake with a live node's address never takes that node's place;
// every node reading the same records leaves out the same one. The map itself fails only when
// the valid records still do not make one (more nodes than a ring holds).
MembersView members_view(std::string_view cluster, const std::vector<MemberEntry>& entries,
                         std::uint64_t revision, const RingParams& params = {});

}  // namespace sluice::cluster
