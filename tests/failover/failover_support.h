// What the failover suites share (tests/failover): a cluster of sluiced processes in etcd mode,
// a client seeded with one of them, and traffic over keys whose every admission is logged, so
// that a test can say when each key was decided again after a fault, what was admitted beyond
// the limit and which counts were lost.
#pragma once

#include <fmt/core.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/client.h"
#include "cluster/cluster_map.h"
#include "core/key_hash.h"
#include "protocol/cluster_messages.h"
#include "tests/integration/raw_client.h"
#include "tests/support/child_process.h"
#include "tests/support/etcd_process.h"
#include "tests/support/etcd_quorum.h"
#include "tests/support/log_lines.h"
#include "tests/support/ports.h"
#include "tests/support/window_clock.h"
#include "tests/support/wire_map.h"

namespace sluice::test {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using protocol::ItemStatus;

constexpr unsigned kShards = 2;
constexpr auto kTtl = 2s;  // --lease-ttl (etcd's minimum), the default

// Sanitized Debug builds (tools/test.sh) run the nodes and this client several times slower; a
// gap is measured to the client's next call of each key, one round over the keys later.
#if defined(SLUICE_SANITIZED)
constexpr auto kSlowBuildMargin = 2s;
constexpr std::chrono::milliseconds kCallDeadline{1000};
#else
constexpr auto kSlowBuildMargin = 0s;
constexpr std::chrono::milliseconds kCallDeadline{250};
#endif

inline long long ms(SteadyClock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

inline std::string node_id(int i) { return "node-" + std::to_string(i); }

// The node number of `id` ("node-3" -> 3).
inline int node_number(const std::string& id) { return std::stoi(id.substr(5)); }

// N sluiced processes "node-0" .. "node-(N-1)" in etcd mode, two shards each, and the etcd
// they register with: a single member of its own, or the 3-member `quorum` given (every node
// gets its three URLs in the same order). With `own_addresses`, node i listens on 127.0.0.(i+2)
// and opens its connections from there (--source-address), so that a firewall rule can tell
// the nodes apart (tests/support/netns.h); else every node is on 127.0.0.1. Everything is the
// test thread's.
class EtcdCluster {
 public:
  // Nodes 0 .. started - 1 start now; the others when the test starts them.
  explicit EtcdCluster(int nodes, int started = -1, EtcdQuorum* quorum = nullptr,
                       bool own_addresses = false)
      : own_addresses_(own_addresses) {
    if (quorum == nullptr) {
      etcd_ = std::make_unique<EtcdProcess>();
      etcd_urls_ = etcd_->url();
    } else {
      etcd_urls_ = quorum->urls();
    }
    static int clusters = 0;
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("sluice-failover-{}-{}", ::getpid(), ++clusters);
    std::filesystem::create_directories(dir_);
    for (int i = 0; i < nodes; ++i) {
      ports_.push_back(free_port_block(kShards + 1));
      children_.emplace_back();
      runs_.push_back(0);
    }
    for (int i = 0; i < (started < 0 ? nodes : started); ++i) start(i);
  }
  ~EtcdCluster() {
    children_.clear();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  int size() const { return static_cast<int>(ports_.size()); }
  std::uint16_t port(int i) const { return ports_.at(static_cast<std::size_t>(i)); }
  std::string host(int i) const {
    return own_addresses_ ? fmt::format("127.0.0.{}", i + 2) : "127.0.0.1";
  }
  std::string seed(int i) const { return fmt::format("{}:{}", host(i), port(i)); }
  EtcdProcess& etcd() {
    REQUIRE(etcd_ != nullptr);
    return *etcd_;
  }
  Child& child(int i) { return *children_.at(static_cast<std::size_t>(i)); }
  bool running(int i) const { return children_.at(static_cast<std::size_t>(i)) != nullptr; }

  void start(int i) {
    const auto index = static_cast<std::size_t>(i);
    std::vector<std::string> args = {"--bind",
                                     host(i),
                                     "--port",
                                     std::to_string(port(i)),
                                     "--shards",
                                     "2",
                                     "--max-memory",
                                     "64MiB",
                                     "--etcd",
                                     etcd_urls_,
                                     "--cluster-name",
                                     "failover",
                                     "--node-id",
                                     node_id(i),
                                     "--shutdown-timeout",
                                     "1s"};
    if (own_addresses_) {
      args.push_back("--source-address");
      args.push_back(host(i));
    }
    children_[index] = std::make_unique<Child>(SLUICED_PATH, args, log_path(i, ++runs_[index]));
    const std::string line = children_[index]->first_line(10s);
    INFO(node_id(i) << " start-up line: " << line << "; its log: " << log(i));
    REQUIRE(listen_port(line) == port(i));
  }
  void kill9(int i) {
    child(i).send_signal(SIGKILL);
    REQUIRE(child(i).wait_exit(10s).has_value());
    children_[static_cast<std::size_t>(i)].reset();
  }
  // SIGTERM to every node of `nodes` at once (their shutdowns overlap), then each must exit with
  // status 0 within 10 s; their logs stay readable with log().
  void stop(const std::set<int>& nodes) {
    for (const int i : nodes) child(i).send_signal(SIGTERM);
    for (const int i : nodes) {
      INFO(node_id(i) << " did not stop; its log: " << log(i));
      REQUIRE(child(i).wait_exit(10s) == 0);
      children_[static_cast<std::size_t>(i)].reset();
    }
  }
  std::string log(int i) const {
    std::ifstream in(log_path(i, runs_.at(static_cast<std::size_t>(i))));
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  // The map node i serves now; nullopt when it does not answer within 1 s.
  std::optional<cluster::ClusterMap> map_of_node(int i) const {
    try {
      RawClient raw(host(i), port(i), 1s);
      raw.hello();
      return map_of(raw.cluster());
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

  // Waits until every node of `asked` serves one member set, under an epoch above `after_epoch`,
  // whose active nodes are exactly `active`; returns the first node's map. Fails the test after
  // `limit`. The epochs may differ: a node that sees a later revision with the same member set
  // keeps the map it has (Server::adopt_from_etcd), and the ring is the same.
  cluster::ClusterMap wait_for(const std::set<int>& active, const std::set<int>& asked,
                               std::chrono::milliseconds limit = 15s,
                               std::uint64_t after_epoch = 0) {
    const auto until = SteadyClock::now() + limit;
    std::string last;
    for (;;) {
      std::optional<cluster::ClusterMap> agreed;
      bool ok = true;
      for (const int i : asked) {
        const auto map = map_of_node(i);
        if (!map) {
          last = node_id(i) + " does not answer CLUSTER";
          ok = false;
          break;
        }
        std::set<int> in_ring;
        for (const std::string& id : map->ring().nodes()) in_ring.insert(node_number(id));
        if (in_ring != active || map->epoch() <= after_epoch ||
            (agreed && agreed->nodes() != map->nodes())) {
          last = fmt::format("{} serves epoch {} with {} active", node_id(i), map->epoch(),
                             in_ring.size());
          ok = false;
          break;
        }
        agreed = map;
      }
      if (ok && agreed) return *agreed;
      INFO("the nodes never agreed on the expected map: " << last << "; node-0's log: " << log(0));
      REQUIRE(SteadyClock::now() < until);
      std::this_thread::sleep_for(20ms);
    }
  }
  cluster::ClusterMap wait_for_all(std::chrono::milliseconds limit = 15s,
                                   std::uint64_t after_epoch = 0) {
    std::set<int> all;
    for (int i = 0; i < size(); ++i) all.insert(i);
    return wait_for(all, all, limit, after_epoch);
  }

 private:
  std::string log_path(int i, int run) const {
    return (dir_ / fmt::format("{}.run{}.log", node_id(i), run)).string();
  }

  bool own_addresses_ = false;
  std::unique_ptr<EtcdProcess> etcd_;  // null with a quorum
  std::string etcd_urls_;
  std::filesystem::path dir_;
  std::vector<std::uint16_t> ports_;
  std::vector<std::unique_ptr<Child>> children_;
  std::vector<int> runs_;
};

// A line a node's log must hold a given number of times (a state change of etcd_membership.cpp
// or main.cpp that the scenario passes through), found by a text no other line contains.
struct StateLine {
  std::string_view text;
  std::size_t times;
};

// Node i's log of its last run: every line parses as TIME LEVEL sluiced/COMPONENT: MESSAGE, and
// each of `expected` is on exactly `times` lines.
inline void check_state_lines(const EtcdCluster& cluster, int i,
                              std::initializer_list<StateLine> expected) {
  const std::string log = cluster.log(i);
  INFO(node_id(i) << "'s log:\n" << log);
  const std::vector<std::string> lines = split_lines(log);
  for (const std::string& line : lines) {
    INFO("the line: " << line);
    const auto parsed = parse_text_log_line(line);
    REQUIRE(parsed.has_value());
    CHECK(parsed->program == "sluiced");
  }
  for (const StateLine& state : expected) {
    INFO("lines with '" << state.text << "'");
    CHECK(count_containing(lines, state.text) == state.times);
  }
}

// `timeout` is each call's deadline: a failover's calls fail fast (connection refused), but a
// hand-over's wait (UNAVAILABLE while a pull runs, a REDIRECT until every node has the new map)
// counts against it, and a sanitized Debug build pulls several times slower.
// With `leases` false every admission is one the cluster decided (none paid from a lease), so
// that a count lost is a count of admissions.
inline std::unique_ptr<client::Client> connect_client(
    const EtcdCluster& cluster, int seed, std::chrono::milliseconds timeout = kCallDeadline,
    bool leases = true) {
  client::ClientOptions options;
  if (!leases) options.lease_duration = 0ms;
  options.servers = {cluster.seed(seed)};
  options.timeout = timeout;
  options.connect_timeout = 500ms;
  options.client_name = "failover-test";
  // Every failure is counted as the error it is: no local answer hides one.
  options.failure_policy = client::FailurePolicy::kReport;
  options.blocked_keys = 0;
  options.breaker_failures = 0;
  auto connected = client::Client::connect(options);
  INFO("connect: " << (connected.ok() ? "" : connected.status().message()));
  REQUIRE(connected.ok());
  return std::move(connected).value();
}

// A fixed window of `limit` whose count only grows during a test: no window boundary comes
// while the test runs (steady_period_ms(), tests/support/window_clock.h). (An hour-long window
// rolled over at a full hour in the middle of a CI run, and the keys got their limit again.)
inline Rule steady(std::uint32_t limit) {
  Rule rule;
  rule.algorithm = Algorithm::kFixedWindow;
  rule.limit = limit;
  rule.period_ms = steady_period_ms();
  return rule;
}

// What the traffic saw of one key.
struct KeyLog {
  int primary = -1;  // at the start
  std::uint64_t admitted = 0;
  std::uint64_t errors = 0;
  std::vector<SteadyClock::time_point> admitted_at;
  std::string remaining;  // of each admission, in order (for a message)
  std::optional<SteadyClock::time_point> first_after;  // the first decision after the event
  std::string first_error;
};

// Sends every key in turn, one acquire at a time, through `client`, until `done(now)`; key k
// under rules[k].
template <typename Done>
inline void drive(client::Client& client, const std::vector<std::string>& keys,
                  const std::vector<Rule>& rules, std::vector<KeyLog>& logs,
                  std::optional<SteadyClock::time_point> event, Done done) {
  for (std::size_t round = 0; round < 1'000'000; ++round) {
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const auto decision = client.acquire(keys[k], rules[k]);
      const auto now = SteadyClock::now();
      KeyLog& log = logs[k];
      if (decision.ok()) {
        if (decision->allowed) {
          ++log.admitted;
          log.admitted_at.push_back(now);
          log.remaining += event ? fmt::format(" {}@{}", decision->remaining, ms(now - *event))
                                 : fmt::format(" {}@before", decision->remaining);
        }
        if (event && now >= *event && !log.first_after) log.first_after = now;
      } else {
        ++log.errors;
        if (log.first_error.empty()) log.first_error = decision.status().message();
      }
    }
    if (done(SteadyClock::now())) return;
  }
}

// Peeks every key until each has been decided once (at most 15 s): right after the nodes agree
// on a map, the partitions a node took over may still be pulling (UNAVAILABLE), longer than a
// call's deadline in a sanitized build. Counts nothing, so the checks that follow are exact.
// `cluster`, when given: every node's log is shown when a key is never decided.
inline void settle(client::Client& client, const std::vector<std::string>& keys,
                   const std::vector<Rule>& rules, const EtcdCluster* cluster = nullptr) {
  std::vector<bool> decided(keys.size(), false);
  std::size_t left = keys.size();
  std::string last_error;
  const auto until = SteadyClock::now() + 15s;
  while (left != 0 && SteadyClock::now() < until) {
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (decided[k]) continue;
      const auto peek = client.peek(keys[k], rules[k]);
      if (peek.ok()) {
        decided[k] = true;
        --left;
      } else {
        last_error = peek.status().message();
      }
    }
    if (left != 0) std::this_thread::sleep_for(10ms);
  }
  INFO(left << " keys never decided; the last error: " << last_error);
  if (left != 0 && cluster != nullptr) {
    for (int i = 0; i < cluster->size(); ++i)
      UNSCOPED_INFO("node-" << i << "'s log:\n" << cluster->log(i));
  }
  REQUIRE(left == 0);
}

// Keys whose primary in `map` is node `node`: `count` of them, named prefix + number.
inline std::vector<std::string> keys_of(const cluster::ClusterMap& map, int node, std::size_t count,
                                        const std::string& prefix) {
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < count && i < 100'000; ++i) {
    const std::string key = prefix + std::to_string(i);
    if (node_number(map.primary_of(hash_key(key))->id) == node) keys.push_back(key);
  }
  REQUIRE(keys.size() == count);
  return keys;
}

inline std::vector<std::string> key_names(int n, const std::string& prefix) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

inline double median_ms(std::vector<long long> values) {
  std::sort(values.begin(), values.end());
  if (values.empty()) return 0;
  const std::size_t n = values.size();
  return n % 2 == 1
             ? static_cast<double>(values[n / 2])
             : (static_cast<double>(values[n / 2 - 1]) + static_cast<double>(values[n / 2])) / 2;
}

inline void report(const std::string& text) {
  fmt::print("FAILOVER: {}\n", text);
  std::fflush(stdout);
}

// One kill -9 of node `victim` under traffic from a client seeded with node `seed`: returns the
// gap (kill to the last of the victim's keys decided again), checking the promises on the way.
struct KillOutcome {
  long long gap_ms = 0;           // kill -> every key of the victim decided again
  long long median_key_ms = 0;    // kill -> a key of the victim decided again, median over them
  std::uint64_t over_limit = 0;   // admissions beyond the limit, over the victim's limited keys
  std::uint64_t lost_window = 0;  // their admissions in the 50 ms before the kill (the bound)
  std::uint64_t lost_counts = 0;  // admissions of the victim's counting keys the replica lacks
};

inline KillOutcome kill_under_load(EtcdCluster& cluster, client::Client& client, int victim,
                                   const std::string& prefix) {
  // Limited keys (20 a window: most are exhausted before the kill) show over-admission;
  // counting keys (a limit never reached) show the admissions the failover forgot.
  constexpr int kLimited = 600;
  constexpr int kCounting = 300;
  constexpr std::uint32_t kLimit = 20;
  constexpr std::uint32_t kCountingLimit = 1'000'000;
  const cluster::ClusterMap before = cluster.wait_for_all();
  std::vector<std::string> keys = key_names(kLimited, prefix);
  std::vector<Rule> rules(keys.size(), steady(kLimit));
  for (const std::string& key : key_names(kCounting, prefix + "count:")) {
    keys.push_back(key);
    rules.push_back(steady(kCountingLimit));
  }
  std::vector<KeyLog> logs(keys.size());
  int victim_keys = 0;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    logs[k].primary = node_number(before.primary_of(hash_key(keys[k]))->id);
    victim_keys += logs[k].primary == victim ? 1 : 0;
  }
  REQUIRE(victim_keys > 0);

  settle(client, keys, rules);
  // Long enough to exhaust most limited keys, and for the replicas to have every count.
  const auto warm_until = SteadyClock::now() + 1500ms;
  drive(client, keys, rules, logs, std::nullopt,
        [&](SteadyClock::time_point now) { return now >= warm_until; });
  const auto killed_at = SteadyClock::now();
  cluster.kill9(victim);
  drive(client, keys, rules, logs, killed_at, [&](SteadyClock::time_point now) {
    if (now - killed_at > 15s) return true;
    for (const KeyLog& log : logs) {
      if (log.primary == victim && !log.first_after) return false;
    }
    return now - killed_at > 500ms;
  });

  KillOutcome outcome;
  std::vector<long long> key_gaps;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const KeyLog& log = logs[k];
    const bool limited = rules[k].limit == kLimit;
    INFO("key " << keys[k] << " of " << node_id(log.primary) << " (replica "
                << before.replica_of(hash_key(keys[k]))->id << "): first error " << log.first_error
                << "; remaining after each admission, @ms after the kill or @before:"
                << log.remaining);
    if (log.primary != victim) {
      // Keys of the other nodes see no error at all, and exactly their limit.
      CHECK(log.errors == 0);
      if (limited && log.admitted > kLimit) {
        // Diagnosis: what the primary's table holds now (a peek straight at it).
        RawClient raw(cluster.host(log.primary), cluster.port(log.primary), 2s);
        raw.hello();
        const protocol::AcquireItem item{keys[k], rules[k], 1, true};
        const auto r = raw.acquire(std::span(&item, 1)).at(0);
        std::string counters;
        for (const auto& [name, value] : raw.stats()) {
          if (name.starts_with("total.")) counters += fmt::format(" {}={}", name, value);
        }
        FAIL_CHECK("over-admitted: the primary's peek says status "
                   << int(r.status) << " remaining " << r.remaining << "; its STATS:" << counters);
      }
      continue;
    }
    REQUIRE(log.first_after.has_value());
    key_gaps.push_back(ms(*log.first_after - killed_at));
    outcome.gap_ms = std::max(outcome.gap_ms, key_gaps.back());
    if (!limited) {
      // What the new primary holds: every admission it or the replica stream knows of.
      const auto peek = client.peek(keys[k], rules[k]);
      REQUIRE(peek.ok());
      const std::uint64_t held = kCountingLimit - peek->remaining;
      outcome.lost_counts += log.admitted > held ? log.admitted - held : 0;
      continue;
    }
    // What the dead primary admitted after its last replicated batch may be admitted again by
    // the replica, and nothing more: batches leave every millisecond, so 50 ms before the kill
    // is a generous window.
    const auto lost = static_cast<std::uint64_t>(std::count_if(
        log.admitted_at.begin(), log.admitted_at.end(),
        [&](SteadyClock::time_point t) { return t >= killed_at - 50ms && t < killed_at; }));
    outcome.lost_window += lost;
    CHECK(log.admitted <= kLimit + lost);
    outcome.over_limit += log.admitted > kLimit ? log.admitted - kLimit : 0;
  }
  outcome.median_key_ms = static_cast<long long>(median_ms(key_gaps));
  return outcome;
}

// bench/failover.sh's loop: 20 rounds of kill_under_load, alternating node-1 and node-2 (the
// client's seed, node-0, stays up), each followed by a restart and a wait for the three to be
// active again; a line per round and a summary, prefixed by `label`.
inline void kill_loop(EtcdCluster& cluster, const std::string& label) {
  constexpr int kKills = 20;
  cluster.wait_for_all();
  auto client = connect_client(cluster, 0);
  std::vector<long long> gaps;
  std::vector<long long> key_medians;
  std::uint64_t over = 0;
  std::uint64_t lost_window = 0;
  std::vector<long long> lost_counts;
  for (int round = 0; round < kKills; ++round) {
    const int victim = 1 + round % 2;
    const KillOutcome outcome =
        kill_under_load(cluster, *client, victim, fmt::format("loop{}:", round));
    gaps.push_back(outcome.gap_ms);
    key_medians.push_back(outcome.median_key_ms);
    over += outcome.over_limit;
    lost_window += outcome.lost_window;
    lost_counts.push_back(static_cast<long long>(outcome.lost_counts));
    report(
        fmt::format("{}round {}: killed {}, all its keys decided again after {} ms (median "
                    "key {} ms), counts lost {}, over-admission {}",
                    label, round + 1, node_id(victim), outcome.gap_ms, outcome.median_key_ms,
                    outcome.lost_counts, outcome.over_limit));
    cluster.start(victim);
    cluster.wait_for_all(20s);
  }
  report(
      fmt::format("{}{} kills: gap median {} ms, max {} ms; median key gap, median over "
                  "rounds {} ms; counts lost per failover median {}, max {}; "
                  "over-admission {} in all (bound {}: admitted in the 50 ms before each "
                  "kill)",
                  label, kKills, median_ms(gaps), *std::max_element(gaps.begin(), gaps.end()),
                  median_ms(key_medians), median_ms(lost_counts),
                  *std::max_element(lost_counts.begin(), lost_counts.end()), over, lost_window));
  CHECK(median_ms(gaps) <= 2500);
}

}  // namespace sluice::test
