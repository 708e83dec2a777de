// RuleSource: the rules in force change only to a good file, on reload() (SIGHUP), on
// check_now() and through its watcher: a rewrite in place, a rename over the file, a
// Kubernetes ConfigMap symlink swap; a bad or deleted file keeps the old rules and is logged
// and counted once. Tests that need the watcher wait on its attempt count with a deadline.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rules/debouncer.h"
#include "rules/rule_source.h"

namespace sluice::rules {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "sluice-rules-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A good file whose one policy "p" admits `limit` per second.
std::string rules_with_limit(int limit) {
  return "version: 1\npolicies:\n  p:\n    algorithm: gcra\n    limit: " + std::to_string(limit) +
         "\n    period: 1s\nmatches:\n  - name: m\n    key: ip\n    policies: [p]\n";
}
const std::string kBad = "version: 1\npolicies:\n  p:\n    algorithm: gcra\n    limt: 5\n";

void write_file(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

// Written beside, then renamed over: how most editors and deploy tools replace a file.
void replace_file(const fs::path& file, const std::string& text) {
  const fs::path temporary = file.string() + ".tmp";
  write_file(temporary, text);
  fs::rename(temporary, file);
}

std::uint32_t limit_in_force(const RuleSource& source) {
  return source.current()->policy("p")->rule.limit;
}

// Collects what the source logs.
struct LogLines {
  std::mutex mutex;
  std::vector<std::string> lines;

  RuleSource::Log callback() {
    return [this](std::string_view line) {
      std::lock_guard lock(mutex);
      lines.emplace_back(line);
    };
  }
  std::vector<std::string> taken() {
    std::lock_guard lock(mutex);
    return lines;
  }
};

std::unique_ptr<RuleSource> open_source(const fs::path& file, LogLines& log,
                                        RuleSourceOptions options) {
  auto opened = RuleSource::open(file, log.callback(), options);
  if (!opened) {
    for (const Diagnostic& d : opened.error()) UNSCOPED_INFO(d.to_string());
  }
  REQUIRE(opened);
  return std::move(opened).value();
}

RuleSourceOptions unwatched() {
  RuleSourceOptions options;
  options.watch = false;
  return options;
}

// The watcher with inotify alone: no periodic check to hide a missed event.
RuleSourceOptions inotify_only() {
  RuleSourceOptions options;
  options.poll_interval = 1h;
  options.debounce = 20ms;
  return options;
}

TEST_CASE("reload takes a good file and says unchanged when nothing changed", "[source]") {
  TempDir dir;
  const fs::path file = dir.path() / "rules.yaml";
  write_file(file, rules_with_limit(1));
  LogLines log;
  auto source = open_source(file, log, unwatched());
  CHECK(limit_in_force(*source) == 1);
  CHECK(source->current()->source() == file.string());

  const std::shared_ptr<const RuleSet> before = source->current();
  write_file(file, rules_with_limit(2));
  const ReloadOutcome outcome = source->reload();
  CHECK(outcome.status == ReloadStatus::kReloaded);
  CHECK(outcome.hash == hash_hex(rules_with_limit(2)));
  CHECK(limit_in_force(*source) == 2);
  // A request that took its snapshot before keeps deciding under it.
  CHECK(before->policy("p")->rule.limit == 1);
  CHECK(source->reloads_ok() == 1);
  CHECK(source->reloads_failed() == 0);
  REQUIRE(log.taken().size() == 1);
  CHECK_THAT(log.taken()[0],
             Catch::StartsWith("rules: reloaded " + file.string() + ": 1 policies, 1 matches"));

  CHECK(source->reload().status == ReloadStatus::kUnchanged);
  CHECK(source->reloads_ok() == 1);
  CHECK(source->attempts() == 1);
  CHECK(log.taken().size() == 1);
}

TEST_CASE("open refuses a bad file with all its diagnostics", "[source]") {
  TempDir dir;
  const fs::path file = dir.path() / "rules.yaml";
  write_file(file, kBad);
  LogLines log;
  const auto opened = RuleSource::open(file, log.callback(), unwatched());
  REQUIRE_FALSE(opened);
  REQUIRE(opened.error().size() == 4);
  CHECK(opened.error()[0].to_string() == file.string() + ":1:1: missing field \"matches\"");
  CHECK(opened.error()[1].to_string() ==
        file.string() + ":3:3: policies.p: missing field \"limit\"");
  CHECK_FALSE(RuleSource::open(dir.path() / "none.yaml", log.callback(), unwatched()));
}

TEST_CASE(
    "a bad file keeps the old rules and is logged and counted once then a good one is "
    "taken",
    "[source]") {
  TempDir dir;
  const fs::path file = dir.path() / "rules.yaml";
  write_file(file, rules_with_limit(1));
  LogLines log;
  auto source = open_source(file, log, unwatched());

  write_file(file, kBad);
  const ReloadOutcome refused = source->check_now();
  CHECK(refused.status == ReloadStatus::kRefused);
  CHECK(refused.hash == hash_hex(rules_with_limit(1)));
  REQUIRE(refused.diagnostics.size() == 4);
  CHECK(refused.diagnostics[3].to_string() ==
        file.string() +
            ":5:5: policies.p.limt: unknown field (expected algorithm, limit, period, "
            "burst, cost, on_failure, shadow or description)");
  CHECK(limit_in_force(*source) == 1);
  CHECK(source->reloads_failed() == 1);
  REQUIRE(log.taken().size() == 1);
  std::string expected_log = "rules: refused " + file.string() + " (hash " + hash_hex(kBad) +
                             "), 4 errors; keeping the rules in force (hash " +
                             hash_hex(rules_with_limit(1)) + "):";
  for (const Diagnostic& d : refused.diagnostics) expected_log += "\n  " + d.to_string();
  CHECK(log.taken()[0] == expected_log);

  // The same bytes again, even rewritten: nothing new to say.
  write_file(file, kBad);
  CHECK(source->check_now().status == ReloadStatus::kUnchanged);
  CHECK(source->check_now().status == ReloadStatus::kUnchanged);
  CHECK(source->reloads_failed() == 1);
  CHECK(log.taken().size() == 1);
  // An operator's explicit reload always answers, and counts.
  CHECK(source->reload().status == ReloadStatus::kRefused);
  CHECK(source->reloads_failed() == 2);
  CHECK(log.taken().size() == 2);

  replace_file(file, rules_with_limit(3));
  CHECK(source->check_now().status == ReloadStatus::kReloaded);
  CHECK(limit_in_force(*source) == 3);
  CHECK(source->reloads_ok() == 1);
  // A bad file after a good one is news again.
  write_file(file, kBad);
  CHECK(source->check_now().status == ReloadStatus::kRefused);
  CHECK(source->reloads_failed() == 3);
}

TEST_CASE("a deleted file keeps the old rules, counted once, until a file is back", "[source]") {
  TempDir dir;
  const fs::path file = dir.path() / "rules.yaml";
  write_file(file, rules_with_limit(1));
  LogLines log;
  auto source = open_source(file, log, unwatched());

  fs::remove(file);
  const ReloadOutcome gone = source->check_now();
  CHECK(gone.status == ReloadStatus::kRefused);
  REQUIRE(gone.diagnostics.size() == 1);
  CHECK(gone.diagnostics[0].to_string() ==
        file.string() + ": cannot read the file: No such file or directory");
  CHECK(source->check_now().status == ReloadStatus::kUnchanged);
  CHECK(limit_in_force(*source) == 1);
  CHECK(source->reloads_failed() == 1);
  REQUIRE(log.taken().size() == 1);
  CHECK(log.taken()[0] == "rules: cannot read " + file.string() +
                              " (No such file or directory); keeping the rules in force (hash " +
                              hash_hex(rules_with_limit(1)) + ")");

  write_file(file, rules_with_limit(4));
  CHECK(source->check_now().status == ReloadStatus::kReloaded);
  CHECK(limit_in_force(*source) == 4);
}

// A mounted ConfigMap: dir/rules.yaml -> ..data/rules.yaml, ..data -> ..<timestamp>.
class ConfigMapDir {
 public:
  explicit ConfigMapDir(const fs::path& dir) : dir_(dir) {
    const fs::path first = write_version("..2026_12_06_10_00_00.1", rules_with_limit(1));
    fs::create_directory_symlink(first.filename(), dir_ / "..data");
    fs::create_symlink("..data/rules.yaml", dir_ / "rules.yaml");
    current_ = first;
  }
  fs::path file() const { return dir_ / "rules.yaml"; }

  // What the kubelet does: a new timestamped directory, a new ..data_tmp link renamed over
  // ..data, the old directory removed. rules.yaml itself is never touched.
  void update(const std::string& name, const std::string& text) {
    const fs::path next = write_version(name, text);
    fs::create_directory_symlink(next.filename(), dir_ / "..data_tmp");
    fs::rename(dir_ / "..data_tmp", dir_ / "..data");
    fs::remove_all(current_);
    current_ = next;
  }

 private:
  fs::path write_version(const std::string& name, const std::string& text) {
    const fs::path version = dir_ / name;
    fs::create_directory(version);
    write_file(version / "rules.yaml", text);
    return version;
  }

  fs::path dir_;
  fs::path current_;
};

TEST_CASE("check_now follows a ConfigMap symlink swap", "[source]") {
  TempDir dir;
  ConfigMapDir config_map(dir.path());
  LogLines log;
  auto source = open_source(config_map.file(), log, unwatched());
  CHECK(limit_in_force(*source) == 1);
  config_map.update("..2026_12_06_10_05_00.2", rules_with_limit(2));
  CHECK(source->check_now().status == ReloadStatus::kReloaded);
  CHECK(limit_in_force(*source) == 2);
}

// Changes the file with `change`, then waits, with a deadline, until the watcher has put the
// rules with `limit` in force. An attempt may come between (a rewrite in place can be read
// half-written and refused); the wait is on each attempt, never on a fixed sleep.
template <typename Change>
bool change_and_wait_for_limit(RuleSource& source, std::uint32_t limit, Change change) {
  change();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    const std::uint64_t seen = source.attempts();
    if (limit_in_force(source) == limit) return true;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left <= 0ms) return false;
    source.wait_for_attempts(seen + 1, left);
  }
}

