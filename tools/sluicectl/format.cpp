#include "tools/sluicectl/format.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>

#include "cli/json_writer.h"
#include "cluster/lease_fence.h"
#include "core/rule.h"
#include "tools/sluicectl/options.h"

namespace sluice::ctl {

using client::ClusterInfo;
using client::Decision;
using client::ReloadOutcome;
using client::Stat;

namespace {

std::string ms_text(std::uint64_t ms) {
  return ms == kNever ? std::string("never") : fmt::format("{} ms", ms);
}

std::string percent(std::uint32_t part, std::uint32_t whole) {
  return whole == 0 ? std::string("-")
                    : fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / whole);
}

double share(std::uint32_t part, std::uint32_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / whole;
}

// A node's fence, from node.fence_reason (cluster::FenceReason; -1: not reported).
std::string fence_text(const client::ClusterNodeInfo& n) {
  if (n.fence_reason < 0) {
    return n.stats_status.ok() ? std::string("no fence reported (not in etcd mode?)")
                               : "unknown: " + n.stats_status.to_string();
  }
  if (n.fence_reason == 0) return "serving as primary";
  return fmt::format(
      "fenced: serving nothing as primary ({})",
      cluster::fence_reason_text(static_cast<cluster::FenceReason>(std::min(n.fence_reason, 255))));
}

// A replica link, from replication.<peer>.link, or .up from an older node.
std::string link_text(const client::ReplicationLag& lag) {
  std::string out;
  switch (lag.link) {
    case 0:
      out = "idle";
      break;
    case 1:
      out = "up";
      break;
    case 2:
      out = "down";
      break;
    default:
      out = lag.up ? "up" : "not connected";
  }
  return lag.stalled ? out + ", stalled" : out;
}

std::string json_link(int link) {
  switch (link) {
    case 0:
      return "\"idle\"";
    case 1:
      return "\"up\"";
    case 2:
      return "\"down\"";
    default:
      return "null";
  }
}

std::string json_int(int value) { return value < 0 ? std::string("null") : std::to_string(value); }

}  // namespace

std::string json_string(std::string_view text) {
  std::string out;
  cli::JsonWriter::append_quoted(out, text);
  return out;
}

std::string format_ping(const client::ServerInfo& info, std::chrono::nanoseconds rtt, bool json) {
  const double ms = static_cast<double>(rtt.count()) / 1e6;
  if (json) {
    return fmt::format("{{\"server\":{},\"node_id\":{},\"shards\":{},\"rtt_ms\":{:.3f}}}\n",
                       json_string(info.endpoint), json_string(info.node_id),
                       info.shard_ports.size(), ms);
  }
  return fmt::format("pong from {} (node {}, {} shards): {:.3f} ms\n", info.endpoint, info.node_id,
                     info.shard_ports.size(), ms);
}

std::string format_decision(std::string_view key, const Decision& d,
                            const std::vector<client::HeaderField>& headers, bool json) {
  if (json) {
    std::string out = fmt::format(
        "{{\"key\":{},\"allowed\":{},\"limit\":{},\"remaining\":{},\"reset_after_ms\":{},"
        "\"retry_after_ms\":{},\"source\":{},\"headers\":{{",
        json_string(key), d.allowed, d.limit, d.remaining, d.reset_after_ms,
        d.retry_never() ? std::string("null") : std::to_string(d.retry_after_ms),
        json_string(client::source_name(d.source)));
    for (std::size_t i = 0; i < headers.size(); ++i) {
      if (i > 0) out += ',';
      out += json_string(headers[i].name) + ":" + json_string(headers[i].value);
    }
    out += "}}\n";
    return out;
  }
  std::string out = fmt::format("{}  {}\n", d.allowed ? "ALLOWED" : "DENIED", key);
  out += fmt::format("  limit        {}\n", d.limit);
  out += fmt::format("  remaining    {}\n", d.remaining);
  out += fmt::format("  reset after  {}\n", ms_text(d.reset_after_ms));
  out += fmt::format("  retry after  {}\n", ms_text(d.retry_after_ms));
  out += fmt::format("  source       {}\n", client::source_name(d.source));
  out += "headers\n";
  for (const auto& h : headers) out += fmt::format("  {}: {}\n", h.name, h.value);
  return out;
}

