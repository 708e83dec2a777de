#include "cluster/etcd_members.h"

#include <fmt/core.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <unordered_map>
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

std::string encode_member_value(const ClusterNode& node,
                                const std::vector<std::uint16_t>& shard_ports) {
  std::string out = fmt::format("{} {} state={} address={}", kFormat, kMemberRecordVersion,
                                node_state_name(node.state), node.address);
  for (std::size_t i = 0; i < shard_ports.size(); ++i) {
    out += fmt::format("{}{}", i == 0 ? " shards=" : ",", shard_ports[i]);
  }
  return out;
}

namespace {

// "P0,P1,...": ports 1..65535, at least one, at most kMaxRecordShards; or why not.
Expected<std::vector<std::uint16_t>> parse_shard_ports(std::string_view text) {
  std::vector<std::uint16_t> ports;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t comma = text.find(',', at);
    const std::size_t end = comma == std::string_view::npos ? text.size() : comma;
    const std::string_view word = text.substr(at, end - at);
    std::uint32_t port = 0;
    bool digits = !word.empty() && word.size() <= 5;
    for (const char c : word) {
      if (c < '0' || c > '9') digits = false;
      if (digits) port = port * 10 + static_cast<std::uint32_t>(c - '0');
    }
    if (!digits || port == 0 || port > 65535) {
      return Unexpected{fmt::format("shard port {} (expected 1..65535)", quote_for_message(word))};
    }
    if (ports.size() == kMaxRecordShards) {
      return Unexpected{fmt::format("more than {} shard ports", kMaxRecordShards)};
    }
    ports.push_back(static_cast<std::uint16_t>(port));
    at = end + 1;
  }
  return ports;
}

}  // namespace

Expected<ClusterNode> decode_member(std::string_view cluster, std::string_view key,
                                    std::string_view value) {
  auto record = decode_member_record(cluster, key, value);
  if (!record) return Unexpected{record.error()};
  return std::move(record->node);
}

Expected<MemberRecord> decode_member_record(std::string_view cluster, std::string_view key,
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
  std::optional<std::vector<std::uint16_t>> shard_ports;
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
    } else if (name == "shards") {
      if (shard_ports) return bad("shards given twice");
      auto ports = parse_shard_ports(text);
      if (!ports) return bad(ports.error());
      shard_ports = std::move(*ports);
    }
    // Any other field is a later version's: ignored.
  }
  if (!state) return bad("no state");
  if (!has_address) return bad("no address");
  node.state = *state;
  return MemberRecord{std::move(node), shard_ports.value_or(std::vector<std::uint16_t>{})};
}

MembersView members_view(std::string_view cluster, const std::vector<MemberEntry>& entries,
                         std::uint64_t revision, const RingParams& params) {
  // Oldest first, so that of two records at one address the older is kept.
  std::vector<const MemberEntry*> order;
  order.reserve(entries.size());
  for (const MemberEntry& entry : entries) order.push_back(&entry);
  std::sort(order.begin(), order.end(), [](const MemberEntry* a, const MemberEntry* b) {
    return std::tie(a->create_revision, a->key) < std::tie(b->create_revision, b->key);
  });
  std::vector<ClusterNode> nodes;
  std::vector<std::string> rejected;
  std::unordered_map<std::string, std::string> id_at;  // address identity -> node id
  for (const MemberEntry* entry : order) {
    auto node = decode_member(cluster, entry->key, entry->value);
    if (!node) {
      rejected.push_back(node.error());
      continue;
    }
    const Expected<NodeAddress> address = parse_node_address(node->address);
    if (address) {
      const auto [it, fresh] = id_at.emplace(address->identity(), node->id);
      if (!fresh) {
        rejected.push_back(fmt::format("member {}: address {} is node {}'s, registered earlier",
                                       node->id, node->address, it->second));
        continue;
      }
    }
    nodes.push_back(std::move(node).value());
  }
  return MembersView{ClusterMap::make(revision, std::move(nodes), params), std::move(rejected)};
}

}  // namespace sluice::cluster
