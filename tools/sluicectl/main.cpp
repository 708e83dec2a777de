// sluicectl: ping, acquire, peek, reset, stats, cluster, cluster reload and drain from a shell,
// over the client library. Exit status: 0 success (acquire/peek: allowed), 1 denied
// (acquire/peek), a cluster file refused by some node (cluster reload) or a drain refused, 2 any
// error (bad flags included), with the
// reason on stderr. docs/CLIENT.md shows the output formats.
#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>
#include <algorithm>
#include <boost/program_options.hpp>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/json_writer.h"
#include "client/client.h"
#include "cluster/etcd_members.h"
#include "core/rule.h"
#include "core/version.h"
#include "etcd/etcd_client.h"

namespace {

namespace po = boost::program_options;
using sluice::client::Client;
using sluice::client::ClientOptions;
using sluice::client::ClusterInfo;
using sluice::client::Decision;
using sluice::client::ReloadOutcome;
using sluice::client::ServerInfo;
using sluice::client::Stat;

constexpr int kExitOk = 0;
constexpr int kExitDenied = 1;
constexpr int kExitError = 2;
// A call or connect timeout longer than this is a typo, not a wish.
constexpr std::uint64_t kMaxTimeoutMs = 3'600'000;

struct CtlOptions {
  std::string command;
  std::string key;
  std::vector<std::string> servers;
  sluice::Rule rule;
  std::uint32_t cost = 1;
  bool json = false;
  bool shard_aware = true;
  bool seed_only = false;  // cluster reload: the node of the first server that answers only
  std::uint64_t timeout_ms = 1000;
  std::string auth_token;  // from --auth-token-file; empty = none
  std::string etcd;        // cluster: also etcd's view of cluster `cluster_name`
  std::string cluster_name;
  // acquire, peek: what answers when the key's owner cannot (report: the error, exit 2).
  sluice::client::FailurePolicy failure_policy = sluice::client::FailurePolicy::kReport;
  std::uint32_t gateways = 1;
};

// Thrown only inside flag parsing and turned into exit status 2 by main.
struct UsageError {
  std::string message;
};

std::uint32_t parse_u32(const std::string& flag, const std::string& text, std::uint32_t min) {
  try {
    return static_cast<std::uint32_t>(
        sluice::cli::count_flag(flag, text, min, std::numeric_limits<std::uint32_t>::max()));
  } catch (const sluice::cli::FlagError& e) {
    throw UsageError{e.what()};
  }
}

std::uint64_t parse_ms(const std::string& flag, const std::string& text, std::uint64_t max_ms) {
  try {
    return sluice::cli::duration_flag(flag, text, 1, max_ms);
  } catch (const sluice::cli::FlagError& e) {
    throw UsageError{e.what()};
  }
}

std::vector<std::string> split_servers(const std::string& text) {
  try {
    return sluice::cli::servers_flag("servers", text);
  } catch (const sluice::cli::FlagError& e) {
    throw UsageError{e.what()};
  }
}

std::string usage(const po::options_description& flags) {
  std::string text =
      "usage: sluicectl [flags] ping|acquire|peek|reset|stats|cluster|drain [KEY|reload|NODE]\n"
      "  acquire KEY, peek KEY   need --limit and --period\n"
      "  reset KEY               forgets the key's counters\n"
      "  cluster                 the cluster map: nodes, states, epoch, each node's share of\n"
      "                          the ring, replication lag per peer\n"
      "  cluster reload          every node of the map rereads its cluster file\n"
      "                          (--seed-only: the first server that answers)\n"
      "  drain NODE              etcd mode: node NODE hands its ranges to the others and\n"
      "                          leaves the ring (stop it afterwards)\n"
      "exit status: 0 ok/allowed, 1 denied (or a cluster file refused), 2 error\n\n";
  std::ostringstream out;
  out << flags;
  return text + out.str();
}

// Returns nullopt after printing help.
std::optional<CtlOptions> parse_flags(int argc, char** argv) {
  po::options_description flags("flags");
  flags.add_options()("help,h", "show this help")("version", "print the version and exit")(
      "servers", po::value<std::string>()->default_value("127.0.0.1:7420"),
      "HOST:PORT[,HOST:PORT...]: public ports of nodes; the first that answers is the seed (in a "
      "cluster, its map names the others)")(
      "algorithm", po::value<std::string>()->default_value("token_bucket"),
      "fixed_window|sliding_window|sliding_log|token_bucket|gcra")(
      "limit", po::value<std::string>(), "units admitted per period")(
      "period", po::value<std::string>(), "period with a unit: 500ms, 60s, 5m, 1h (up to 366d)")(
      "burst", po::value<std::string>(),
      "bucket capacity (token_bucket, gcra); default: the limit")(
      "cost", po::value<std::string>()->default_value("1"), "units this request takes")(
      "failure-policy", po::value<std::string>()->default_value("report"),
      "acquire, peek: when the key's owner cannot answer, open (a local limiter at limit / "
      "gateways decides), closed (denied) or report (the error)")(
      "gateways", po::value<std::string>()->default_value("1"),
      "with --failure-policy open: how many gateways share the limit (1..65535)")(
      "json", po::bool_switch(), "print one JSON object")(
      "timeout", po::value<std::string>()->default_value("1s"),
      "per call and per connect, with a unit (up to 1h)")(
      "no-shard-aware", po::bool_switch(), "send everything through the public port")(
      "seed-only", po::bool_switch(), "cluster reload: only the first server that answers")(
      "auth-token-file", po::value<std::string>(),
      "FILE holding the node's token (the file sluiced --auth-token-file reads)")(
      "etcd", po::value<std::string>()->default_value(""),
      "cluster: also print etcd's view of the cluster (http://HOST:PORT[,...]; needs "
      "--cluster-name): each member's record and its lease's TTL left, even with nodes down")(
      "cluster-name", po::value<std::string>()->default_value(""), "with --etcd: the cluster");
  po::options_description hidden;
  hidden.add_options()("command", po::value<std::string>())("key", po::value<std::string>());
  po::options_description all;
  all.add(flags).add(hidden);
  po::positional_options_description positional;
  positional.add("command", 1).add("key", 1);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError{e.what()};
  }
  if (vm.count("help")) {
    std::fputs(usage(flags).c_str(), stdout);
    return std::nullopt;
  }
  if (vm.count("version")) {
    fmt::print("sluicectl {}\n", sluice::kVersion);
    return std::nullopt;
  }