std::string format_reset(std::string_view key, bool existed, bool json) {
  if (json) return fmt::format("{{\"key\":{},\"existed\":{}}}\n", json_string(key), existed);
  return fmt::format("{}: {}\n", key,
                     existed ? "reset (the key existed)" : "not found (nothing to reset)");
}

std::string format_stats(const client::ServerInfo& node, const std::vector<Stat>& stats,
                         bool json) {
  std::vector<std::string> names;  // row order: first seen
  std::map<std::string, std::map<std::size_t, std::uint64_t>> per_shard;
  std::map<std::string, std::uint64_t> totals;
  std::vector<const Stat*> other;
  std::size_t shard_count = 0;
  auto note_name = [&](const std::string& name) {
    if (!per_shard.count(name) && !totals.count(name)) names.push_back(name);
  };
  for (const Stat& s : stats) {
    std::string_view n = s.name;
    if (n.starts_with("total.")) {
      const std::string name(n.substr(6));
      note_name(name);
      totals[name] = s.value;
    } else if (n.starts_with("shard.")) {
      const std::string_view rest = n.substr(6);
      const std::size_t dot = rest.find('.');
      std::size_t index = 0;
      const auto [end, ec] =
          std::from_chars(rest.data(), rest.data() + std::min(dot, rest.size()), index);
      if (dot == std::string_view::npos || ec != std::errc() || end != rest.data() + dot) {
        other.push_back(&s);
        continue;
      }
      const std::string name(rest.substr(dot + 1));
      note_name(name);
      per_shard[name][index] = s.value;
      shard_count = std::max(shard_count, index + 1);
    } else {
      other.push_back(&s);
    }
  }

  if (json) {
    std::string out = fmt::format("{{\"server\":{},\"node_id\":{},\"total\":{{",
                                  json_string(node.endpoint), json_string(node.node_id));
    bool first = true;
    for (const auto& name : names) {
      if (!totals.count(name)) continue;
      out += fmt::format("{}{}:{}", first ? "" : ",", json_string(name), totals[name]);
      first = false;
    }
    out += "},\"shards\":[";
    for (std::size_t i = 0; i < shard_count; ++i) {
      out += i == 0 ? "{" : ",{";
      first = true;
      for (const auto& name : names) {
        const auto& row = per_shard[name];
        if (!row.count(i)) continue;
        out += fmt::format("{}{}:{}", first ? "" : ",", json_string(name), row.at(i));
        first = false;
      }
      out += "}";
    }
    out += "],\"other\":{";
    for (std::size_t i = 0; i < other.size(); ++i) {
      out +=
          fmt::format("{}{}:{}", i == 0 ? "" : ",", json_string(other[i]->name), other[i]->value);
    }
    out += "}}\n";
    return out;
  }

  std::size_t width = 7;
  for (const auto& name : names) width = std::max(width, name.size());
  std::string out = fmt::format("stats of node {} ({})\n", node.node_id, node.endpoint);
  out += fmt::format("{:<{}}", "counter", width);
  for (std::size_t i = 0; i < shard_count; ++i) {
    out += fmt::format(" {:>14}", fmt::format("shard {}", i));
  }
  out += fmt::format(" {:>14}\n", "total");
  for (const auto& name : names) {
    out += fmt::format("{:<{}}", name, width);
    const auto& row = per_shard[name];
    for (std::size_t i = 0; i < shard_count; ++i) {
      out += row.count(i) ? fmt::format(" {:>14}", row.at(i)) : fmt::format(" {:>14}", "-");
    }
    out +=
        totals.count(name) ? fmt::format(" {:>14}\n", totals[name]) : fmt::format(" {:>14}\n", "-");
  }
  for (const Stat* s : other) out += fmt::format("{} {}\n", s->name, s->value);
  return out;
}

