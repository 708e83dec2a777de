// Every mistake in a rules file is a diagnostic "FILE:LINE:COLUMN: FIELD: message", and every
// one of a file is reported: the exact messages of docs/RULES.md, "Errors", one by one.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "rules/rule_set.h"

namespace sluice::rules {
namespace {

std::vector<std::string> errors(std::string_view text) {
  const ParseResult parsed = RuleSet::parse(text, "r.yaml");
  REQUIRE_FALSE(parsed);
  std::vector<std::string> out;
  for (const Diagnostic& d : parsed.error()) out.push_back(d.to_string());
  return out;
}

using Lines = std::vector<std::string>;

// Line 1 is "version: 1", line 2 "policies:", so a policy's fields start on line 4.
std::string with_policy(std::string_view body) {
  return "version: 1\npolicies:\n  p:\n" + std::string(body) +
         "matches:\n  - name: m\n    key: ip\n    policies: [p]\n";
}

constexpr std::string_view kManyMistakes = R"(version: 1
attributes:
  api_key: "X API"
  colour: red
policies:
  ok:
    algorithm: gcra
    limit: 10
    period: 1s
  typo:
    algorithm: fixed_window
    limt: 5
    period: 1m
  algo:
    algorithm: leaky_bucket
    limit: 5
    period: 1m
  zero:
    algorithm: fixed_window
    limit: 0
    period: 1m
  bad_period:
    algorithm: token_bucket
    limit: 5
    period: 10
  long_period:
    algorithm: token_bucket
    limit: 5
    period: 400d
  ok:
    algorithm: gcra
    limit: 1
    period: 1s
  burst:
    algorithm: fixed_window
    limit: 5
    period: 1s
    burst: 10
  burst0:
    algorithm: gcra
    limit: 5
    period: 1s
    burst: 0
  cost:
    algorithm: gcra
    limit: 5
    period: 1s
    burst: 3
    cost: 4
  cost0:
    algorithm: gcra
    limit: 5
    period: 1s
    cost: 0
  log:
    algorithm: sliding_log
    limit: 20000
    period: 1s
  types:
    algorithm: [gcra]
    limit: five
    period: {a: 1}
    on_failure: maybe
    shadow: yes
  big:
    algorithm: gcra
    limit: 5000000000
    period: 1s
  "bad name":
    algorithm: gcra
    limit: 1
    period: 1s
  empty:
matches:
  - name: m
    key: api_key
  - name: m
    key: [ip, everyone]
    policies: []
  - name: n
    key: apikey
    policies: [ok, nosuch, ok]
    tiers:
      gold: [ok]
      gold: [ok]
    overrides: [a]
  - name: w
    when:
      method: "GE T"
      path: login
      pathprefix: /x
      headers:
        "X Y": a
    key: "header:"
    policies: algo
  - nme: typo
    key: ip
    policies: [ok]
  - just a string
)";

TEST_CASE("every mistake of a file is reported with its place and field in file order",
          "[validation]") {
  CHECK(errors(kManyMistakes) ==
        Lines{
            "r.yaml:3:12: attributes.api_key: \"X API\" is not a header name",
            "r.yaml:4:3: attributes.colour: unknown field (expected api_key, user or tier)",
            "r.yaml:10:3: policies.typo: missing field \"limit\"",
            "r.yaml:12:5: policies.typo.limt: unknown field (expected algorithm, limit, period, "
            "burst, cost, on_failure, shadow or description)",
            "r.yaml:15:16: policies.algo.algorithm: unknown algorithm \"leaky_bucket\" (expected "
            "fixed_window, sliding_window, sliding_log, token_bucket or gcra)",
            "r.yaml:20:12: policies.zero.limit: must be at least 1 (a limit of 0 would deny every "
            "request)",
            "r.yaml:25:13: policies.bad_period.period: \"10\" is not a duration (a whole number "
            "and a unit: ms, s, m, h, d)",
            "r.yaml:29:13: policies.long_period.period: 400d is out of range (1ms .. 366d)",
            "r.yaml:30:3: policies.ok: duplicate policy name (first defined at line 6)",
            "r.yaml:38:5: policies.burst.burst: only token_bucket and gcra take a burst",
            "r.yaml:43:12: policies.burst0.burst: must be at least 1 (leave burst out to mean the "
            "limit)",
            "r.yaml:49:11: policies.cost.cost: 4 is above the policy's capacity of 3 (no request "
            "could ever be admitted)",
            "r.yaml:54:11: policies.cost0.cost: must be at least 1",
            "r.yaml:57:12: policies.log.limit: 20000 is above the sliding_log cap of 10000",
            "r.yaml:60:16: policies.types.algorithm: expected a value, got a list",
            "r.yaml:61:12: policies.types.limit: expected a whole number, got \"five\"",
            "r.yaml:62:13: policies.types.period: expected a duration, got a mapping",
            "r.yaml:63:17: policies.types.on_failure: expected open or closed, got \"maybe\"",
            "r.yaml:64:13: policies.types.shadow: expected true or false, got \"yes\"",
            "r.yaml:67:12: policies.big.limit: 5000000000 is above 4294967295",
            "r.yaml:69:3: policies.bad name: a policy name is 1 to 64 bytes of A-Z a-z 0-9 _ . -",
            "r.yaml:73:3: policies.empty: expected a mapping, got nothing",
            "r.yaml:75:5: matches[0]: missing field \"policies\" (a match names at least one)",
            "r.yaml:77:11: matches[1].name: duplicate match name \"m\" (first at line 75)",
            "r.yaml:78:15: matches[1].key: everyone cannot be combined with other key parts",
            "r.yaml:79:15: matches[1].policies: names no policy (at least one is needed)",
            "r.yaml:81:10: matches[2].key: unknown key part \"apikey\" (expected api_key, user, "
            "tier, ip, method, path, everyone or header:NAME)",
            "r.yaml:82:20: matches[2].policies: unknown policy \"nosuch\"",
            "r.yaml:82:28: matches[2].policies: \"ok\" is listed twice",
            "r.yaml:85:7: matches[2].tiers.gold: duplicate tier (first at line 84)",
            "r.yaml:86:16: matches[2].overrides: expected a mapping of override values to policy "
            "lists, got a list",
            "r.yaml:89:15: matches[3].when.method: \"GE T\" is not a method",
            "r.yaml:90:13: matches[3].when.path: \"login\" must start with /",
            "r.yaml:91:7: matches[3].when.pathprefix: unknown field (expected method, path, "
            "path_prefix or headers)",
            "r.yaml:93:9: matches[3].when.headers.X Y: \"X Y\" is not a header name",
            "r.yaml:94:10: matches[3].key: \"header:\" names no header (header:NAME)",
            "r.yaml:96:5: matches[4].nme: unknown field (expected name, when, key, policies, tiers "
            "or overrides)",
            "r.yaml:96:5: matches[4]: missing field \"name\"",
            "r.yaml:99:5: matches[5]: expected a mapping, got \"just a string\"",
        });
}

TEST_CASE("a policy's mistakes one at a time", "[validation]") {
  struct Case {
    std::string body;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"    algorithm: gcra\n    limit: 5\n", "r.yaml:3:3: policies.p: missing field \"period\""},
      {"    algorithm: gcra\n    limit: 5\n    period: 0s\n",
       "r.yaml:6:13: policies.p.period: 0s is out of range (1ms .. 366d)"},
      {"    algorithm: gcra\n    limit: 5\n    period: 367d\n",
       "r.yaml:6:13: policies.p.period: 367d is out of range (1ms .. 366d)"},
      {"    algorithm: gcra\n    limit: -1\n    period: 1s\n",
       "r.yaml:5:12: policies.p.limit: expected a whole number, got \"-1\""},
      {"    algorithm: gcra\n    limit: 1.5\n    period: 1s\n",
       "r.yaml:5:12: policies.p.limit: expected a whole number, got \"1.5\""},
      {"    algorithm: gcra\n    limit:\n    period: 1s\n",
       "r.yaml:5:5: policies.p.limit: expected a whole number, got nothing"},
      {"    algorithm: gcra\n    limit: 5\n    limit: 6\n    period: 1s\n",
       "r.yaml:6:5: policies.p.limit: duplicate field (first at line 5)"},
      {"    algorithm: sliding_log\n    limit: 10001\n    period: 1s\n",
       "r.yaml:5:12: policies.p.limit: 10001 is above the sliding_log cap of 10000"},
      {"    algorithm: token_bucket\n    limit: 5\n    period: 1s\n    cost: 6\n",
       "r.yaml:7:11: policies.p.cost: 6 is above the policy's capacity of 5 (no request could "
       "ever be admitted)"},
      {"    algorithm: gcra\n    limit: 5\n    period: 1s\n    burst: 4294967296\n",
       "r.yaml:7:12: policies.p.burst: 4294967296 is above 4294967295"},
      {"    algorithm: GCRA\n    limit: 5\n    period: 1s\n",
       "r.yaml:4:16: policies.p.algorithm: unknown algorithm \"GCRA\" (expected fixed_window, "
       "sliding_window, sliding_log, token_bucket or gcra)"},
      {"    algorithm: gcra\n    limit: 5\n    period: 1s\n    description: [a]\n",
       "r.yaml:7:18: policies.p.description: expected text, got a list"},
  };
  for (const Case& c : cases) {
    INFO(c.body);
    CHECK(errors(with_policy(c.body)) == Lines{c.error});
  }
}

