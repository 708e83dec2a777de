// sluicectl's command line as a library: what each flag becomes in CtlOptions, and every refusal
// with the message a user sees (main adds "sluicectl: " before it and " (see --help)" after).
#include "tools/sluicectl/options.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/version.h"
#include "tests/sluicectl/command_line.h"

namespace sluice::ctl {
namespace {

using testing::parse;

struct Refusal {
  std::string args;
  std::string message;
};

void check_refusals(const std::vector<Refusal>& refusals) {
  for (const Refusal& r : refusals) {
    INFO("sluicectl " << r.args);
    const ParsedFlags parsed = parse(r.args);
    CHECK(parsed.action == ParsedFlags::Action::kUsageError);
    CHECK(parsed.text == r.message);
  }
}

TEST_CASE("an acquire command line becomes its options, flag by flag", "[options]") {
  const ParsedFlags parsed = parse(
      "--servers 10.0.0.1:7420,[::1]:7421 acquire user:42 --algorithm gcra --limit 2 --period "
      "60s --burst 5 --cost 3 --json --timeout 250ms --no-shard-aware --failure-policy open "
      "--gateways 4");
  REQUIRE(parsed.action == ParsedFlags::Action::kRun);
  const CtlOptions& o = parsed.options;
  CHECK(o.command == "acquire");
  CHECK(o.key == "user:42");
  CHECK(o.servers == std::vector<std::string>{"10.0.0.1:7420", "[::1]:7421"});
  CHECK(o.rule.algorithm == Algorithm::kGcra);
  CHECK(o.rule.limit == 2);
  CHECK(o.rule.period_ms == 60'000);
  CHECK(o.rule.burst == 5);
  CHECK(o.cost == 3);
  CHECK(o.json);
  CHECK(o.timeout_ms == 250);
  CHECK_FALSE(o.shard_aware);
  CHECK(o.failure_policy == client::FailurePolicy::kOpen);
  CHECK(o.gateways == 4);
}

TEST_CASE("without flags a command gets the documented defaults", "[options]") {
  const ParsedFlags parsed = parse("peek k --limit 1 --period 1s");
  REQUIRE(parsed.action == ParsedFlags::Action::kRun);
  const CtlOptions& o = parsed.options;
  CHECK(o.command == "peek");
  CHECK(o.servers == std::vector<std::string>{"127.0.0.1:7420"});
  CHECK(o.rule.algorithm == Algorithm::kTokenBucket);
  CHECK(o.rule.burst == 0);  // the limit, on the wire
  CHECK(o.cost == 1);
  CHECK_FALSE(o.json);
  CHECK(o.timeout_ms == 1000);
  CHECK(o.shard_aware);
  CHECK_FALSE(o.seed_only);
  CHECK(o.auth_token.empty());
  CHECK(o.failure_policy == client::FailurePolicy::kReport);
  CHECK(o.gateways == 1);
  CHECK(o.etcd.empty());
}

TEST_CASE("cluster, cluster reload, drain and inspect parse to their commands", "[options]") {
  CHECK(parse("cluster").options.command == "cluster");
  const ParsedFlags reload = parse("cluster reload --seed-only --json");
  REQUIRE(reload.action == ParsedFlags::Action::kRun);
  CHECK(reload.options.command == "cluster reload");
  CHECK(reload.options.seed_only);
  CHECK(reload.options.json);
  const ParsedFlags etcd = parse("cluster --etcd http://127.0.0.1:2379 --cluster-name prod");
  REQUIRE(etcd.action == ParsedFlags::Action::kRun);
  CHECK(etcd.options.etcd == "http://127.0.0.1:2379");
  CHECK(etcd.options.cluster_name == "prod");
  const ParsedFlags drain = parse("drain node-2");
  REQUIRE(drain.action == ParsedFlags::Action::kRun);
  CHECK(drain.options.command == "drain");
  CHECK(drain.options.key == "node-2");
  const ParsedFlags inspect = parse("inspect user:42 --json");
  REQUIRE(inspect.action == ParsedFlags::Action::kRun);
  CHECK(inspect.options.command == "inspect");
  CHECK(inspect.options.key == "user:42");
  CHECK(parse("inspect").text == "inspect needs a KEY");
}

TEST_CASE("help and version are answers to print, not commands to run", "[options]") {
  const ParsedFlags help = parse("--help");
  CHECK(help.action == ParsedFlags::Action::kHelp);
  CHECK_THAT(help.text,
             Catch::StartsWith("usage: sluicectl [flags] ping|acquire|peek|reset|inspect|stats|"
                               "cluster|drain\n                 [KEY|reload|NODE]\n"));
  CHECK_THAT(help.text, Catch::Contains("exit status: 0 ok/allowed, 1 denied"));
  CHECK_THAT(help.text, Catch::Contains("--auth-token-file"));
  const ParsedFlags version = parse("--version");
  CHECK(version.action == ParsedFlags::Action::kVersion);
  CHECK(version.text == "sluicectl " + std::string(kVersion) + "\n");
}

TEST_CASE("a missing, unknown or stray argument is refused with what is wrong", "[options]") {
  check_refusals({
      {"", "missing command: ping|acquire|peek|reset|inspect|stats|cluster|drain|rules"},
      {"explode", "unknown command \"explode\""},
      {"acquire --limit 2 --period 60s", "acquire needs a KEY"},
      {"drain", "drain needs a NODE"},
      {"acquire k --period 60s", "acquire needs --limit"},
      {"peek k --limit 2", "peek needs --period"},
      {"ping extra", "ping takes no KEY"},
      {"cluster nonsense",
       "unknown cluster command \"nonsense\" (expected: cluster or cluster reload)"},
      {"cluster reload extra",
       "too many positional options have been specified on the command line"},
      {"stats --seed-only", "--seed-only is for cluster reload"},
      {"--etcd http://127.0.0.1:2379 ping", "--etcd is for cluster, with --cluster-name"},
      {"--etcd http://127.0.0.1:2379 cluster", "--etcd is for cluster, with --cluster-name"},
      {"--cluster-name prod cluster", "--cluster-name needs --etcd"},
      {"acquire k --limit 1 --period 1s --algorithm x", "unknown --algorithm \"x\""},
  });
  const ParsedFlags empty = parse(std::vector<std::string>{"acquire", "", "--limit", "2"});
  CHECK(empty.action == ParsedFlags::Action::kUsageError);
  CHECK(empty.text == "KEY is empty");
}

TEST_CASE("a bad flag value names the flag, the value and the fix", "[options]") {
  check_refusals({
      {"acquire k --limit 2 --period 60", "--period 60: give a unit, e.g. 60s"},
      {"--timeout 500 ping", "--timeout 500: give a unit, e.g. 500s"},
      {"acquire k --limit 2 --period soon",
       "--period soon: expected a duration with a unit (ms, s, m, h, d), e.g. 500ms, 60s, 5m"},
      {"acquire k --limit 1 --period 367d", "--period 367d: must be 1ms..366d"},
      {"--timeout 2h ping", "--timeout 2h: must be 1ms..1h"},
      {"acquire k --limit 4294967296 --period 1s", "--limit 4294967296: must be 0..4294967295"},
      {"acquire k --limit x --period 1s", "--limit x: expected a whole number 0..4294967295"},
      {"acquire k --limit 1 --period 1s --cost 0", "--cost 0: must be 1..4294967295"},
      {"acquire k --limit 1 --period 1s --burst 0", "--burst 0: must be 1..4294967295"},
      {"--servers 127.0.0.1 ping",
       "--servers 127.0.0.1: expected HOST:PORT with a port 1..65535 (IPv6: [::1]:7420)"},
      {"--failure-policy sideways acquire k --limit 1 --period 1s",
       "--failure-policy sideways: expected open, closed or report"},
      {"--gateways 65536 acquire k --limit 1 --period 1s", "--gateways must be 1..65535"},
      {"--gateways 0 acquire k --limit 1 --period 1s", "--gateways 0: must be 1..4294967295"},
      {"--auth-token-file /nonexistent/token ping",
       "--auth-token-file /nonexistent/token: cannot open: No such file or directory"},
  });
  const ParsedFlags unknown = parse("--no-such-flag ping");
  CHECK(unknown.action == ParsedFlags::Action::kUsageError);
  CHECK_THAT(unknown.text, Catch::Contains("no-such-flag"));
}

}  // namespace
}  // namespace sluice::ctl