namespace {

// Who the cluster should have (the map's nodes and the members lost from it) and who of them
// does not answer (a node whose STATS failed, or a lost member).
struct ExpectedMembers {
  std::size_t members = 0;
  std::size_t answering = 0;
  std::vector<std::string> missing;  // the map's first (by id), then the lost (most recent first)
};

ExpectedMembers expected_members(const ClusterInfo& info) {
  ExpectedMembers out;
  out.members = info.nodes.size() + info.lost.size();
  for (const auto& n : info.nodes) {
    if (n.stats_status.ok()) {
      ++out.answering;
    } else {
      out.missing.push_back(n.id);
    }
  }
  for (const auto& m : info.lost) out.missing.push_back(m.id);
  return out;
}

// "expected 3 members: 2 answering, 1 missing (n2)", with "(the map's 2 + 1 lost since epoch 7)"
// after the count when members were lost.
std::string expected_line(const ClusterInfo& info, const ExpectedMembers& expected) {
  std::string out = fmt::format("expected {} members", expected.members);
  if (!info.lost.empty()) {
    std::uint64_t since = info.lost.front().epoch;
    for (const auto& m : info.lost) since = std::min(since, m.epoch);
    out += fmt::format(" (the map's {} + {} lost since epoch {})", info.nodes.size(),
                       info.lost.size(), since);
  }
  out += fmt::format(": {} answering, {} missing", expected.answering, expected.missing.size());
  if (!expected.missing.empty()) {
    out += " (";
    for (std::size_t i = 0; i < expected.missing.size(); ++i) {
      out += (i == 0 ? "" : ", ") + expected.missing[i];
    }
    out += ")";
  }
  return out + "\n";
}

}  // namespace

