// sluice-load: parses flags, runs one load (tools/load/load_driver.h) and prints the summary.
// Exit status: 0 when the run completed without errors, 1 when it ran with errors or could not
// start, 2 on bad flags. docs/LOAD.md describes every flag.
#include <fmt/core.h>

#include <boost/program_options.hpp>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "client/client.h"
#include "core/rule.h"
#include "core/version.h"
#include "tools/load/load_driver.h"

namespace {

namespace po = boost::program_options;
using namespace sluice::load;

using sluice::cli::count_flag;
using sluice::cli::duration_flag;
using sluice::cli::FlagError;

// Bounds of the flags, stated once for the checks and the help.
constexpr std::uint64_t kMaxRunMs = 366ull * 24 * 3600 * 1000;
constexpr std::uint64_t kMaxDrainMs = 3'600'000;

std::optional<LoadOptions> parse_flags(int argc, char** argv, bool& json) {
  po::options_description flags("sluice-load options");
  // Numbers are read as strings and parsed here: program_options accepts "-1" for an unsigned.
  flags.add_options()("help,h", "print this help and exit")(
      "backend", po::value<std::string>()->default_value("sluice"), "sluice | redis | http | rls")(
      "redis-design", po::value<std::string>()->default_value("lua_token_bucket"),
      "lua_token_bucket | incr_window")(
      "op", po::value<std::string>()->default_value("acquire"),
      "acquire | ping (transport floor) | incr (redis: bare INCR)")(
      "servers", po::value<std::string>()->default_value("127.0.0.1:7420"),
      "HOST:PORT[,HOST:PORT...]: seeds; the first that answers is used, and a cluster member's "
      "map names the other nodes (redis, http, rls: the first is used)")(
      "connections", po::value<std::string>()->default_value("50"),
      "TCP connections in total, 1..1024, for every backend (rls: gRPC channels, one "
      "connection each)")("depth", po::value<std::string>()->default_value("1"),
                          "requests in flight per connection, 1..100000 (open loop: at most)")(
      "batch", po::value<std::string>()->default_value("1"),
      "decisions per request (Sluice: items per ACQUIRE frame; Redis: commands per write)")(
      "threads", po::value<std::string>()->default_value("1"),
      "event-loop threads, 1..256 (at most --connections)")(
      "rate", po::value<std::string>()->default_value("0"),
      "open loop at this many decisions/s, up to 1000000000 (0 = closed loop)")(
      "keys", po::value<std::string>()->default_value("1000000"), "distinct keys")(
      "dist", po::value<std::string>()->default_value("uniform"), "uniform | zipf:S | hot:P | seq")(
      "seed", po::value<std::string>()->default_value("1"), "random seed")(
      "key-prefix", po::value<std::string>()->default_value("k:"), "key text prefix")(
      "only-node", po::value<std::string>(),
      "cluster: only keys whose primary is node ID (at most 16,777,216 keys)")(
      "algorithm", po::value<std::string>()->default_value("token_bucket"),
      "fixed_window | sliding_window | sliding_log | token_bucket | gcra")(
      "limit", po::value<std::string>()->default_value("100"), "units per period")(
      "period", po::value<std::string>()->default_value("1s"),
      "rule period with a unit (e.g. 1s, 500ms; up to 366d)")(
      "burst", po::value<std::string>()->default_value("0"), "bucket capacity (0 = limit)")(
      "cost", po::value<std::string>()->default_value("1"), "units per decision")(
      "duration", po::value<std::string>()->default_value("10s"),
      "time bound with a unit (e.g. 10s, 1m; 0 = none)")(
      "requests", po::value<std::string>()->default_value("0"), "decision bound (0 = none)")(
      "audit", "check admitted requests against the rule")(
      "audit-keys", po::value<std::string>()->default_value("100000"),
      "audit keys [0, N) (memory bound)")(
      "drain", po::value<std::string>()->default_value("2s"),
      "wait this long for replies after the bound, with a unit (1ms..1h)")(
      "busy-poll", "worker threads poll their sockets instead of sleeping in epoll_wait")(
      "control-every", po::value<std::string>()->default_value("0"),
      "sluice acquire: every Nth request is a PING of the same keys, timed and reported apart "
      "(the transport's control, 2..1000; 0 = none)")(
      "failure-policy", po::value<std::string>()->default_value("report"),
      "sluice: when a key's owner cannot answer, open (a local limiter at limit / gateways "
      "decides), closed (denied) or report (counted as an error)")(
      "gateways", po::value<std::string>()->default_value("1"),
      "sluice: how many gateways share each limit (the local fallback admits limit / N)")(
      "blocked-keys", po::value<std::string>()->default_value("0"),
      "sluice: entries of the client's blocked-key cache (0 = none)")(
      "lease-duration", po::value<std::string>()->default_value("0"),
      "sluice: lease hot keys for this long, with a unit (up to 60s; 0 = no leases): their "
      "decisions are then paid from leased units, as a gateway's client does")(
      "path", po::value<std::string>(), "http: the target of every GET (default /)")(
      "key-header", po::value<std::string>(),
      "http: the header that carries each request's key (default X-API-Key)")(
      "deny-status", po::value<std::string>(),
      "http: a status counted as denied besides 429, 400..599 (e.g. 403)")(
      "rls-domain", po::value<std::string>(),
      "rls: the ShouldRateLimit calls' domain (default bench)")(
      "descriptors", po::value<std::string>()->default_value("1"),
      "rls: descriptors per ShouldRateLimit call, d0=KEY .. d<N-1>=KEY; redis incr_window: "
      "counters per decision (INCR + PEXPIRE each), allowed when all are; 1..8")(
      "auth-token-file", po::value<std::string>(),
      "FILE holding the node's token (the file sluiced --auth-token-file reads); sluice only")(
      "json", "print the summary as one JSON object")("quiet,q", "no progress on stderr")(
      "version", "print the version and exit");
  const po::variables_map vm = sluice::cli::parse_command_line(argc, argv, flags);
  if (vm.count("help") != 0) {
    std::cout
        << "sluice-load: drives Sluice, Redis, an HTTP endpoint or Envoy's Rate Limit Service "
           "with rate-limit traffic and reports\n"
        << flags << "\n";
    return std::nullopt;
  }
  if (vm.count("version") != 0) {
    fmt::print("sluice-load {}\n", sluice::kVersion);
    return std::nullopt;
  }
  const auto text = [&](const char* name) { return vm[name].as<std::string>(); };

  LoadOptions o;
  const auto backend = parse_backend(text("backend"));
  if (!backend)
    throw FlagError{"--backend " + text("backend") + ": expected sluice, redis, http or rls"};
  o.backend = *backend;
  const auto design = parse_redis_design(text("redis-design"));
  if (!design) {
    throw FlagError{"--redis-design " + text("redis-design") +
                    ": expected lua_token_bucket or incr_window"};
  }
  o.redis_design = *design;
  const auto op = parse_operation(text("op"));
  if (!op) throw FlagError{"--op " + text("op") + ": expected acquire, ping or incr"};
  o.op = *op;
  o.servers = sluice::cli::servers_flag("servers", text("servers"));
  o.connections =
      static_cast<unsigned>(count_flag("connections", text("connections"), 1, kMaxConnections));
  o.depth = static_cast<unsigned>(count_flag("depth", text("depth"), 1, 100000));
  o.batch = static_cast<unsigned>(count_flag("batch", text("batch"), 1, 65535));
  o.threads = static_cast<unsigned>(count_flag("threads", text("threads"), 1, 256));
  o.rate = static_cast<double>(count_flag("rate", text("rate"), 0, 1'000'000'000));
  o.keys = count_flag("keys", text("keys"), 1, 1'000'000'000'000);
  std::string error;
  const auto dist = parse_distribution(text("dist"), &error);
  if (!dist) throw FlagError{error};  // names the flag and the expected form
  o.dist = *dist;
  o.seed = count_flag("seed", text("seed"), 0, UINT64_MAX);
  o.key_prefix = text("key-prefix");
  if (vm.count("only-node") != 0) {
    o.only_node = text("only-node");
    if (o.only_node.empty()) throw FlagError{"--only-node: expected a node id"};
  }
  const auto algorithm = sluice::parse_algorithm(text("algorithm"));
  if (!algorithm) {
    throw FlagError{"--algorithm " + text("algorithm") +
                    ": expected fixed_window, sliding_window, sliding_log, token_bucket or gcra"};
  }
  o.rule.algorithm = *algorithm;
  o.rule.limit = static_cast<std::uint32_t>(count_flag("limit", text("limit"), 0, UINT32_MAX));
  o.rule.period_ms = duration_flag("period", text("period"), 1, sluice::kMaxPeriodMs);
  o.rule.burst = static_cast<std::uint32_t>(count_flag("burst", text("burst"), 0, UINT32_MAX));
  o.cost = static_cast<std::uint32_t>(count_flag("cost", text("cost"), 1, UINT32_MAX));
  o.duration = std::chrono::milliseconds(duration_flag("duration", text("duration"), 0, kMaxRunMs));
  o.requests = count_flag("requests", text("requests"), 0, UINT64_MAX);
  o.audit = vm.count("audit") != 0;
  o.audit_keys = count_flag("audit-keys", text("audit-keys"), 1, 100'000'000);
  o.drain_timeout =
      std::chrono::milliseconds(duration_flag("drain", text("drain"), 1, kMaxDrainMs));
  o.busy_poll = vm.count("busy-poll") != 0;
  o.control_every =
      static_cast<unsigned>(count_flag("control-every", text("control-every"), 0, 1000));
  const auto policy = sluice::client::parse_failure_policy(text("failure-policy"));
  if (!policy) {
    throw FlagError{"--failure-policy " + text("failure-policy") +
                    ": expected open, closed or report"};
  }
  o.failure_policy = *policy;
  o.gateways = static_cast<std::uint32_t>(count_flag("gateways", text("gateways"), 1, 65'535));
  o.blocked_keys = count_flag("blocked-keys", text("blocked-keys"), 0, 100'000'000);
  o.lease_duration =
      std::chrono::milliseconds(duration_flag("lease-duration", text("lease-duration"), 0, 60'000));
  if (vm.count("path") != 0) o.http_path = text("path");
  if (vm.count("key-header") != 0) o.key_header = text("key-header");
  if (vm.count("deny-status") != 0) {
    o.deny_status = static_cast<int>(count_flag("deny-status", text("deny-status"), 400, 599));
  }
  if ((vm.count("path") != 0 || vm.count("key-header") != 0 || vm.count("deny-status") != 0) &&
      o.backend != BackendKind::kHttp) {
    throw FlagError{"--path, --key-header and --deny-status are for --backend http"};
  }
  if (vm.count("rls-domain") != 0) {
    if (o.backend != BackendKind::kRls) throw FlagError{"--rls-domain is for --backend rls"};
    o.rls_domain = text("rls-domain");
  }
  o.descriptors = static_cast<unsigned>(
      count_flag("descriptors", text("descriptors"), 1, sluice::load::kMaxDescriptors));
  if (vm.count("auth-token-file") != 0) {
    // Refused before the file is read: a Redis run would never use it.
    if (o.backend != BackendKind::kSluice) throw FlagError{std::string(kAuthTokenNeedsSluice)};
    o.auth_token = sluice::cli::token_file_flag("sluice-load", text("auth-token-file"));
  }
  json = vm.count("json") != 0;
  if (vm.count("quiet") == 0) {
    o.progress = [](double elapsed_s, std::uint64_t sent, std::uint64_t allowed,
                    std::uint64_t denied, std::uint64_t errors) {
      std::fprintf(
          stderr, "[%4.0fs] sent %llu  allowed %llu  denied %llu  errors %llu\n", elapsed_s,
          static_cast<unsigned long long>(sent), static_cast<unsigned long long>(allowed),
          static_cast<unsigned long long>(denied), static_cast<unsigned long long>(errors));
    };
  }
  if (std::string why = validate(o); !why.empty()) throw FlagError{why};
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  LoadOptions options;
  bool json = false;
  try {
    auto parsed = parse_flags(argc, argv, json);
    if (!parsed) return 0;
    options = std::move(*parsed);
  } catch (const std::exception& e) {  // FlagError, or what program_options throws
    std::cerr << "sluice-load: " << e.what() << "\nTry 'sluice-load --help'.\n";
    return 2;
  }
  const auto result = run_load(options);
  if (!result.ok()) {
    std::cerr << "sluice-load: " << result.status().to_string() << "\n";
    return 1;
  }
  std::cout << (json ? report_json(options, *result) + "\n" : report_text(options, *result));
  return result->errors == 0 ? 0 : 1;
}
