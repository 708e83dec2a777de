// Issue 23's faults of etcd itself, against a real 3-member etcd (tests/support/etcd_quorum.h)
// and real sluiced processes given its three URLs in the same order, as an operator writes
// them: a member that freezes without a FIN (SIGSTOP), the first of every node's list included,
// must not keep a failover from happening within TTL + 1 s; a kill -9 of the etcd leader under
// load leaves keys UNAVAILABLE only while a new leader is elected (docs/RELIABILITY.md,
// "Faults").
#include <fmt/core.h>

#include <catch2/catch.hpp>

#include "tests/failover/failover_support.h"

namespace sluice::test {
namespace {

TEST_CASE(
    "3-member etcd: with any one member frozen, the first of every node's list included, "
    "a kill -9 of a primary fails over within TTL + 1 s") {
  EtcdQuorum etcd;
  EtcdCluster cluster(3, -1, &etcd);
  cluster.wait_for_all();
  for (int frozen = 0; frozen < EtcdQuorum::kMembers; ++frozen) {
    const int victim = frozen;  // a different node each round
    const std::string member = fmt::format("127.0.0.1:{}", etcd.member(frozen).client_port());
    auto client = connect_client(cluster, (victim + 1) % cluster.size());
    etcd.freeze(frozen);
    // When the frozen member was etcd's leader, the other two elect another after etcd's
    // election timeout (1 s, randomized up to 2 s); until then no lease is renewed and no read
    // answered, and a node whose fence closes meanwhile answers UNAVAILABLE. The kill comes once
    // a live member leads, as in the operator's run (a member frozen, then a kill seconds later).
    const auto frozen_at = SteadyClock::now();
    int leader = -1;
    while ((leader = etcd.leader(frozen)) < 0 && SteadyClock::now() - frozen_at < 15s) {
      std::this_thread::sleep_for(50ms);
    }
    REQUIRE(leader >= 0);
    report(fmt::format("etcd member {} of 3 frozen: member {} leads {} ms later", frozen + 1,
                       leader + 1, ms(SteadyClock::now() - frozen_at)));
    const KillOutcome outcome =
        kill_under_load(cluster, *client, victim, fmt::format("frozen{}:", frozen));
    report(
        fmt::format("etcd member {} of 3 frozen (SIGSTOP), then kill -9 of node-{}: every key "
                    "of the dead node decided again {} ms after the kill (median key {} ms); "
                    "counts lost {}; over-admission {} (bound {})",
                    frozen + 1, victim, outcome.gap_ms, outcome.median_key_ms, outcome.lost_counts,
                    outcome.over_limit, outcome.lost_window));
    CHECK(outcome.gap_ms <= ms(kTtl + 1s + kSlowBuildMargin));
    std::set<int> alive = {0, 1, 2};
    alive.erase(victim);
    cluster.wait_for(alive, alive);
    // A node whose watch sat on the frozen member said so (the first round: every node made its
    // first watch on the first URL). Later rounds freeze the member the watches moved to, or
    // one no watch is on.
    if (frozen == 0) {
      for (const int i : alive) {
        INFO(node_id(i) << "'s log: " << cluster.log(i));
        CHECK(cluster.log(i).find("the watch on " + member + " missed revision") !=
              std::string::npos);
      }
    }
    etcd.thaw(frozen);
    // Back in the quorum before the next round freezes another member: else the next freeze
    // may leave one live member that can follow (a failed run saw no leader for 15 s).
    etcd.member(frozen).wait_healthy(std::chrono::seconds(20));
    cluster.start(victim);
    cluster.wait_for_all();
  }
}

// The etcd leader fails under load (300 keys, one acquire at a time): killed (its sockets
// close) or frozen (SIGSTOP: a host that hangs, no FIN). `first_leads`: member 0, the first URL
// of every node's list (the member each node talks to), is made the leader first. Returns the
// longest any key went without a decision after the fault, in ms; reports every figure.
long long leader_fault(bool freeze, bool first_leads = false) {
  EtcdQuorum etcd;
  EtcdCluster cluster(3, -1, &etcd);
  cluster.wait_for_all();
  if (first_leads) REQUIRE(etcd.make_leader(0));
  auto client = connect_client(cluster, 0);
  const std::vector<std::string> keys = key_names(300, "leader:");
  const std::vector<Rule> rules(keys.size(), steady(1'000'000));
  settle(*client, keys, rules);

  const int leader = etcd.leader();
  REQUIRE(leader >= 0);
  // Per key: its last decision, and the longest stretch from a decision to the next one.
  std::vector<SteadyClock::time_point> last_ok(keys.size(), SteadyClock::now());
  std::vector<long long> longest(keys.size(), 0);
  std::uint64_t errors = 0;
  std::string first_error;
  const auto run = [&](SteadyClock::duration how_long) {
    const auto until = SteadyClock::now() + how_long;
    while (SteadyClock::now() < until) {
      for (std::size_t k = 0; k < keys.size(); ++k) {
        const auto decision = client->acquire(keys[k], rules[k]);
        const auto now = SteadyClock::now();
        if (decision.ok()) {
          longest[k] = std::max(longest[k], ms(now - last_ok[k]));
          last_ok[k] = now;
        } else {
          ++errors;
          if (first_error.empty()) first_error = decision.status().message();
        }
      }
    }
  };
  run(1s);
  const std::vector<long long> before = longest;
  std::fill(longest.begin(), longest.end(), 0);
  if (freeze) {
    etcd.freeze(leader);
  } else {
    etcd.member(leader).kill9();
  }
  // Long enough for an election (etcd's default election timeout is 1 s, randomized up to 2 s)
  // and for every fence to have reopened.
  run(6s);
  int new_leader = -1;
  const auto until = SteadyClock::now() + 10s;
  while ((new_leader = etcd.leader(leader)) < 0 && SteadyClock::now() < until) {
    std::this_thread::sleep_for(50ms);
  }
  CHECK(new_leader >= 0);
  CHECK(new_leader != leader);
  const long long worst = *std::max_element(longest.begin(), longest.end());
  const long long worst_before = *std::max_element(before.begin(), before.end());
  std::vector<long long> gaps = longest;
  report(fmt::format(
      "{} of the etcd leader (member {} of 3{}) under load: the longest any key went without a "
      "decision {} ms (median key {} ms; {} ms before the fault); {} calls failed (first: {}); "
      "leader now member {}",
      freeze ? "SIGSTOP" : "kill -9", leader + 1,
      leader == 0 ? ", the one every node talks to" : ", not the one the nodes talk to", worst,
      static_cast<long long>(median_ms(gaps)), worst_before, errors,
      first_error.empty() ? "none" : first_error, new_leader + 1));
  // Leases survive a leader change: the same map, no failover.
  const cluster::ClusterMap map = cluster.wait_for_all();
  CHECK(map.ring().nodes().size() == 3);
  if (freeze) etcd.thaw(leader);
  return worst;
}

// The bound is one election: etcd's followers campaign after its election timeout (1 s by
// default), randomized up to twice that, so a key may go without a decision for up to 2 s while
// no member leads (a run on a loaded machine measured 1,120 ms; quiet ones 57 to 827 ms).
TEST_CASE(
    "3-member etcd: kill -9 of the etcd leader under load: keys are UNAVAILABLE only "
    "while a new leader is elected") {
  CHECK(leader_fault(/*freeze=*/false) <= 2000 + ms(kSlowBuildMargin));
}

// A frozen leader answers nothing until the other two elect another (etcd's election timeout);
// a node whose last renewal is older than TTL - margin by then closes its fence meanwhile, so
// keys may wait up to about TTL + the election. Hidden (a measurement for docs/RELIABILITY.md,
// and the fault tests' CI time is spent): `build/bin/failover_tests "[frozen-leader]"`.
TEST_CASE("3-member etcd: the etcd leader frozen under load", "[.][frozen-leader]") {
  const bool first_leads = GENERATE(true, false);
  CHECK(leader_fault(/*freeze=*/true, first_leads) <= ms(kTtl + 2s + kSlowBuildMargin));
}

// The 20-kill loop of "Failover with etcd" against the 3-member etcd (hidden: about 2 minutes;
// `bench/failover.sh --quorum` runs it).
TEST_CASE("3-member etcd: twenty kills in a loop", "[.][loop]") {
  EtcdQuorum etcd;
  EtcdCluster cluster(3, -1, &etcd);
  kill_loop(cluster, "3-member etcd: ");
}

}  // namespace
}  // namespace sluice::test