std::string format_cluster(const ClusterInfo& info, std::string_view endpoint, bool json,
                           const EtcdSide* etcd) {
  const ExpectedMembers expected = expected_members(info);
  // With etcd's records: false for a node the map lists but etcd no longer holds.
  const auto in_etcd = [&](const client::ClusterNodeInfo& n) {
    return etcd == nullptr ||
           std::find(etcd->ids.begin(), etcd->ids.end(), n.id) != etcd->ids.end();
  };
  // The URL at the node's etcd member index in sluicectl's own --etcd, when there is one.
  const auto etcd_url = [&](const client::ClusterNodeInfo& n) -> const std::string* {
    if (etcd == nullptr || n.etcd_endpoint < 0) return nullptr;
    const auto index = static_cast<std::size_t>(n.etcd_endpoint);
    return index < etcd->urls.size() ? &etcd->urls[index] : nullptr;
  };
  if (json) {
    std::string out = fmt::format(
        "{{\"epoch\":{},\"clustered\":{},\"partitions\":{},\"vnodes_per_node\":{},\"self\":{},"
        "\"nodes\":[",
        info.epoch, !info.nodes.empty(), info.partitions, info.vnodes_per_node,
        info.self ? json_string(info.nodes.at(*info.self).id) : std::string("null"));
    for (std::size_t i = 0; i < info.nodes.size(); ++i) {
      const auto& n = info.nodes[i];
      out += fmt::format(
          "{}{{\"id\":{},\"address\":{},\"state\":{},\"primary_partitions\":{},"
          "\"replica_partitions\":{},\"primary_share\":{:.2f},\"replica_share\":{:.2f},"
          "\"fenced\":{},\"fence_reason\":{},\"etcd_endpoint\":{},\"etcd_url\":{},"
          "\"in_etcd\":{},\"replication\":[",
          i == 0 ? "" : ",", json_string(n.id), json_string(n.address), json_string(n.state),
          n.primary_partitions, n.replica_partitions, share(n.primary_partitions, info.partitions),
          share(n.replica_partitions, info.partitions),
          n.fence_reason < 0 ? "null" : (n.fence_reason == 0 ? "false" : "true"),
          json_int(n.fence_reason), json_int(n.etcd_endpoint),
          etcd_url(n) != nullptr ? json_string(*etcd_url(n)) : std::string("null"),
          etcd == nullptr ? "null" : (in_etcd(n) ? "true" : "false"));
      for (std::size_t p = 0; p < n.replication.size(); ++p) {
        const auto& lag = n.replication[p];
        out += fmt::format(
            "{}{{\"peer\":{},\"records\":{},\"lag_ms\":{},\"up\":{},\"link\":{},"
            "\"stalled\":{}}}",
            p == 0 ? "" : ",", json_string(lag.peer), lag.records, lag.lag_ms, lag.up,
            json_link(lag.link), lag.stalled);
      }
      out += fmt::format("],\"stats_error\":{}}}", n.stats_status.ok()
                                                       ? std::string("null")
                                                       : json_string(n.stats_status.to_string()));
    }
    out += fmt::format("],\"expected\":{},\"answering\":{},\"missing\":[", expected.members,
                       expected.answering);
    for (std::size_t i = 0; i < expected.missing.size(); ++i) {
      out += (i == 0 ? "" : ",") + json_string(expected.missing[i]);
    }
    out += "],\"lost\":[";
    for (std::size_t i = 0; i < info.lost.size(); ++i) {
      out += fmt::format("{}{{\"id\":{},\"epoch\":{}}}", i == 0 ? "" : ",",
                         json_string(info.lost[i].id), info.lost[i].epoch);
    }
    out += "]}\n";
    return out;
  }
  if (info.nodes.empty()) {
    return fmt::format("{} is not in a cluster (epoch {}): a single node\n", endpoint, info.epoch);
  }
  std::string out =
      fmt::format("cluster epoch {}: {} nodes, {} partitions, {} points per node (asked {})\n",
                  info.epoch, info.nodes.size(), info.partitions, info.vnodes_per_node, endpoint);
  out += expected_line(info, expected);
  std::size_t id_width = 4;
  std::size_t address_width = 7;
  for (const auto& n : info.nodes) {
    id_width = std::max(id_width, n.id.size());
    address_width = std::max(address_width, n.address.size());
  }
  for (const auto& m : info.lost) id_width = std::max(id_width, m.id.size());
  out += fmt::format("{:<{}}  {:<{}}  {:<8}  {:>8}  {:>8}\n", "node", id_width, "address",
                     address_width, "state", "primary", "replica");
  for (const auto& n : info.nodes) {
    out += fmt::format("{:<{}}  {:<{}}  {:<8}  {:>8}  {:>8}\n", n.id, id_width, n.address,
                       address_width, n.state, percent(n.primary_partitions, info.partitions),
                       percent(n.replica_partitions, info.partitions));
  }
  // Each missing member and why: its STATS failed, or it left the map without draining.
  if (!expected.missing.empty()) {
    out += "missing\n";
    for (const auto& n : info.nodes) {
      if (n.stats_status.ok()) continue;
      out +=
          fmt::format("  {:<{}}  not answering: {}\n", n.id, id_width, n.stats_status.to_string());
    }
    for (const auto& m : info.lost) {
      out += fmt::format(
          "  {:<{}}  lost at epoch {}: left the map without draining (lease expired or record "
          "deleted)\n",
          m.id, id_width, m.epoch);
    }
  }
  // etcd mode (a node reports its fence, or etcd was read): whether each node serves.
  const bool etcd_mode =
      etcd != nullptr || std::any_of(info.nodes.begin(), info.nodes.end(),
                                     [](const auto& n) { return n.fence_reason >= 0; });
  if (etcd_mode) {
    out += etcd == nullptr
               ? "serving (from each node's STATS; etcd member: its index in that node's --etcd)\n"
               : "serving (from each node's STATS; etcd member: its index in that node's --etcd, "
                 "with the URL at that index of sluicectl's --etcd)\n";
    for (const auto& n : info.nodes) {
      std::string line = fence_text(n);
      if (n.etcd_endpoint >= 0) line += fmt::format("; etcd member {}", n.etcd_endpoint);
      if (const std::string* url = etcd_url(n)) line += fmt::format(" ({})", *url);
      if (!in_etcd(n)) line = "lease gone, keys not yet moved (no record in etcd); " + line;
      out += fmt::format("  {:<{}}  {}\n", n.id, id_width, line);
    }
  }
  out += "replication (from each node's STATS: records not yet acknowledged, oldest age)\n";
  for (const auto& n : info.nodes) {
    if (!n.stats_status.ok()) {
      out += fmt::format("  {:<{}}  unknown: {}\n", n.id, id_width, n.stats_status.to_string());
      continue;
    }
    if (n.replication.empty()) out += fmt::format("  {:<{}}  streams to no peer\n", n.id, id_width);
    for (const auto& lag : n.replication) {
      out += fmt::format("  {:<{}} -> {:<{}}  {} records  {} ms  {}\n", n.id, id_width, lag.peer,
                         id_width, lag.records, lag.lag_ms, link_text(lag));
    }
  }
  return out;
}