  CtlOptions o;
  if (!vm.count("command")) {
    throw UsageError{"missing command: ping|acquire|peek|reset|stats|cluster|drain"};
  }
  o.command = vm["command"].as<std::string>();
  const bool keyed =
      o.command == "acquire" || o.command == "peek" || o.command == "reset" || o.command == "drain";
  const bool ruled = o.command == "acquire" || o.command == "peek";
  if (!keyed && o.command != "ping" && o.command != "stats" && o.command != "cluster") {
    throw UsageError{fmt::format("unknown command \"{}\"", o.command)};
  }
  o.seed_only = vm["seed-only"].as<bool>();
  if (o.command == "cluster") {
    // "cluster reload" is a command of its own; "cluster" alone prints the map.
    if (vm.count("key")) {
      if (vm["key"].as<std::string>() != "reload") {
        throw UsageError{
            fmt::format("unknown cluster command \"{}\" (expected: cluster or cluster reload)",
                        vm["key"].as<std::string>())};
      }
      o.command = "cluster reload";
    }
  }
  if (o.seed_only && o.command != "cluster reload") {
    throw UsageError{"--seed-only is for cluster reload"};
  }
  if (keyed) {
    const char* what = o.command == "drain" ? "NODE" : "KEY";
    if (!vm.count("key")) throw UsageError{fmt::format("{} needs a {}", o.command, what)};
    o.key = vm["key"].as<std::string>();
    if (o.key.empty()) throw UsageError{fmt::format("{} is empty", what)};
  } else if (vm.count("key") && o.command != "cluster reload") {
    throw UsageError{fmt::format("{} takes no KEY", o.command)};
  }

  o.etcd = vm["etcd"].as<std::string>();
  o.cluster_name = vm["cluster-name"].as<std::string>();
  if (!o.etcd.empty() && (o.command != "cluster" || o.cluster_name.empty())) {
    throw UsageError{"--etcd is for cluster, with --cluster-name"};
  }
  if (o.etcd.empty() && !o.cluster_name.empty()) throw UsageError{"--cluster-name needs --etcd"};
  o.servers = split_servers(vm["servers"].as<std::string>());
  o.json = vm["json"].as<bool>();
  o.shard_aware = !vm["no-shard-aware"].as<bool>();
  o.timeout_ms = parse_ms("timeout", vm["timeout"].as<std::string>(), kMaxTimeoutMs);
  if (vm.count("auth-token-file")) {
    try {
      o.auth_token =
          sluice::cli::token_file_flag("sluicectl", vm["auth-token-file"].as<std::string>());
    } catch (const sluice::cli::FlagError& e) {
      throw UsageError{e.what()};
    }
  }