TEST_CASE("the watcher takes a file rewritten in place", "[source][watch]") {
  TempDir dir;
  const fs::path file = dir.path() / "rules.yaml";
  write_file(file, rules_with_limit(1));
  LogLines log;
  auto source = open_source(file, log, inotify_only());
  CHECK(change_and_wait_for_limit(*source, 2, [&] { write_file(file, rules_with_limit(2)); }));
  CHECK(source->reloads_ok() == 1);
}

TEST_CASE("the watcher takes a file replaced by a rename", "[source][watch]") {
  TempDir dir;
  const fs::path file = dir.path() / "rules.yaml";
  write_file(file, rules_with_limit(1));
  LogLines log;
  auto source = open_source(file, log, inotify_only());
  CHECK(change_and_wait_for_limit(*source, 2, [&] { replace_file(file, rules_with_limit(2)); }));
  // A second replacement (another new inode) is seen too.
  CHECK(change_and_wait_for_limit(*source, 3, [&] { replace_file(file, rules_with_limit(3)); }));
  CHECK(source->reloads_ok() == 2);
  CHECK(source->reloads_failed() == 0);
}

TEST_CASE("the watcher takes a ConfigMap symlink swap and the next one", "[source][watch]") {
  TempDir dir;
  ConfigMapDir config_map(dir.path());
  LogLines log;
  auto source = open_source(config_map.file(), log, inotify_only());
  CHECK(change_and_wait_for_limit(
      *source, 2, [&] { config_map.update("..2026_12_06_10_05_00.2", rules_with_limit(2)); }));
  CHECK(change_and_wait_for_limit(
      *source, 3, [&] { config_map.update("..2026_12_06_10_10_00.3", rules_with_limit(3)); }));
  CHECK(source->reloads_ok() == 2);
  CHECK(source->reloads_failed() == 0);
}