TEST_CASE("what each policy field takes at its edges is accepted", "[validation]") {
  const auto parsed = RuleSet::parse(with_policy("    algorithm: sliding_log\n    limit: 10000\n"
                                                 "    period: 366d\n    cost: 10000\n"
                                                 "    shadow: false\n    on_failure: open\n"
                                                 "    description: the most a log takes\n"),
                                     "r.yaml");
  REQUIRE(parsed);
  const Policy* p = parsed->policy("p");
  REQUIRE(p != nullptr);
  CHECK(p->rule == Rule{Algorithm::kSlidingLog, 10000, kMaxPeriodMs, 0});
  CHECK(p->cost == 10000);
  CHECK(p->on_failure == OnFailure::kOpen);

  const auto big = RuleSet::parse(
      with_policy("    algorithm: gcra\n    limit: 4294967295\n    period: 1ms\n    burst: 1\n"),
      "r.yaml");
  REQUIRE(big);
  CHECK(big->policy("p")->rule == Rule{Algorithm::kGcra, 4294967295u, 1, 1});
  // A larger sliding log cap, as a daemon started with a larger --sliding-log-cap takes.
  CHECK(RuleSet::parse(with_policy("    algorithm: sliding_log\n    limit: 20000\n"
                                   "    period: 1s\n"),
                       "r.yaml", RuleSetOptions{.sliding_log_cap = 20000}));
}