  const auto policy = sluice::client::parse_failure_policy(vm["failure-policy"].as<std::string>());
  if (!policy) {
    throw UsageError{fmt::format("--failure-policy {}: expected open, closed or report",
                                 vm["failure-policy"].as<std::string>())};
  }
  o.failure_policy = *policy;
  o.gateways = parse_u32("gateways", vm["gateways"].as<std::string>(), 1);
  if (o.gateways > 65535) throw UsageError{"--gateways must be 1..65535"};

  if (ruled) {
    const auto algorithm = sluice::parse_algorithm(vm["algorithm"].as<std::string>());
    if (!algorithm) {
      throw UsageError{
          fmt::format("unknown --algorithm \"{}\"", vm["algorithm"].as<std::string>())};
    }
    o.rule.algorithm = *algorithm;
    if (!vm.count("limit")) throw UsageError{fmt::format("{} needs --limit", o.command)};
    if (!vm.count("period")) throw UsageError{fmt::format("{} needs --period", o.command)};
    o.rule.limit = parse_u32("limit", vm["limit"].as<std::string>(), 0);
    o.rule.period_ms = parse_ms("period", vm["period"].as<std::string>(), sluice::kMaxPeriodMs);
    // Burst 0 on the wire means "the limit", so an omitted --burst admits exactly --limit.
    if (vm.count("burst")) o.rule.burst = parse_u32("burst", vm["burst"].as<std::string>(), 1);
    o.cost = parse_u32("cost", vm["cost"].as<std::string>(), 1);
  }
  return o;
}

std::string json_string(std::string_view text) {
  std::string out;
  sluice::cli::JsonWriter::append_quoted(out, text);
  return out;
}

std::string ms_text(std::uint64_t ms) {
  return ms == sluice::kNever ? std::string("never") : fmt::format("{} ms", ms);
}

void print_decision(const CtlOptions& o, const Decision& d) {
  const auto headers = d.headers();
  if (o.json) {
    std::string out = fmt::format(
        "{{\"key\":{},\"allowed\":{},\"limit\":{},\"remaining\":{},\"reset_after_ms\":{},"
        "\"retry_after_ms\":{},\"source\":{},\"headers\":{{",
        json_string(o.key), d.allowed, d.limit, d.remaining, d.reset_after_ms,
        d.retry_never() ? std::string("null") : std::to_string(d.retry_after_ms),
        json_string(sluice::client::source_name(d.source)));
    for (std::size_t i = 0; i < headers.size(); ++i) {
      if (i > 0) out += ',';
      out += json_string(headers[i].name) + ":" + json_string(headers[i].value);
    }
    out += "}}\n";
    std::fputs(out.c_str(), stdout);
    return;
  }
  fmt::print("{}  {}\n", d.allowed ? "ALLOWED" : "DENIED", o.key);
  fmt::print("  limit        {}\n", d.limit);
  fmt::print("  remaining    {}\n", d.remaining);
  fmt::print("  reset after  {}\n", ms_text(d.reset_after_ms));
  fmt::print("  retry after  {}\n", ms_text(d.retry_after_ms));
  fmt::print("  source       {}\n", sluice::client::source_name(d.source));
  fmt::print("headers\n");
  for (const auto& h : headers) fmt::print("  {}: {}\n", h.name, h.value);
}

// "shard.<i>.<name>" and "total.<name>" become a table row per name with a column per shard
// and one for the total; any other counter is listed after it.
void print_stats(const CtlOptions& o, const std::vector<Stat>& stats) {
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

  if (o.json) {
    std::string out = "{\"total\":{";
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
    std::fputs(out.c_str(), stdout);
    return;
  }

  std::size_t width = 7;
  for (const auto& name : names) width = std::max(width, name.size());
  std::string line = fmt::format("{:<{}}", "counter", width);
  for (std::size_t i = 0; i < shard_count; ++i)
    line += fmt::format(" {:>14}", fmt::format("shard {}", i));
  line += fmt::format(" {:>14}\n", "total");
  std::fputs(line.c_str(), stdout);
  for (const auto& name : names) {
    line = fmt::format("{:<{}}", name, width);
    const auto& row = per_shard[name];
    for (std::size_t i = 0; i < shard_count; ++i) {
      line += row.count(i) ? fmt::format(" {:>14}", row.at(i)) : fmt::format(" {:>14}", "-");
    }
    line +=
        totals.count(name) ? fmt::format(" {:>14}\n", totals[name]) : fmt::format(" {:>14}\n", "-");
    std::fputs(line.c_str(), stdout);
  }
  for (const Stat* s : other) fmt::print("{} {}\n", s->name, s->value);
}

