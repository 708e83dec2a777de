#include "cluster/etcd_members.h"

#include <fmt/core.h>

#include <optional>
#include <utility>

#include "cluster/node.h"

namespace sluice::cluster {

namespace {

constexpr std::string_view kFormat = "sluice-member";

std::string with_cluster_word(std::string why) {
  // check_node_id() speaks of a "node id"; here it is a cluster name.
  const std::string_view from = "node id";
  if (why.starts_with(from)) return "cluster name" + why.substr(from.size());
  if (why == "empty node id") return "empty cluster name";
  return why;
}

}  // namespace

std::string check_cluster_name(std::string_view name) {
  std::string why = check_node_id(name);
  return why.empty() ? why : with_cluster_word(std::move(why));
}

std::string members_prefix(std::string_view cluster) {
  return fmt::format("/sluice/{}/members/", cluster);
}

std::string member_key(std::string_view cluster, std::string_view node_id) {
  return members_prefix(cluster) + std::string(node_id);
}

std::string encode_member_value(const ClusterNode& node) {
  return fmt::format("{} {} state={} address={}", kFormat, kMemberRecordVersion,
                     node_state_name(node.state), node.address);
}

Expected<ClusterNode> decode_member(std::string_view cluster, std::string_view key,
                                    std::string_view value) {
  const std::string prefix = members_prefix(cluster);
  if (!key.starts_with(prefix)) {
    return Unexpected{fmt::format("key {} is not under {}", quote_for_message(key), prefix)};
  }
  ClusterNode node;
  node.id = std::string(key.substr(prefix.size()));
  if (std::string why = check_node_id(node.id); !why.empty()) {
    return Unexpected{fmt::format("key {}: {}", quote_for_message(key), why)};
  }
  const auto bad = [&](std::string_view why) {
    return Unexpected{
        fmt::format("member {}: {} in value {}", node.id, why, quote_for_message(value))};
  };
  // The words, one space apart: the format, its version, then the fields.
  std::vector<std::string_view> words;
  for (std::size_t at = 0; at <= value.size();) {
    const std::size_t space = value.find(' ', at);
    const std::size_t end = space == std::string_view::npos ? value.size() : space;
    words.push_back(value.substr(at, end - at));
    at = end + 1;
  }
  if (words.size() < 2 || words[0] != kFormat) return bad("not a sluice-member record");
  if (words[1] != std::to_string(kMemberRecordVersion)) {
    return bad(fmt::format("version {} (this node reads {})", quote_for_message(words[1]),
                           kMemberRecordVersion));
  }
  std::optional<NodeState> state;
  bool has_address = false;
  for (std::size_t i = 2; i < words.size(); ++i) {
    const std::string_view word = words[i];
    const std::size_t equals = word.find('=');
    if (word.empty() || equals == std::string_view::npos || equals == 0) {
      return bad(fmt::format("field {} is not name=value", quote_for_message(word)));
    }
    const std::string_view name = word.substr(0, equals);
    const std::string_view text = word.substr(equals + 1);
    if (name == "state") {
      if (state) return bad("state given twice");
      state = parse_node_state(text);
      if (!state || *state == NodeState::kDown) {
        return bad(fmt::format("state {} (expected joining, active or draining)",
                               quote_for_message(text)));
      }
    } else if (name == "address") {
      if (has_address) return bad("address given twice");
      const auto address = parse_node_address(text);
      if (!address) return bad(address.error());
      node.address = std::string(text);
      has_address = true;
    }
    // Any other field is a later version's: ignored.
  }
  if (!state) return bad("no state");
  if (!has_address) return bad("no address");
  node.state = *state;
  return node;
}

MembersView members_view(std::string_view cluster, const std::vector<MemberEntry>& entries,
                         std::uint64_t revision, const RingParams& params) {
  std::vector<ClusterNode> nodes;
  std::vector<std::string> rejected;
  for (const MemberEntry& entry : entries) {
    auto node = decode_member(cluster, entry.key, entry.value);
    if (node) {
      nodes.push_back(std::move(node).value());
    } else {
      rejected.push_back(node.error());
    }
  }
  return MembersView{ClusterMap::make(revision, std::move(nodes), params), std::move(rejected)};
}

}  // namespace sluice::cluster