TEST_CASE("through the watcher a bad file is logged once and the next good one is taken",
          "[source][watch]") {
  TempDir dir;
  const fs::path file = dir.path() / "rules.yaml";
  write_file(file, rules_with_limit(1));
  LogLines log;
  auto source = open_source(file, log, inotify_only());
  // Replaced whole (a rename), so that no half-written file is read.
  const std::uint64_t before = source->attempts();
  replace_file(file, kBad);
  REQUIRE(source->wait_for_attempts(before + 1, 10s));
  CHECK(source->reloads_failed() == 1);
  CHECK(limit_in_force(*source) == 1);
  // The same bad bytes again, then a good file: one refusal, one reload, in order.
  replace_file(file, kBad);
  CHECK(change_and_wait_for_limit(*source, 2, [&] { replace_file(file, rules_with_limit(2)); }));
  CHECK(source->reloads_failed() == 1);
  CHECK(source->reloads_ok() == 1);
  const auto lines = log.taken();
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], Catch::StartsWith("rules: refused "));
  CHECK_THAT(lines[1], Catch::StartsWith("rules: reloaded "));
}

TEST_CASE("the periodic check alone sees a change when no event is acted on", "[source][watch]") {
  TempDir dir;
  const fs::path file = dir.path() / "rules.yaml";
  write_file(file, rules_with_limit(1));
  LogLines log;
  RuleSourceOptions options;
  options.debounce = 1h;  // inotify's events never come due
  options.poll_interval = 20ms;
  auto source = open_source(file, log, options);
  CHECK(change_and_wait_for_limit(*source, 2, [&] { write_file(file, rules_with_limit(2)); }));
}

