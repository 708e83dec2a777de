// Network partitions (issue 23): three sluiced nodes and a single-member etcd in a private
// network namespace (tests/support/netns.h), each node on its own 127.0.0.x and connecting from
// it, so that nftables can cut chosen links silently (no FIN, no RST). etcd and the test's
// clients are on 127.0.0.1; a node is cut off from etcd by dropping its packets to and from
// etcd's client port. Every scenario is bounded in time; the figures are reported as
// "FAILOVER: ..." lines (docs/RELIABILITY.md, "Faults").
#include <fmt/core.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/failover/failover_support.h"
#include "tests/support/netns.h"

namespace sluice::test {
namespace {

// Node i's STATS, or an empty map when it does not answer within 1 s.
std::map<std::string, std::uint64_t> stats_of(const EtcdCluster& cluster, int i) {
  try {
    RawClient raw(cluster.host(i), cluster.port(i), 1s);
    raw.hello();
    return raw.stats();
  } catch (const std::exception&) {
    return {};
  }
}

// The records node i has queued or in flight to its replicas (replication.<node>.records,
// summed), or nullopt when it does not answer.
std::optional<std::uint64_t> unreplicated(const EtcdCluster& cluster, int i) {
  const auto stats = stats_of(cluster, i);
  if (stats.empty()) return std::nullopt;
  std::uint64_t records = 0;
  for (const auto& [name, value] : stats) {
    if (name.starts_with("replication.") && name.ends_with(".records")) records += value;
  }
  return records;
}

// Waits until node i has nothing left to replicate (at most `limit`); returns how long it took.
long long wait_replicated(const EtcdCluster& cluster, int i, std::chrono::milliseconds limit) {
  const auto start = SteadyClock::now();
  for (;;) {
    const auto left = unreplicated(cluster, i);
    if (left && *left == 0) return ms(SteadyClock::now() - start);
    INFO(node_id(i) << " still has " << (left ? std::to_string(*left) : "no answer: ")
                    << " records to replicate");
    REQUIRE(SteadyClock::now() - start < limit);
    std::this_thread::sleep_for(10ms);
  }
}

// A client's connection held to one node throughout a fault: every answer it gets is logged
// with the time it came and the epoch in its header.
class HeldConnection {
 public:
  HeldConnection(const EtcdCluster& cluster, int node, std::uint64_t epoch)
      : raw_(cluster.host(node), cluster.port(node), 10s), epoch_(epoch) {
    raw_.hello();
    raw_.set_framing(protocol::Framing::with_epoch(epoch));
  }

  // One acquire of `key`, answered: its status, and when the answer came.
  ItemStatus acquire(const std::string& key, const Rule& rule) {
    protocol::Bytes out;
    const protocol::AcquireItem item{key, rule, 1, false};
    protocol::encode_acquire_request(out, raw_.next_id(), std::span(&item, 1),
                                     protocol::Framing::with_epoch(epoch_));
    REQUIRE(raw_.send(out));
    ReceivedFrame frame;
    REQUIRE(raw_.read(frame, 10s) == RawClient::ReadEnd::kFrame);
    std::vector<protocol::AcquireResult> results;
    REQUIRE(protocol::parse_acquire_reply(frame.body, results));
    REQUIRE(results.size() == 1);
    last_epoch_ = frame.header.epoch;
    return results[0].status;
  }
  // Asks again while the node answers UNAVAILABLE (a partition it took over still pulling), at
  // most 5 s, as a client would.
  ItemStatus decided(const std::string& key, const Rule& rule) {
    const auto until = SteadyClock::now() + 5s;
    ItemStatus status = acquire(key, rule);
    while (status == ItemStatus::kUnavailable && SteadyClock::now() < until) {
      std::this_thread::sleep_for(5ms);
      status = acquire(key, rule);
    }
    return status;
  }
  std::uint64_t last_epoch() const { return last_epoch_; }