std::string percent(std::uint32_t part, std::uint32_t whole) {
  return whole == 0 ? std::string("-")
                    : fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / whole);
}

double share(std::uint32_t part, std::uint32_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / whole;
}

void print_cluster(const CtlOptions& o, const ClusterInfo& info, const std::string& endpoint) {
  if (o.json) {
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
          "\"replication\":[",
          i == 0 ? "" : ",", json_string(n.id), json_string(n.address), json_string(n.state),
          n.primary_partitions, n.replica_partitions, share(n.primary_partitions, info.partitions),
          share(n.replica_partitions, info.partitions));
      for (std::size_t p = 0; p < n.replication.size(); ++p) {
        const auto& lag = n.replication[p];
        out +=
            fmt::format("{}{{\"peer\":{},\"records\":{},\"lag_ms\":{},\"up\":{}}}",
                        p == 0 ? "" : ",", json_string(lag.peer), lag.records, lag.lag_ms, lag.up);
      }
      out += fmt::format("],\"stats_error\":{}}}", n.stats_status.ok()
                                                       ? std::string("null")
                                                       : json_string(n.stats_status.to_string()));
    }
    out += "]}\n";
    std::fputs(out.c_str(), stdout);
    return;
  }
  if (info.nodes.empty()) {
    fmt::print("{} is not in a cluster (epoch {}): a single node\n", endpoint, info.epoch);
    return;
  }
  fmt::print("cluster epoch {}: {} nodes, {} partitions, {} points per node (asked {})\n",
             info.epoch, info.nodes.size(), info.partitions, info.vnodes_per_node, endpoint);
  std::size_t id_width = 4;
  std::size_t address_width = 7;
  for (const auto& n : info.nodes) {
    id_width = std::max(id_width, n.id.size());
    address_width = std::max(address_width, n.address.size());
  }
  fmt::print("{:<{}}  {:<{}}  {:<8}  {:>8}  {:>8}\n", "node", id_width, "address", address_width,
             "state", "primary", "replica");
  for (const auto& n : info.nodes) {
    fmt::print("{:<{}}  {:<{}}  {:<8}  {:>8}  {:>8}\n", n.id, id_width, n.address, address_width,
               n.state, percent(n.primary_partitions, info.partitions),
               percent(n.replica_partitions, info.partitions));
  }
  fmt::print("replication (from each node's STATS: records not yet acknowledged, oldest age)\n");
  for (const auto& n : info.nodes) {
    if (!n.stats_status.ok()) {
      fmt::print("  {:<{}}  unknown: {}\n", n.id, id_width, n.stats_status.to_string());
      continue;
    }
    if (n.replication.empty()) fmt::print("  {:<{}}  streams to no peer\n", n.id, id_width);
    for (const auto& lag : n.replication) {
      fmt::print("  {:<{}} -> {:<{}}  {} records  {} ms  {}\n", n.id, id_width, lag.peer, id_width,
                 lag.records, lag.lag_ms, lag.up ? "up" : "not connected");
    }
  }
}

// Exit status: 2 when a node could not be asked, else 1 when one refused the file, else 0.
int print_reload(const CtlOptions& o, const std::vector<ReloadOutcome>& outcomes) {
  int refused = 0;
  int failed = 0;
  for (const auto& r : outcomes) {
    failed += !r.status.ok();
    refused += r.status.ok() && !r.refusal.empty();
  }
  if (o.json) {
    std::string out = "{\"nodes\":[";
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
      const auto& r = outcomes[i];
      out += fmt::format(
          "{}{{\"id\":{},\"address\":{},\"epoch\":{},\"refused\":{},\"error\":{}}}",
          i == 0 ? "" : ",", json_string(r.node_id), json_string(r.address),
          r.status.ok() ? std::to_string(r.epoch) : std::string("null"),
          r.status.ok() && !r.refusal.empty() ? json_string(r.refusal) : std::string("null"),
          r.status.ok() ? std::string("null") : json_string(r.status.to_string()));
    }
    out += fmt::format("],\"refused\":{},\"failed\":{}}}\n", refused, failed);
    std::fputs(out.c_str(), stdout);
  } else {
    for (const auto& r : outcomes) {
      const std::string node = r.node_id.empty() ? r.address : r.node_id + " " + r.address;
      if (!r.status.ok()) {
        fmt::print("{}: error: {}\n", node, r.status.to_string());
      } else if (!r.refusal.empty()) {
        fmt::print("{}: refused (epoch {} stays): {}\n", node, r.epoch, r.refusal);
      } else {
        fmt::print("{}: reloaded, epoch {}\n", node, r.epoch);
      }
    }
  }
  if (failed > 0) return kExitError;
  return refused > 0 ? kExitDenied : kExitOk;
}