TEST_CASE("readers take snapshots while reloads swap the rules", "[source][watch]") {
  TempDir dir;
  const fs::path file = dir.path() / "rules.yaml";
  write_file(file, rules_with_limit(1));
  LogLines log;
  auto source = open_source(file, log, inotify_only());
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> matched{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; ++i) {
    readers.emplace_back([&] {
      std::vector<Limit> limits;
      while (!done.load()) {
        const std::shared_ptr<const RuleSet> rules = source->current();
        rules->match(RequestAttributes{"GET", "/", "10.0.0.1", {}}, limits);
        if (limits.size() == 1 && limits[0].policy == rules->policy("p")) matched.fetch_add(1);
      }
    });
  }
  for (int limit = 2; limit <= 20; ++limit) {
    write_file(file, rules_with_limit(limit));
    // The watcher may have taken it first (and may have refused a half-written file).
    CHECK(source->reload().status != ReloadStatus::kRefused);
  }
  done.store(true);
  for (std::thread& t : readers) t.join();
  CHECK(limit_in_force(*source) == 20);
  CHECK(matched.load() > 0);
}

TEST_CASE("the debouncer waits for quiet but no longer than its maximum", "[source]") {
  Debouncer d(100, 1000);
  CHECK_FALSE(d.pending());
  CHECK(d.due_ns() == Debouncer::kNever);
  d.note_event(10);
  CHECK(d.due_ns() == 110);
  CHECK_FALSE(d.due(109));
  d.note_event(60);  // a second write of the same save
  CHECK(d.due_ns() == 160);
  CHECK(d.due(160));
  for (std::uint64_t t = 100; t < 2000; t += 50) d.note_event(t);  // a never quiet directory
  CHECK(d.due_ns() == 1010);
  d.clear();
  CHECK_FALSE(d.due(5000));
  d.note_event(5000);
  CHECK(d.due_ns() == 5100);
}

}  // namespace
}  // namespace sluice::rules

namespace sluice::rules {
namespace {

// An envoyproxy/ratelimit config whose one limit admits `limit` per second.
std::string envoy_with_limit(int limit) {
  return "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
         "      requests_per_unit: " +
         std::to_string(limit) + "\n";
}

std::uint32_t envoy_limit_in_force(const RuleSource& source) {
  const EnvoyEntry entry{"k", "v"};
  const EnvoyMatch m = source.current()->envoy().match("d", std::span(&entry, 1));
  return m.limit == nullptr ? 0 : m.limit->requests_per_unit;
}

TEST_CASE("a rules directory mounted from a ConfigMap is reloaded on each swap",
          "[source][watch]") {
  TempDir dir;
  ConfigMapDir config_map(dir.path());
  config_map.update("..2026_12_06_10_01_00.1", envoy_with_limit(1));
  LogLines log;
  // The directory, not a file in it: every .yaml in it is read.
  auto source = open_source(dir.path(), log, inotify_only());
  CHECK(envoy_limit_in_force(*source) == 1);
  const auto swap_to = [&](const std::string& version, const std::string& text,
                           std::uint32_t limit) {
    config_map.update(version, text);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      const std::uint64_t seen = source->attempts();
      if (envoy_limit_in_force(*source) == limit) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) return false;
      source->wait_for_attempts(seen + 1, left);
    }
  };
  CHECK(swap_to("..2026_12_06_10_05_00.2", envoy_with_limit(2), 2));
  // A bad config is refused, once, and the rules in force stay.
  const std::uint64_t before = source->attempts();
  config_map.update("..2026_12_06_10_06_00.3", envoy_with_limit(3) + "      unit_typo: x\n");
  REQUIRE(source->wait_for_attempts(before + 1, 10s));
  CHECK(source->reloads_failed() == 1);
  CHECK(envoy_limit_in_force(*source) == 2);
  const auto lines = log.taken();
  REQUIRE_FALSE(lines.empty());
  CHECK(lines.back().find("config error, unknown key 'unit_typo'") != std::string::npos);
  CHECK(swap_to("..2026_12_06_10_07_00.4", envoy_with_limit(4), 4));
  CHECK(source->reloads_ok() == 2);
  // A second file added beside is read too.
  write_file(dir.path() / "other.yaml", "domain: e\ndescriptors: []\n");
  CHECK(source->check_now().status == ReloadStatus::kReloaded);
  CHECK(source->current()->envoy().domain_count() == 2);
}

}  // namespace
}  // namespace sluice::rules
