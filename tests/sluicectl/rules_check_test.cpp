// sluicectl rules check: every error of every file, "ok" lines for good ones, directories read
// for their *.yaml and *.yml files in name order, exit status 1 for any bad file and 2 for a
// usage error; no server anywhere. The last test runs the binary itself.
#include "tools/sluicectl/rules_check.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/sluicectl/command_line.h"
#include "tests/support/child_process.h"

namespace sluice::ctl {
namespace {

namespace fs = std::filesystem;
using testing::Ran;
using testing::run;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "sluicectl-rules-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
    return (path_ / name).string();
  }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

const std::string kGood =
    "version: 1\npolicies:\n  p: {algorithm: gcra, limit: 5, period: 1s}\n"
    "  q: {algorithm: fixed_window, limit: 5, period: 1m}\n"
    "matches:\n  - {name: m, key: ip, policies: [p, q]}\n";
const std::string kBad =
    "version: 1\npolicies:\n  p: {algorithm: gcra, limit: 0, period: 1x}\n"
    "matches:\n  - {name: m, key: ip, policies: [r]}\n";

TEST_CASE("rules check prints every error of every file and ok for the good ones",
          "[rules_check]") {
  TempDir dir;
  const std::string good = dir.file("good.yaml", kGood);
  const std::string bad = dir.file("bad.yaml", kBad);
  const Ran ran = run("rules check " + good + " " + bad + " " + dir.path() + "/missing.yaml");
  CHECK(ran.status == kExitDenied);
  CHECK(ran.out == good + ": ok (2 policies, 1 matches)\n" + bad +
                       ":3:31: policies.p.limit: must be at least 1 (a limit of 0 would deny "
                       "every request)\n" +
                       bad +
                       ":3:42: policies.p.period: \"1x\" is not a duration (a whole number and a "
                       "unit: ms, s, m, h, d)\n" +
                       bad + ":5:35: matches[0].policies: unknown policy \"r\"\n" + dir.path() +
                       "/missing.yaml: cannot read the file: No such file or directory\n");
  CHECK(ran.err.empty());

  const Ran ok = run("rules check " + good + " --servers 10.0.0.1:1");
  CHECK(ok.status == kExitOk);
  CHECK(ok.out == good + ": ok (2 policies, 1 matches)\n");
}

TEST_CASE("rules check reads a directory's yaml and yml files in name order and no deeper",
          "[rules_check]") {
  TempDir dir;
  dir.file("b.yml", kGood);
  dir.file("a.yaml", kGood);
  dir.file("c.yaml.bak", kBad);
  dir.file("README", kBad);
  fs::create_directory(fs::path(dir.path()) / "sub.yaml");
  std::ofstream(fs::path(dir.path()) / "sub.yaml" / "deep.yaml") << kBad;
  const Ran ran = run("rules check " + dir.path());
  CHECK(ran.status == kExitOk);
  CHECK(ran.out == dir.path() + "/a.yaml: ok (2 policies, 1 matches)\n" + dir.path() +
                       "/b.yml: ok (2 policies, 1 matches)\n");

  TempDir empty;
  empty.file("notes.txt", "");
  const Ran none = run("rules check " + empty.path());
  CHECK(none.status == kExitDenied);
  CHECK(none.out == empty.path() + ": no *.yaml or *.yml file in this directory\n");
}

TEST_CASE("rules check passes the example rules file", "[rules_check]") {
  const std::string example = std::string(SLUICE_SOURCE_DIR) + "/examples/rules.yaml";
  const Ran ran = run("rules check " + example);
  CHECK(ran.status == kExitOk);
  CHECK(ran.out == example + ": ok (6 policies, 4 matches)\n");
}

TEST_CASE("rules check reads the envoyproxy ratelimit example configs", "[rules_check]") {
  const std::string dir = std::string(SLUICE_SOURCE_DIR) + "/examples/envoy";
  const Ran ran = run("rules check " + dir);
  CHECK(ran.status == kExitOk);
  CHECK(ran.out == dir + "/api.yaml: ok (envoyproxy/ratelimit config: 1 domain, 7 limits)\n" + dir +
                       "/sluice_extensions.yaml: ok (envoyproxy/ratelimit config: 1 domain, 3 "
                       "limits)\n");
  // A mistake in the peer's format is reported with the peer's message.
  TempDir temp;
  const std::string bad = temp.file(
      "envoy.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight}\n");
  const Ran refused = run("rules check " + bad);
  CHECK(refused.status == kExitDenied);
  CHECK(refused.out == bad + ":4:24: invalid rate limit unit 'fortnight'\n");
}

TEST_CASE("rules without check or without a path is a usage error", "[rules_check]") {
  using testing::parse;
  const auto refused = [](const std::string& line) { return parse(line).text; };
  CHECK(parse("rules").action == ParsedFlags::Action::kUsageError);
  CHECK(refused("rules") == "rules needs a command: rules check PATH...");
  CHECK(refused("rules verify x.yaml") ==
        "unknown rules command \"verify\" (expected: rules check PATH...)");
  CHECK(refused("rules check") == "rules check needs a PATH (a file or a directory)");
  const ParsedFlags parsed = parse("rules check a.yaml dir");
  REQUIRE(parsed.action == ParsedFlags::Action::kRun);
  CHECK(parsed.options.command == "rules check");
  CHECK(parsed.options.paths == std::vector<std::string>{"a.yaml", "dir"});
}

TEST_CASE("the sluicectl binary exits 0 for good rules 1 for bad ones and 2 on usage errors",
          "[rules_check]") {
  REQUIRE(fs::exists(SLUICECTL_PATH));
  TempDir dir;
  const std::string good = dir.file("good.yaml", kGood);
  const std::string bad = dir.file("bad.yaml", kBad);
  const std::string sluicectl = std::string("'") + SLUICECTL_PATH + "' ";
  const test::Run ok = test::run_command(sluicectl + "rules check " + good);
  CHECK(ok.status == 0);
  CHECK(ok.output == good + ": ok (2 policies, 1 matches)\n");
  const test::Run refused = test::run_command(sluicectl + "rules check " + good + " " + bad);
  CHECK(refused.status == 1);
  CHECK_THAT(refused.output, Catch::Contains(bad + ":5:35: matches[0].policies: unknown policy"));
  const test::Run usage = test::run_command(sluicectl + "rules check");
  CHECK(usage.status == 2);
  CHECK(usage.output ==
        "sluicectl: rules check needs a PATH (a file or a directory) (see --help)\n");
}

}  // namespace
}  // namespace sluice::ctl
