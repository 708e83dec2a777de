#include "tools/sluicectl/commands.h"

#include <fmt/core.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "tools/sluicectl/etcd_view.h"
#include "tools/sluicectl/format.h"
#include "tools/sluicectl/rules_check.h"

namespace sluice::ctl {

using client::Client;
using client::ClientOptions;
using client::ReloadOutcome;

namespace {

void write(std::FILE* out, const std::string& text) { std::fputs(text.c_str(), out); }

// `etcd`: what etcd holds, when --etcd was read.
int run_nodes(const CtlOptions& o, const EtcdSide* etcd, std::FILE* out, std::FILE* err) {
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
  if (o.failure_policy == client::FailurePolicy::kReport) options.breaker_failures = 0;
  // With no node answering, only a decision has a failure policy to answer it: every other
  // command, and a decision with `report`, fails (exit status 2) naming every seed.
  const bool decides = o.command == "acquire" || o.command == "peek";
  options.require_cluster_at_connect =
      !decides || o.failure_policy == client::FailurePolicy::kReport;
  // Node-level commands only need the public port.
  options.shard_aware = o.shard_aware && o.command != "ping" && o.command != "stats" &&
                        !o.command.starts_with("cluster") && o.command != "drain" &&
                        o.command != "inspect";
  auto connected = Client::connect(options);
  if (!connected.ok()) return fail(err, connected.status().to_string());
  Client& client = **connected;

  if (o.command == "ping") {
    auto rtt = client.ping();
    if (!rtt.ok()) return fail(err, rtt.status().to_string());
    write(out, format_ping(client.server_info(), *rtt, o.json));
    return kExitOk;
  }
  if (o.command == "stats") {
    auto stats = client.stats();
    if (!stats.ok()) return fail(err, stats.status().to_string());
    write(out, format_stats(client.server_info(), *stats, o.json));
    return kExitOk;
  }
  if (o.command == "cluster") {
    auto info = client.cluster();
    if (!info.ok()) return fail(err, info.status().to_string());
    write(out, format_cluster(*info, client.server_info().endpoint, o.json, etcd));
    return kExitOk;
  }
  if (o.command == "cluster reload") {
    std::vector<ReloadOutcome> outcomes;
    if (o.seed_only) {
      auto one = client.reload();
      if (!one.ok()) return fail(err, one.status().to_string());
      outcomes.push_back(std::move(*one));
    } else {
      auto all = client.reload_all();
      if (!all.ok()) return fail(err, all.status().to_string());
      outcomes = std::move(*all);
    }
    write(out, format_reload(outcomes, o.json));
    return reload_exit_status(outcomes);
  }
  if (o.command == "drain") {
    auto outcome = client.drain(o.key);
    if (!outcome.ok()) return fail(err, outcome.status().to_string());
    write(out, format_drain(*outcome, o.json));
    return outcome->refusal.empty() ? kExitOk : kExitDenied;
  }
  if (o.command == "inspect") {
    auto inspection = client.inspect(o.key);
    if (!inspection.ok()) return fail(err, inspection.status().to_string());
    write(out, format_inspect(o.key, *inspection, o.json));
    return inspect_exit_status(*inspection);
  }
  if (o.command == "reset") {
    auto existed = client.reset(o.key);
    if (!existed.ok()) return fail(err, existed.status().to_string());
    write(out, format_reset(o.key, *existed, o.json));
    return kExitOk;
  }
  auto decision = o.command == "peek" ? client.peek(o.key, o.rule, o.cost)
                                      : client.acquire(o.key, o.rule, o.cost);
  if (!decision.ok()) return fail(err, decision.status().to_string());
  write(out, format_decision(o.key, *decision, decision->headers(), o.json));
  return decision->allowed ? kExitOk : kExitDenied;
}

}  // namespace

int fail(std::FILE* err, std::string_view message) {
  fmt::print(err, "sluicectl: {}\n", message);
  return kExitError;
}

int run_command(const CtlOptions& o, std::FILE* out, std::FILE* err) {
  if (o.command == "rules check") return check_rules_files(o.paths, out);
  bool etcd_ok = true;
  EtcdSide etcd;
  if (!o.etcd.empty()) {
    const auto view =
        fetch_etcd_view(o.etcd, o.cluster_name, std::chrono::milliseconds(o.timeout_ms));
    if (view) {
      write(out, format_etcd_view(o.etcd, o.cluster_name, *view, o.json));
      for (const EtcdMember& member : view->members) {
        if (member.problem.empty()) etcd.ids.push_back(member.id);
      }
      // fetch_etcd_view() has parsed the list: each comma-separated item is a URL.
      for (std::string_view rest = o.etcd; !rest.empty();) {
        const std::size_t comma = rest.find(',');
        etcd.urls.emplace_back(rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    } else {
      etcd_ok = false;
      fail(err, view.error());
    }
    if (!o.json) write(out, "\n");
  }
  const int status = run_nodes(o, etcd_ok && !o.etcd.empty() ? &etcd : nullptr, out, err);
  return etcd_ok ? status : kExitError;
}

}  // namespace sluice::ctl