 private:
  RawClient raw_;
  std::uint64_t epoch_;
  std::uint64_t last_epoch_ = 0;
};

bool is_decision(ItemStatus status) {
  return status == ItemStatus::kAllowed || status == ItemStatus::kDenied;
}

// Exhausts every key (limit admissions, then a denial) through `held`, the keys' primary.
void exhaust(HeldConnection& held, const std::vector<std::string>& keys, const Rule& rule) {
  for (const std::string& key : keys) {
    for (std::uint32_t n = 0; n < rule.limit; ++n)
      REQUIRE(held.decided(key, rule) == ItemStatus::kAllowed);
    REQUIRE(held.decided(key, rule) == ItemStatus::kDenied);
  }
}

}  // namespace

TEST_CASE("partition: a primary cut off from etcd only fences and its replica takes over",
          "[partition]") {
  auto network = private_network();
  if (!network) return;
  EtcdCluster cluster(3, -1, nullptr, /*own_addresses=*/true);
  const cluster::ClusterMap before = cluster.wait_for_all();
  constexpr int kVictim = 1;
  const Rule rule = steady(3);
  const std::vector<std::string> keys = keys_of(before, kVictim, 20, "etcd-cut:");
  HeldConnection held(cluster, kVictim, before.epoch());
  exhaust(held, keys, rule);
  wait_replicated(cluster, kVictim, 5s);

  const auto cut_at = SteadyClock::now();
  network->cut_port(cluster.host(kVictim), cluster.etcd().client_port());
  // Until the others serve a map without node-1, and 1 s more: node-1 is asked about its keys
  // over the connection held to it, each answer timed.
  std::optional<SteadyClock::time_point> failed_over;
  std::optional<SteadyClock::time_point> last_decision;
  std::optional<SteadyClock::time_point> first_refusal;
  std::uint64_t late_decisions = 0;
  for (std::size_t n = 0; SteadyClock::now() - cut_at < 15s; ++n) {
    const ItemStatus status = held.acquire(keys[n % keys.size()], rule);
    const auto now = SteadyClock::now();
    if (is_decision(status)) {
      last_decision = now;
      // Its lease, kept alive until the cut at the latest, expires TTL after it: a decision
      // answered later was made beside the replica.
      late_decisions += now - cut_at >= kTtl ? 1 : 0;
      CHECK(status == ItemStatus::kDenied);
    } else if (!first_refusal) {
      first_refusal = now;
    }
    if (!failed_over && n % 16 == 0) {
      const auto map0 = cluster.map_of_node(0);
      if (map0 && !map0->ring().find(node_id(kVictim))) failed_over = now;
    }
    if (failed_over && now - *failed_over > 1s) break;
    std::this_thread::sleep_for(2ms);
  }
  REQUIRE(failed_over.has_value());
  REQUIRE(first_refusal.has_value());
  CHECK(late_decisions == 0);
  const cluster::ClusterMap without = cluster.wait_for({0, 2}, {0, 2});
  // The replica serves node-1's keys with node-1's counts: still exhausted.
  auto client = connect_client(cluster, 0);
  for (const std::string& key : keys) {
    const auto decision = client->acquire(key, rule);
    REQUIRE(decision.ok());
    CHECK_FALSE(decision->allowed);
  }
  const long long fenced_ms = ms(*first_refusal - cut_at);
  const long long last_ms = last_decision ? ms(*last_decision - cut_at) : -1;

  const auto healed_at = SteadyClock::now();
  network->heal();
  const cluster::ClusterMap back = cluster.wait_for_all(20s, without.epoch());
  const long long rejoined_ms = ms(SteadyClock::now() - healed_at);
  settle(*client, keys, std::vector<Rule>(keys.size(), rule));
  for (const std::string& key : keys) {
    const auto decision = client->acquire(key, rule);
    REQUIRE(decision.ok());
    CHECK_FALSE(decision->allowed);
  }
  report(fmt::format(
      "partition, primary cut off from etcd: it refused its first item {} ms after the cut "
      "(last decision at {} ms), {} decisions at or after TTL; the replica served its keys "
      "{} ms after the cut, still exhausted; healed, all three active again {} ms later",
      fenced_ms, last_ms, late_decisions, ms(*failed_over - cut_at), rejoined_ms));
}

TEST_CASE("partition: a primary cut off from its replica keeps serving and its replica catches up",
          "[partition]") {
  auto network = private_network();
  if (!network) return;
  EtcdCluster cluster(3, -1, nullptr, /*own_addresses=*/true);
  const cluster::ClusterMap before = cluster.wait_for_all();
  constexpr int kVictim = 1;
  constexpr std::uint32_t kLimit = 1'000'000;  // counting keys: the limit is never reached
  const std::vector<std::string> keys = keys_of(before, kVictim, 50, "peer-cut:");
  const std::vector<Rule> rules(keys.size(), steady(kLimit));
  auto client = connect_client(cluster, 0, kCallDeadline, /*leases=*/false);
  settle(*client, keys, rules);
  std::vector<KeyLog> logs(keys.size());
  const auto cut_peers = [&] {
    network->cut(cluster.host(kVictim), cluster.host(0));
    network->cut(cluster.host(kVictim), cluster.host(2));
  };
  const auto heal_peers = [&] { network->heal(); };
  const auto total = [&] {
    std::uint64_t sum = 0;
    for (const KeyLog& log : logs) sum += log.admitted;
    return sum;
  };
  const auto drive_for = [&](std::chrono::milliseconds span) {
    const auto until = SteadyClock::now() + span;
    drive(*client, keys, rules, logs, std::nullopt,
          [&](SteadyClock::time_point now) { return now >= until; });
  };

  // Phase 1: cut off, node-1 keeps deciding its keys; what it queues stays bounded; healed, its
  // replicas catch up.
  cut_peers();
  drive_for(1500ms);
  const std::uint64_t phase1 = total();
  std::uint64_t errors = 0;
  for (const KeyLog& log : logs) errors += log.errors;
  CHECK(errors == 0);
  const auto backlog = unreplicated(cluster, kVictim);
  REQUIRE(backlog.has_value());
  const auto victim_stats = stats_of(cluster, kVictim);
  // Bounded: per replica node and shard at most the queue (65,536 records) plus one window in
  // flight (1 MiB, records of 48 bytes at least; docs/ARCHITECTURE.md, "Back-pressure").
  constexpr std::uint64_t kPerLink = 65'536 + (1u << 20) / 48;
  CHECK(*backlog <= 2 * kShards * kPerLink);
  heal_peers();
  const long long caught_up_ms = wait_replicated(cluster, kVictim, 10s);

  // Phase 2: cut off again, then node-1 dies while cut off: what it admitted since the cut is
  // what its replica never got.
  cut_peers();
  drive_for(1500ms);
  const std::uint64_t phase2 = total() - phase1;
  const auto killed_at = SteadyClock::now();
  cluster.kill9(kVictim);
  heal_peers();
  cluster.wait_for({0, 2}, {0, 2});
  const long long failover_ms = ms(SteadyClock::now() - killed_at);
  settle(*client, keys, rules);
  std::uint64_t held = 0;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const auto peek = client->peek(keys[k], rules[k]);
    REQUIRE(peek.ok());
    held += kLimit - peek->remaining;
  }
  const std::uint64_t admitted = total();
  const std::uint64_t lost = admitted > held ? admitted - held : 0;
  // Everything admitted before the second cut reached the replica (it caught up after the
  // first); what was admitted during it is lost with the node, and nothing more.
  CHECK(held >= phase1);
  CHECK(lost <= phase2);
  report(fmt::format(
      "partition, primary cut off from its replicas: it kept deciding ({} admissions in 1.5 s, "
      "0 errors), {} records waiting for its replicas at the end (replication_dropped {}); "
      "healed, caught up in {} ms; cut again, {} admissions in 1.5 s, then kill -9: failover "
      "{} ms, {} admissions lost of {} (the replica holds {})",
      phase1, *backlog,
      victim_stats.count("total.replication_dropped") != 0
          ? victim_stats.at("total.replication_dropped")
          : 0,
      caught_up_ms, phase2, failover_ms, lost, admitted, held));
}