TEST_CASE("the file as a whole: syntax errors, emptiness, version and its three sections",
          "[validation]") {
  CHECK(errors("version: 1\npolicies: [a\n") ==
        Lines{"r.yaml:3:1: YAML syntax error: end of sequence flow not found"});
  CHECK(errors("a: 1\n b: 2\n") == Lines{"r.yaml:2:3: YAML syntax error: illegal map value"});
  CHECK(errors("") == Lines{"r.yaml: the file is empty (expected version, policies and matches)"});
  CHECK(errors("# nothing\n") ==
        Lines{"r.yaml: the file is empty (expected version, policies and matches)"});
  CHECK(errors("- 1\n") == Lines{"r.yaml:1:1: expected a mapping with version, policies and "
                                 "matches, got a list"});
  CHECK(errors("policies: {}\nmatches: []\nversion: 2\nextra: 1\n---\nb: 1\n") ==
        Lines{"r.yaml:1:11: policies: expected at least one policy",
              "r.yaml:2:10: matches: expected at least one match",
              "r.yaml:3:10: version: unsupported version 2 (this Sluice reads version 1)",
              "r.yaml:4:1: extra: unknown field (expected version, attributes, policies or "
              "matches)",
              "r.yaml:5:1: a rules file holds one YAML document, this is the second"});
  // yaml-cpp 0.7's LoadAll loops (allocating) on these; the parser must not.
  CHECK(errors(",") == Lines{"r.yaml:1:1: YAML syntax error: unexpected \",\""});
  CHECK(errors("version: 1\n...\n, a\n") ==
        Lines{"r.yaml:3:1: YAML syntax error: unexpected \",\""});
  CHECK(errors("version: 1\n") ==
        Lines{"r.yaml:1:1: missing field \"policies\"", "r.yaml:1:1: missing field \"matches\""});
  CHECK(errors("version: 1\npolicies: [a]\nmatches: {a: 1}\n") ==
        Lines{"r.yaml:2:11: policies: expected a mapping of policy names to policies, got a list",
              "r.yaml:3:10: matches: expected a list of matches, got a mapping"});
  CHECK(errors("version: 1\npolicies:\n  p: {algorithm: gcra, limit: 1, period: 1s}\n"
               "matches:\n  - {name: m, key: *nowhere, policies: [p]}\n")
            .size() == 1);
}

TEST_CASE("a reference to a policy that has mistakes of its own is not a second mistake",
          "[validation]") {
  CHECK(errors("version: 1\npolicies:\n  p: {algorithm: gcra, limit: 0, period: 1s}\n"
               "matches:\n  - {name: m, key: ip, policies: [p]}\n") ==
        Lines{"r.yaml:3:31: policies.p.limit: must be at least 1 (a limit of 0 would deny every "
              "request)"});
}

TEST_CASE("a file that cannot be read is one diagnostic without a place", "[validation]") {
  const auto missing = RuleSet::load("/nonexistent/rules.yaml");
  REQUIRE_FALSE(missing);
  REQUIRE(missing.error().size() == 1);
  CHECK(missing.error()[0].to_string() ==
        "/nonexistent/rules.yaml: cannot read the file: No such file or directory");
  // A directory is a set of rules files (envoy_config_test.cpp): one without any is refused.
  const auto empty_dir =
      std::filesystem::temp_directory_path() / ("sluice-empty-rules-" + std::to_string(::getpid()));
  std::filesystem::create_directories(empty_dir);
  const auto dir = RuleSet::load(empty_dir);
  std::filesystem::remove_all(empty_dir);
  REQUIRE_FALSE(dir);
  CHECK(dir.error()[0].message == "cannot read the file: no .yaml or .yml file in the directory");
}

TEST_CASE("every prefix of a file and every byte flipped is parsed or refused without throwing",
          "[validation]") {
  const std::string text(kManyMistakes);
  std::size_t refused = 0;
  for (std::size_t n = 0; n <= text.size(); n += 3) {
    refused += RuleSet::parse(text.substr(0, n), "r.yaml") ? 0 : 1;
  }
  for (std::size_t i = 0; i < text.size(); i += 7) {
    std::string flipped = text;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
    refused += RuleSet::parse(flipped, "r.yaml") ? 0 : 1;
  }
  CHECK(refused > 0);
}

}  // namespace
}  // namespace sluice::rules