int reload_exit_status(const std::vector<ReloadOutcome>& outcomes) {
  bool refused = false;
  for (const auto& r : outcomes) {
    if (!r.status.ok()) return kExitError;
    refused = refused || !r.refusal.empty();
  }
  return refused ? kExitDenied : kExitOk;
}

std::string format_reload(const std::vector<ReloadOutcome>& outcomes, bool json) {
  std::string out;
  if (json) {
    int refused = 0;
    int failed = 0;
    out = "{\"nodes\":[";
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
      const auto& r = outcomes[i];
      failed += !r.status.ok();
      refused += r.status.ok() && !r.refusal.empty();
      out += fmt::format(
          "{}{{\"id\":{},\"address\":{},\"epoch\":{},\"refused\":{},\"error\":{}}}",
          i == 0 ? "" : ",", json_string(r.node_id), json_string(r.address),
          r.status.ok() ? std::to_string(r.epoch) : std::string("null"),
          r.status.ok() && !r.refusal.empty() ? json_string(r.refusal) : std::string("null"),
          r.status.ok() ? std::string("null") : json_string(r.status.to_string()));
    }
    out += fmt::format("],\"refused\":{},\"failed\":{}}}\n", refused, failed);
    return out;
  }
  for (const auto& r : outcomes) {
    const std::string node = r.node_id.empty() ? r.address : r.node_id + " " + r.address;
    if (!r.status.ok()) {
      out += fmt::format("{}: error: {}\n", node, r.status.to_string());
    } else if (!r.refusal.empty()) {
      out += fmt::format("{}: refused (epoch {} stays): {}\n", node, r.epoch, r.refusal);
    } else {
      out += fmt::format("{}: reloaded, epoch {}\n", node, r.epoch);
    }
  }
  return out;
}

std::string format_drain(const ReloadOutcome& outcome, bool json) {
  if (json) {
    return fmt::format(
        "{{\"id\":{},\"address\":{},\"epoch\":{},\"refused\":{}}}\n", json_string(outcome.node_id),
        json_string(outcome.address), outcome.epoch,
        outcome.refusal.empty() ? std::string("null") : json_string(outcome.refusal));
  }
  if (outcome.refusal.empty()) {
    return fmt::format(
        "{} {}: draining (asked at epoch {}); its ranges move under the next epoch\n",
        outcome.node_id, outcome.address, outcome.epoch);
  }
  return fmt::format("{} {}: drain refused: {}\n", outcome.node_id, outcome.address,
                     outcome.refusal);
}

namespace {

// `at_ns` seen from `now_ns` on the same clock: "in 1.500 s", "0.250 s ago" or "now".
std::string relative_time(std::uint64_t at_ns, std::uint64_t now_ns) {
  if (at_ns == now_ns) return "now";
  const std::uint64_t gap = at_ns > now_ns ? at_ns - now_ns : now_ns - at_ns;
  const std::string seconds = fmt::format("{:.3f} s", static_cast<double>(gap) / 1e9);
  return at_ns > now_ns ? "in " + seconds : seconds + " ago";
}

std::string copy_name(const client::StoredCopy& copy) {
  return copy.node_id.empty() ? copy.address : copy.node_id;
}

std::string stored_text(const client::StoredCopy& copy) {
  std::string out(algorithm_name(copy.algorithm));
  if (copy.algorithm == Algorithm::kSlidingLog) {
    out += fmt::format(", {} timestamps", copy.log.size());
    if (!copy.log.empty()) {
      out += fmt::format(", oldest {}, newest {}", relative_time(copy.log.front(), copy.now_ns),
                         relative_time(copy.log.back(), copy.now_ns));
    }
  }
  for (const StateField& field : describe_state(copy.algorithm, copy.state)) {
    out += fmt::format(
        ", {} {}", field.name,
        field.is_time ? relative_time(field.value, copy.now_ns) : std::to_string(field.value));
  }
  out += fmt::format("; capacity class {} of 15; fresh again {}", copy.capacity_class,
                     relative_time(copy.expires_at_ns, copy.now_ns));
  return out;
}

std::string json_copy(const client::StoredCopy& copy) {
  std::string out = fmt::format("{{\"node\":{},\"address\":{}", json_string(copy.node_id),
                                json_string(copy.address));
  if (!copy.status.ok()) {
    return out + fmt::format(",\"error\":{}}}", json_string(copy.status.to_string()));
  }
  out += fmt::format(
      ",\"error\":null,\"role\":{},\"partition_state\":{},\"shard\":{},\"now_ns\":{},"
      "\"stored\":{}",
      json_string(copy.role),
      copy.partition_state.empty() ? std::string("null") : json_string(copy.partition_state),
      copy.shard, copy.now_ns, copy.stored);
  if (!copy.stored) return out + "}";
  const std::uint64_t expires_in_ms = copy.expires_at_ns > copy.now_ns
                                          ? (copy.expires_at_ns - copy.now_ns + 999'999) / 1'000'000
                                          : 0;
  out += fmt::format(
      ",\"algorithm\":{},\"capacity_class\":{},\"expires_at_ns\":{},\"expires_in_ms\":{},"
      "\"state\":{{",
      json_string(algorithm_name(copy.algorithm)), copy.capacity_class, copy.expires_at_ns,
      expires_in_ms);
  const std::vector<StateField> fields = describe_state(copy.algorithm, copy.state);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    out += fmt::format("{}{}:{}", i == 0 ? "" : ",", json_string(fields[i].name), fields[i].value);
  }
  out += "},\"log\":[";
  for (std::size_t i = 0; i < copy.log.size(); ++i) {
    out += fmt::format("{}{}", i == 0 ? "" : ",", copy.log[i]);
  }
  return out + "]}";
}

}  // namespace