int fail(const std::string& message) {
  fmt::print(stderr, "sluicectl: {}\n", message);
  return kExitError;
}

int run_nodes(const CtlOptions& o);

// etcd's view of the cluster (docs/OPERATIONS.md, "Watching"): every member record under the
// cluster's prefix at one revision, with its lease's TTL left. True when etcd answered.
bool print_etcd_view(const CtlOptions& o) {
  auto endpoints = sluice::etcd::parse_endpoints(o.etcd);
  if (!endpoints) {
    fail("--etcd: " + endpoints.error());
    return false;
  }
  struct Member {
    std::string key;
    std::string id, state, address, shards, problem;  // shards: "P0,P1,..." or ""
    std::int64_t lease = 0, ttl_s = -1, granted_s = 0;
  };
  std::vector<Member> members;
  std::int64_t revision = 0;
  std::string error;
  boost::asio::io_context io;
  sluice::etcd::Client client(
      io, sluice::etcd::Client::Config{*endpoints, std::chrono::milliseconds(o.timeout_ms)});
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        const auto read =
            co_await client.range(sluice::cluster::members_prefix(o.cluster_name), true);
        if (!read) {
          error = read.error();
          co_return;
        }
        revision = read->revision;
        for (const sluice::etcd::KeyValue& kv : read->kvs) {
          Member m;
          m.key = kv.key;
          m.lease = kv.lease;
          const auto record =
              sluice::cluster::decode_member_record(o.cluster_name, kv.key, kv.value);
          if (record) {
            m.id = record->node.id;
            m.state = std::string(sluice::cluster::node_state_name(record->node.state));
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
          members.push_back(std::move(m));
        }
      },
      boost::asio::detached);
  io.run();
  if (!error.empty()) {
    fail("etcd at " + o.etcd + ": " + error);
    return false;
  }
  if (o.json) {
    std::string out = fmt::format("{{\"etcd\":{},\"cluster_name\":{},\"revision\":{},\"members\":[",
                                  json_string(o.etcd), json_string(o.cluster_name), revision);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const Member& m = members[i];
      out += fmt::format(
          "{}{{\"key\":{},\"id\":{},\"state\":{},\"address\":{},\"shard_ports\":[{}],"
          "\"lease\":\"{:x}\",\"ttl_s\":{},\"granted_s\":{},\"problem\":{}}}",
          i == 0 ? "" : ",", json_string(m.key), json_string(m.id), json_string(m.state),
          json_string(m.address), m.shards, m.lease, m.ttl_s, m.granted_s,
          m.problem.empty() ? std::string("null") : json_string(m.problem));
    }
    out += "]}\n";
    std::fputs(out.c_str(), stdout);
    return true;
  }
  fmt::print("etcd {}: cluster {}, revision {}, {} member record{}\n", o.etcd, o.cluster_name,
             revision, members.size(), members.size() == 1 ? "" : "s");
  if (members.empty()) return true;
  fmt::print("{:<20} {:<9} {:<22} {:<16} {:<17} {}\n", "node", "state", "address", "shards",
             "lease", "TTL left");
  for (const Member& m : members) {
    if (!m.problem.empty()) {
      fmt::print("{}: not a member record: {}\n", m.key, m.problem);
      continue;
    }
    const std::string ttl =
        m.lease == 0 ? "no lease"
                     : (m.ttl_s < 0 ? "expired" : fmt::format("{} s of {}", m.ttl_s, m.granted_s));
    fmt::print("{:<20} {:<9} {:<22} {:<16} {:<17x} {}\n", m.id, m.state, m.address,
               m.shards.empty() ? "-" : m.shards, m.lease, ttl);
  }
  return true;
}

int run(const CtlOptions& o) {
  // etcd's view first: it is there even when no node answers.
  const bool etcd_ok = o.etcd.empty() || print_etcd_view(o);
  if (!o.etcd.empty() && !o.json) std::fputs("\n", stdout);
  const int status = run_nodes(o);
  return etcd_ok ? status : kExitError;
}