TEST_CASE("partition: every node cut off from etcd for twice the TTL decides nothing meanwhile",
          "[partition]") {
  auto network = private_network();
  if (!network) return;
  EtcdCluster cluster(3, -1, nullptr, /*own_addresses=*/true);
  const cluster::ClusterMap before = cluster.wait_for_all();
  const Rule rule = steady(3);
  std::vector<std::string> all_keys;
  std::vector<std::unique_ptr<HeldConnection>> held;
  std::vector<std::vector<std::string>> keys;
  for (int i = 0; i < 3; ++i) {
    keys.push_back(keys_of(before, i, 10, "all-cut:"));
    held.push_back(std::make_unique<HeldConnection>(cluster, i, before.epoch()));
    exhaust(*held.back(), keys.back(), rule);
    all_keys.insert(all_keys.end(), keys.back().begin(), keys.back().end());
  }
  for (int i = 0; i < 3; ++i) wait_replicated(cluster, i, 5s);

  const auto cut_at = SteadyClock::now();
  for (int i = 0; i < 3; ++i) network->cut_port(cluster.host(i), cluster.etcd().client_port());
  // Each node is asked about its keys over the connection held to it until the heal, 2 x TTL
  // after the cut.
  std::uint64_t late_decisions = 0;
  std::uint64_t refusals = 0;
  std::vector<long long> last_decision_ms(3, -1);
  for (std::size_t n = 0; SteadyClock::now() - cut_at < 2 * kTtl; ++n) {
    for (int i = 0; i < 3; ++i) {
      const auto& mine = keys[static_cast<std::size_t>(i)];
      const ItemStatus status =
          held[static_cast<std::size_t>(i)]->acquire(mine[n % mine.size()], rule);
      const auto now = SteadyClock::now();
      if (is_decision(status)) {
        CHECK(status == ItemStatus::kDenied);
        late_decisions += now - cut_at >= kTtl ? 1 : 0;
        last_decision_ms[static_cast<std::size_t>(i)] = ms(now - cut_at);
      } else {
        ++refusals;
      }
    }
    std::this_thread::sleep_for(5ms);
  }
  CHECK(late_decisions == 0);
  CHECK(refusals > 0);
  // etcd has deleted every record with its lease, while the map, which only a registered node
  // changes, still lists all three: the operator's view says so (sluicectl runs on 127.0.0.1,
  // which still reaches etcd and the nodes).
  const Run view = run_command(
      fmt::format("'{}' --servers {} --timeout 500ms --etcd {} --cluster-name failover cluster",
                  SLUICECTL_PATH, cluster.seed(0), cluster.etcd().url()));
  INFO(view.output);
  CHECK(view.status == 0);
  CHECK_THAT(view.output, Catch::Contains("0 member records"));
  for (int i = 0; i < 3; ++i) {
    CHECK_THAT(view.output, Catch::Contains(fmt::format(
                                "  node-{}  lease gone, keys not yet moved (no record in etcd); "
                                "fenced: serving nothing as primary",
                                i)));
  }
  const auto healed_at = SteadyClock::now();
  network->heal();
  // Their leases expired meanwhile: the nodes register again, and agree on a newer map.
  const cluster::ClusterMap back = cluster.wait_for_all(20s, before.epoch());
  const long long back_ms = ms(SteadyClock::now() - healed_at);
  // Exhausted keys stay exhausted: no admission at all.
  auto client = connect_client(cluster, 0);
  const std::vector<Rule> rules(all_keys.size(), rule);
  settle(*client, all_keys, rules, &cluster);
  std::uint64_t admitted_again = 0;
  for (const std::string& key : all_keys) {
    const auto decision = client->acquire(key, rule);
    REQUIRE(decision.ok());
    admitted_again += decision->allowed ? 1 : 0;
  }
  CHECK(admitted_again == 0);
  report(fmt::format(
      "partition, every node cut off from etcd for {} ms: last decisions at {} / {} / {} ms "
      "after the cut, {} at or after TTL, {} refusals; healed, all active again {} ms later "
      "(epoch {} -> {}); {} of {} exhausted keys admitted again",
      ms(2 * kTtl), last_decision_ms[0], last_decision_ms[1], last_decision_ms[2], late_decisions,
      refusals, back_ms, before.epoch(), back.epoch(), admitted_again, all_keys.size()));
}