std::string format_inspect(std::string_view key, const client::KeyInspection& inspection,
                           bool json) {
  const auto json_or_null = [](const std::string& text) {
    return text.empty() ? std::string("null") : json_string(text);
  };
  if (json) {
    std::string out = fmt::format(
        "{{\"key\":{},\"clustered\":{},\"epoch\":{},\"partition\":{},\"partitions\":{},"
        "\"primary\":{},\"replica\":{},\"copies\":[",
        json_string(key), inspection.clustered, inspection.epoch,
        inspection.clustered ? std::to_string(inspection.partition) : std::string("null"),
        inspection.partitions, json_or_null(inspection.primary), json_or_null(inspection.replica));
    for (std::size_t i = 0; i < inspection.copies.size(); ++i) {
      out += (i == 0 ? "" : ",") + json_copy(inspection.copies[i]);
    }
    return out + "]}\n";
  }
  std::string out;
  if (!inspection.clustered) {
    out = fmt::format("key {}: the node is not in a cluster\n", json_string(key));
  } else if (inspection.primary.empty()) {
    return fmt::format("key {}: partition {} of {}, map epoch {}: no active node owns it\n",
                       json_string(key), inspection.partition, inspection.partitions,
                       inspection.epoch);
  } else {
    const client::StoredCopy& primary = inspection.copies.front();
    out = fmt::format("key {}: partition {} of {}, map epoch {}: primary {} ({})", json_string(key),
                      inspection.partition, inspection.partitions, inspection.epoch,
                      primary.node_id, primary.address);
    out += inspection.copies.size() > 1
               ? fmt::format(", replica {} ({})\n", inspection.copies[1].node_id,
                             inspection.copies[1].address)
               : std::string(", no replica\n");
  }
  for (const client::StoredCopy& copy : inspection.copies) {
    if (!copy.status.ok()) {
      out += fmt::format("{} ({}): cannot ask: {}\n", copy_name(copy), copy.address,
                         copy.status.to_string());
      continue;
    }
    const std::string role = copy.partition_state.empty()
                                 ? copy.role
                                 : fmt::format("{} ({})", copy.role, copy.partition_state);
    out += fmt::format("{}, {}, shard {}: {}\n", copy_name(copy), role, copy.shard,
                       copy.stored ? stored_text(copy) : std::string("nothing stored"));
  }
  return out;
}

int inspect_exit_status(const client::KeyInspection& inspection) {
  if (inspection.copies.empty() || !inspection.copies.front().status.ok()) return kExitError;
  return inspection.copies.front().stored ? kExitOk : kExitDenied;
}

}  // namespace sluice::ctl
