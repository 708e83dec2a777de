#include "tools/sluicectl/etcd_view.h"

#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>

#include <utility>

#include "cluster/cluster_map.h"
#include "cluster/etcd_members.h"
#include "etcd/etcd_client.h"
#include "tools/sluicectl/format.h"

namespace sluice::ctl {

Expected<EtcdView> fetch_etcd_view(const std::string& etcd, const std::string& cluster_name,
                                   std::chrono::milliseconds timeout) {
  auto endpoints = etcd::parse_endpoints(etcd);
  if (!endpoints) return Unexpected{"--etcd: " + endpoints.error()};
  EtcdView view;
  std::string error;
  boost::asio::io_context io;
  etcd::Client::Config config;
  config.endpoints = *endpoints;
  config.timeout = timeout;
  etcd::Client client(io, std::move(config));
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        const auto read = co_await client.range(cluster::members_prefix(cluster_name), true);
        if (!read) {
          error = read.error();
          co_return;
        }
        view.revision = read->revision;
        for (const etcd::KeyValue& kv : read->kvs) {
          EtcdMember m;
          m.key = kv.key;
          m.lease = kv.lease;
          const auto record = cluster::decode_member_record(cluster_name, kv.key, kv.value);
          if (record) {
            m.id = record->node.id;
            m.state = std::string(cluster::node_state_name(record->node.state));
            m.address = record->node.address;
            for (std::size_t i = 0; i < record->shard_ports.size(); ++i) {
              m.shards += fmt::format("{}{}", i == 0 ? "" : ",", record->shard_ports[i]);
            }
          } else {
            m.problem = record.error();
          }
          if (kv.lease != 0) {
            const auto left = co_await client.time_to_live(kv.lease);
            if (left) {
              m.ttl_s = left->ttl_s;
              m.granted_s = left->granted_s;
            }
          }
          view.members.push_back(std::move(m));
        }
      },
      boost::asio::detached);
  io.run();
  if (!error.empty()) return Unexpected{"etcd at " + etcd + ": " + error};
  return view;
}

std::string format_etcd_view(std::string_view etcd, std::string_view cluster_name,
                             const EtcdView& view, bool json) {
  const std::vector<EtcdMember>& members = view.members;
  if (json) {
    std::string out = fmt::format("{{\"etcd\":{},\"cluster_name\":{},\"revision\":{},\"members\":[",
                                  json_string(etcd), json_string(cluster_name), view.revision);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const EtcdMember& m = members[i];
      out += fmt::format(
          "{}{{\"key\":{},\"id\":{},\"state\":{},\"address\":{},\"shard_ports\":[{}],"
          "\"lease\":\"{:x}\",\"ttl_s\":{},\"granted_s\":{},\"problem\":{}}}",
          i == 0 ? "" : ",", json_string(m.key), json_string(m.id), json_string(m.state),
          json_string(m.address), m.shards, m.lease, m.ttl_s, m.granted_s,
          m.problem.empty() ? std::string("null") : json_string(m.problem));
    }
    out += "]}\n";
    return out;
  }
  std::string out =
      fmt::format("etcd {}: cluster {}, revision {}, {} member record{}\n", etcd, cluster_name,
                  view.revision, members.size(), members.size() == 1 ? "" : "s");
  if (members.empty()) return out;
  out += fmt::format("{:<20} {:<9} {:<22} {:<16} {:<17} {}\n", "node", "state", "address", "shards",
                     "lease", "TTL left");
  for (const EtcdMember& m : members) {
    if (!m.problem.empty()) {
      out += fmt::format("{}: not a member record: {}\n", m.key, m.problem);
      continue;
    }
    const std::string ttl =
        m.lease == 0 ? "no lease"
                     : (m.ttl_s < 0 ? "expired" : fmt::format("{} s of {}", m.ttl_s, m.granted_s));
    out += fmt::format("{:<20} {:<9} {:<22} {:<16} {:<17x} {}\n", m.id, m.state, m.address,
                       m.shards.empty() ? "-" : m.shards, m.lease, ttl);
  }
  return out;
}

}  // namespace sluice::ctl