int run_nodes(const CtlOptions& o) {
  ClientOptions options;
  options.servers = o.servers;
  options.timeout = std::chrono::milliseconds(o.timeout_ms);
  options.connect_timeout = std::chrono::milliseconds(o.timeout_ms);
  options.client_name = "sluicectl";
  options.auth_token = o.auth_token;
  options.failure_policy = o.failure_policy;
  options.gateways = o.gateways;
  options.blocked_keys = 0;  // one call per process: nothing to remember
  options.lease_duration = std::chrono::milliseconds(0);  // nor anything to lease
  options.metrics = false;
  if (o.failure_policy == sluice::client::FailurePolicy::kReport) options.breaker_failures = 0;
  // Node-level commands only need the public port.
  options.shard_aware = o.shard_aware && o.command != "ping" && o.command != "stats" &&
                        !o.command.starts_with("cluster") && o.command != "drain";
  auto connected = Client::connect(options);
  if (!connected.ok()) return fail(connected.status().to_string());
  Client& client = **connected;

  if (o.command == "ping") {
    auto rtt = client.ping();
    if (!rtt.ok()) return fail(rtt.status().to_string());
    const double ms = static_cast<double>(rtt->count()) / 1e6;
    const ServerInfo& info = client.server_info();
    if (o.json) {
      fmt::print("{{\"server\":{},\"node_id\":{},\"shards\":{},\"rtt_ms\":{:.3f}}}\n",
                 json_string(info.endpoint), json_string(info.node_id), info.shard_ports.size(),
                 ms);
    } else {
      fmt::print("pong from {} (node {}, {} shards): {:.3f} ms\n", info.endpoint, info.node_id,
                 info.shard_ports.size(), ms);
    }
    return kExitOk;
  }
  if (o.command == "stats") {
    auto stats = client.stats();
    if (!stats.ok()) return fail(stats.status().to_string());
    print_stats(o, *stats);
    return kExitOk;
  }
  if (o.command == "cluster") {
    auto info = client.cluster();
    if (!info.ok()) return fail(info.status().to_string());
    print_cluster(o, *info, client.server_info().endpoint);
    return kExitOk;
  }
  if (o.command == "cluster reload") {
    std::vector<ReloadOutcome> outcomes;
    if (o.seed_only) {
      auto one = client.reload();
      if (!one.ok()) return fail(one.status().to_string());
      outcomes.push_back(std::move(*one));
    } else {
      auto all = client.reload_all();
      if (!all.ok()) return fail(all.status().to_string());
      outcomes = std::move(*all);
    }
    return print_reload(o, outcomes);
  }
  if (o.command == "drain") {
    auto outcome = client.drain(o.key);
    if (!outcome.ok()) return fail(outcome.status().to_string());
    if (o.json) {
      fmt::print("{{\"id\":{},\"address\":{},\"epoch\":{},\"refused\":{}}}\n",
                 json_string(outcome->node_id), json_string(outcome->address), outcome->epoch,
                 outcome->refusal.empty() ? std::string("null") : json_string(outcome->refusal));
    } else if (outcome->refusal.empty()) {
      fmt::print("{} {}: draining (asked at epoch {}); its ranges move under the next epoch\n",
                 outcome->node_id, outcome->address, outcome->epoch);
    } else {
      fmt::print("{} {}: drain refused: {}\n", outcome->node_id, outcome->address,
                 outcome->refusal);
    }
    return outcome->refusal.empty() ? kExitOk : kExitDenied;
  }
  if (o.command == "reset") {
    auto existed = client.reset(o.key);
    if (!existed.ok()) return fail(existed.status().to_string());
    if (o.json) {
      fmt::print("{{\"key\":{},\"existed\":{}}}\n", json_string(o.key), *existed);
    } else {
      fmt::print("{}: {}\n", o.key,
                 *existed ? "reset (the key existed)" : "not found (nothing to reset)");
    }
    return kExitOk;
  }
  auto decision = o.command == "peek" ? client.peek(o.key, o.rule, o.cost)
                                      : client.acquire(o.key, o.rule, o.cost);
  if (!decision.ok()) return fail(decision.status().to_string());
  print_decision(o, *decision);
  return decision->allowed ? kExitOk : kExitDenied;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto options = parse_flags(argc, argv);
    if (!options) return kExitOk;
    return run(*options);
  } catch (const UsageError& e) {
    return fail(e.message + " (see --help)");
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
