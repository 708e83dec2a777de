#include "tools/sluicectl/options.h"

#include <fmt/core.h>

#include <boost/program_options.hpp>
#include <limits>
#include <sstream>

#include "cli/flags.h"
#include "core/version.h"

namespace sluice::ctl {

namespace {

namespace po = boost::program_options;

// A call or connect timeout longer than this is a typo, not a wish.
constexpr std::uint64_t kMaxTimeoutMs = 3'600'000;

// Thrown inside the parse only; parse_flags() returns it as a value.
struct UsageError {
  std::string message;
};

std::uint32_t parse_u32(const std::string& flag, const std::string& text, std::uint32_t min) {
  try {
    return static_cast<std::uint32_t>(
        cli::count_flag(flag, text, min, std::numeric_limits<std::uint32_t>::max()));
  } catch (const cli::FlagError& e) {
    throw UsageError{e.what()};
  }
}

std::uint64_t parse_ms(const std::string& flag, const std::string& text, std::uint64_t max_ms) {
  try {
    return cli::duration_flag(flag, text, 1, max_ms);
  } catch (const cli::FlagError& e) {
    throw UsageError{e.what()};
  }
}

std::vector<std::string> split_servers(const std::string& text) {
  try {
    return cli::servers_flag("servers", text);
  } catch (const cli::FlagError& e) {
    throw UsageError{e.what()};
  }
}

std::string usage(const po::options_description& flags) {
  std::string text =
      "usage: sluicectl [flags] ping|acquire|peek|reset|inspect|stats|cluster|drain\n"
      "                 [KEY|reload|NODE]\n"
      "       sluicectl rules check PATH...\n"
      "  acquire KEY, peek KEY   need --limit and --period\n"
      "  reset KEY               forgets the key's counters\n"
      "  inspect KEY             the key's partition, primary and replica, and what each\n"
      "                          stores for it (algorithm, state, expiry); needs no rule\n"
      "  cluster                 the cluster map: nodes, states, epoch, each node's share of\n"
      "                          the ring, replication lag per peer\n"
      "  cluster reload          every node of the map rereads its cluster file\n"
      "                          (--seed-only: the first server that answers)\n"
      "  drain NODE              etcd mode: node NODE hands its ranges to the others and\n"
      "                          leaves the ring (stop it afterwards)\n"
      "  rules check PATH...     checks rules files (a directory: its *.yaml and *.yml),\n"
      "                          printing every error; needs no server\n"
      "exit status: 0 ok/allowed, 1 denied (or a cluster file refused, a rules file bad,\n"
      "or nothing stored for an inspected key at its primary), 2 error\n\n";
  std::ostringstream out;
  out << flags;
  return text + out.str();
}

ParsedFlags parse(int argc, char** argv) {
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
  hidden.add_options()("command", po::value<std::string>())("key", po::value<std::string>())(
      "rest", po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(flags).add(hidden);
  po::positional_options_description positional;
  positional.add("command", 1).add("key", 1).add("rest", -1);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError{e.what()};
  }
  if (vm.count("help")) return {ParsedFlags::Action::kHelp, {}, usage(flags)};
  if (vm.count("version")) {
    return {ParsedFlags::Action::kVersion, {}, fmt::format("sluicectl {}\n", kVersion)};
  }

  ParsedFlags parsed;
  CtlOptions& o = parsed.options;
  if (!vm.count("command")) {
    throw UsageError{"missing command: ping|acquire|peek|reset|inspect|stats|cluster|drain|rules"};
  }
  o.command = vm["command"].as<std::string>();
  if (o.command == "rules") {
    // "rules check PATH...": files only, no server; the other flags do not apply.
    if (!vm.count("key")) throw UsageError{"rules needs a command: rules check PATH..."};
    if (vm["key"].as<std::string>() != "check") {
      throw UsageError{fmt::format("unknown rules command \"{}\" (expected: rules check PATH...)",
                                   vm["key"].as<std::string>())};
    }
    if (!vm.count("rest")) throw UsageError{"rules check needs a PATH (a file or a directory)"};
    o.command = "rules check";
    o.paths = vm["rest"].as<std::vector<std::string>>();
    return parsed;
  }
  // Only `rules check` takes more than two words.
  if (vm.count("rest")) {
    throw UsageError{"too many positional options have been specified on the command line"};
  }
  const bool keyed = o.command == "acquire" || o.command == "peek" || o.command == "reset" ||
                     o.command == "inspect" || o.command == "drain";
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
      o.auth_token = cli::token_file_flag("sluicectl", vm["auth-token-file"].as<std::string>());
    } catch (const cli::FlagError& e) {
      throw UsageError{e.what()};
    }
  }

  const auto policy = client::parse_failure_policy(vm["failure-policy"].as<std::string>());
  if (!policy) {
    throw UsageError{fmt::format("--failure-policy {}: expected open, closed or report",
                                 vm["failure-policy"].as<std::string>())};
  }
  o.failure_policy = *policy;
  o.gateways = parse_u32("gateways", vm["gateways"].as<std::string>(), 1);
  if (o.gateways > 65535) throw UsageError{"--gateways must be 1..65535"};

  if (ruled) {
    const auto algorithm = parse_algorithm(vm["algorithm"].as<std::string>());
    if (!algorithm) {
      throw UsageError{
          fmt::format("unknown --algorithm \"{}\"", vm["algorithm"].as<std::string>())};
    }
    o.rule.algorithm = *algorithm;
    if (!vm.count("limit")) throw UsageError{fmt::format("{} needs --limit", o.command)};
    if (!vm.count("period")) throw UsageError{fmt::format("{} needs --period", o.command)};
    o.rule.limit = parse_u32("limit", vm["limit"].as<std::string>(), 0);
    o.rule.period_ms = parse_ms("period", vm["period"].as<std::string>(), kMaxPeriodMs);
    // Burst 0 on the wire means "the limit", so an omitted --burst admits exactly --limit.
    if (vm.count("burst")) o.rule.burst = parse_u32("burst", vm["burst"].as<std::string>(), 1);
    o.cost = parse_u32("cost", vm["cost"].as<std::string>(), 1);
  }
  return parsed;
}

}  // namespace

ParsedFlags parse_flags(int argc, char** argv) {
  try {
    return parse(argc, argv);
  } catch (const UsageError& e) {
    return {ParsedFlags::Action::kUsageError, {}, e.message};
  }
}

}  // namespace sluice::ctl