TEST_CASE("partition: a node whose link to etcd flaps for 20 s ends active with no key over",
          "[partition]") {
  auto network = private_network();
  if (!network) return;
  EtcdCluster cluster(3, -1, nullptr, /*own_addresses=*/true);
  const cluster::ClusterMap before = cluster.wait_for_all();
  constexpr int kVictim = 1;
  constexpr std::uint32_t kLimit = 40;
  // Limited keys of every node: more than 20 s of traffic exhausts them, so any second decider
  // (or a count lost) shows as an admission beyond the limit.
  std::vector<std::string> keys = key_names(300, "flap:");
  const std::vector<Rule> rules(keys.size(), steady(kLimit));
  auto client = connect_client(cluster, 0);
  settle(*client, keys, rules);
  std::vector<KeyLog> logs(keys.size());
  for (std::size_t k = 0; k < keys.size(); ++k) {
    logs[k].primary = node_number(before.primary_of(hash_key(keys[k]))->id);
  }
  const auto start = SteadyClock::now();
  bool cut = false;
  int flips = 0;
  drive(*client, keys, rules, logs, start, [&](SteadyClock::time_point now) {
    const auto second = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
    const bool want_cut = second < 20 && second % 2 == 0;
    if (want_cut != cut) {
      if (want_cut) {
        network->cut_port(cluster.host(kVictim), cluster.etcd().client_port());
      } else {
        network->heal();
      }
      cut = want_cut;
      ++flips;
    }
    return now - start >= 21s;
  });
  if (cut) network->heal();
  const cluster::ClusterMap after = cluster.wait_for_all(20s);
  std::uint64_t over = 0;
  std::uint64_t errors = 0;
  std::uint64_t victim_errors = 0;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    INFO("key " << keys[k] << " of " << node_id(logs[k].primary) << ": first error "
                << logs[k].first_error << "; admissions:" << logs[k].remaining);
    CHECK(logs[k].admitted <= kLimit);
    over += logs[k].admitted > kLimit ? logs[k].admitted - kLimit : 0;
    errors += logs[k].errors;
    victim_errors += logs[k].primary == kVictim ? logs[k].errors : 0;
  }
  report(fmt::format(
      "partition, node-1's link to etcd flapping 1 s on / 1 s off for 20 s ({} flips): "
      "{} errors ({} on node-1's keys), over-admission {}; all three active at epoch {} (was {})",
      flips, errors, victim_errors, over, after.epoch(), before.epoch()));
}

}  // namespace sluice::test
