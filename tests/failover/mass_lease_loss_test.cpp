// Issue 23, every lease lost at once, against a real etcd and real sluiced processes
// (docs/RELIABILITY.md, "Faults (issue 23)"): every node is paused with SIGSTOP until etcd has
// expired all their leases (etcd keeps running), then resumed, together or one first and the
// others later. Keys exhausted before the pause must stay exhausted: the first node active
// gathers each partition from the other members before it serves it, a node that comes back
// has its copies merged into the primaries', and of two copies the more consumed is kept.
#include <fmt/core.h>

#include <catch2/catch.hpp>

#include "cluster/etcd_members.h"
#include "tests/failover/failover_support.h"

namespace sluice::test {
namespace {

constexpr std::uint32_t kLimit = 4;
constexpr int kKeys = 150;

std::string base64(const std::string& in) {
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::uint32_t bits = 0;
  int held = 0;
  for (const unsigned char c : in) {
    bits = bits << 8 | c;
    held += 8;
    while (held >= 6) {
      held -= 6;
      out += kDigits[(bits >> held) & 63];
    }
  }
  if (held > 0) out += kDigits[(bits << (6 - held)) & 63];
  while (out.size() % 4 != 0) out += '=';
  return out;
}

// Whether etcd still holds any member record of the cluster (etcd omits a count of 0).
bool any_member(EtcdProcess& etcd) {
  const std::string prefix = cluster::members_prefix("failover");
  std::string end = prefix;
  end.back() = static_cast<char>(end.back() + 1);
  const std::string answer =
      etcd.get("/v3/kv/range", fmt::format(R"({{"key":"{}","range_end":"{}","count_only":true}})",
                                           base64(prefix), base64(end)));
  REQUIRE(answer.find("\"header\"") != std::string::npos);
  return answer.find("\"count\"") != std::string::npos;
}

// Whether every node answers with one map, of one epoch, in which all of them are active.
bool all_active(const EtcdCluster& cluster) {
  // The same members, all active, on every node. Not the same epoch: a node that sees a later
  // revision with the same member set keeps the map it has (Server::adopt_from_etcd), so two
  // nodes may route by one ring under two epochs (a loaded run saw 16 and 18 for good).
  std::optional<std::vector<cluster::ClusterNode>> members;
  for (int i = 0; i < cluster.size(); ++i) {
    const auto map = cluster.map_of_node(i);
    if (!map || static_cast<int>(map->ring().nodes().size()) != cluster.size()) return false;
    if (members && *members != map->nodes()) return false;
    members = map->nodes();
  }
  return true;
}

struct Exhausted {
  std::vector<std::string> keys;
  std::vector<std::set<int>> holders;  // primary and replica before the pause
};

// kKeys keys used up to kLimit before the pause, over every node's partitions.
Exhausted exhaust(EtcdCluster& cluster, client::Client& client, const std::string& prefix) {
  const cluster::ClusterMap before = cluster.wait_for_all();
  Exhausted out;
  out.keys = key_names(kKeys, prefix);
  const Rule rule = steady(kLimit);
  settle(client, out.keys, std::vector<Rule>(out.keys.size(), rule), &cluster);
  for (const std::string& key : out.keys) {
    const KeyHash hash = hash_key(key);
    out.holders.push_back(
        {node_number(before.primary_of(hash)->id), node_number(before.replica_of(hash)->id)});
    for (std::uint32_t n = 0; n < kLimit; ++n) {
      const auto d = client.acquire(key, rule);
      REQUIRE(d.ok());
      REQUIRE(d->allowed);
    }
    const auto d = client.acquire(key, rule);
    REQUIRE(d.ok());
    REQUIRE_FALSE(d->allowed);
  }
  // The last admissions reach the replicas within a batch interval.
  std::this_thread::sleep_for(50ms);
  return out;
}

// SIGSTOP of every node, until etcd has deleted every member record (their leases expired);
// returns how long they were stopped by then.
long long pause_all_until_leases_expire(EtcdCluster& cluster) {
  const auto stopped_at = SteadyClock::now();
  for (int i = 0; i < cluster.size(); ++i) cluster.child(i).send_signal(SIGSTOP);
  while (any_member(cluster.etcd())) {
    REQUIRE(SteadyClock::now() - stopped_at < 10s);
    std::this_thread::sleep_for(50ms);
  }
  return ms(SteadyClock::now() - stopped_at);
}

// Acquires every key of `keys` (the indices given) in turn until `done(now)`; returns the
// admissions per key with their times.
struct Traffic {
  std::vector<std::vector<SteadyClock::time_point>> admitted;
  std::uint64_t calls = 0;
  std::uint64_t errors = 0;
  std::string first_error;
};

template <typename Done>
void load(client::Client& client, const Exhausted& exhausted, const std::vector<int>& which,
          Traffic& traffic, Done done) {
  traffic.admitted.resize(exhausted.keys.size());
  const Rule rule = steady(kLimit);
  for (;;) {
    for (const int k : which) {
      const auto d = client.acquire(exhausted.keys[static_cast<std::size_t>(k)], rule);
      ++traffic.calls;
      if (!d.ok()) {
        ++traffic.errors;
        if (traffic.first_error.empty()) traffic.first_error = d.status().message();
      } else if (d->allowed) {
        traffic.admitted[static_cast<std::size_t>(k)].push_back(SteadyClock::now());
      }
      if (done(SteadyClock::now())) return;
    }
  }
}

std::vector<int> all_keys() {
  std::vector<int> out(kKeys);
  for (int k = 0; k < kKeys; ++k) out[static_cast<std::size_t>(k)] = k;
  return out;
}

// Drives `which` from now until every node is active in one map, and `after` more; returns when
// they were all active (nullopt: not within 20 s).
std::optional<SteadyClock::time_point> load_until_all_active(EtcdCluster& cluster,
                                                             client::Client& client,
                                                             const Exhausted& exhausted,
                                                             Traffic& traffic,
                                                             std::chrono::milliseconds after) {
  const auto started = SteadyClock::now();
  std::optional<SteadyClock::time_point> active_at;
  auto next_look = started;
  load(client, exhausted, all_keys(), traffic, [&](SteadyClock::time_point now) {
    if (now - started > 20s) return true;
    if (!active_at && now >= next_look) {
      next_look = now + 100ms;
      if (all_active(cluster)) active_at = SteadyClock::now();
    }
    return active_at && now - *active_at >= after;
  });
  return active_at;
}

// Once every node is active the client must find them too: its connections come back at their
// own backoff (NodeConnection: at most 1 s, after a connect timeout of 500 ms here), and a map
// with no active node asks for a newer one every 100 ms. So first traffic on every key until
// one whole round of them has no error (within kClientBack), then a second of traffic on every
// key, then the nodes' maps settle.
constexpr auto kClientBack = 3s;
struct AfterActive {
  Traffic recovering;                    // until the client's first round without an error
  std::optional<long long> client_back;  // ms after all were active; nullopt: not within 3 s
  Traffic after;                         // the second after that
};

AfterActive after_all_active(EtcdCluster& cluster, client::Client& client,
                             const Exhausted& exhausted, SteadyClock::time_point active_at) {
  AfterActive out;
  std::uint64_t errors_before_round = 0;
  int in_round = 0;
  load(client, exhausted, all_keys(), out.recovering, [&](SteadyClock::time_point now) {
    if (++in_round == kKeys) {
      if (out.recovering.errors == errors_before_round) {
        out.client_back = ms(now - active_at);
        return true;
      }
      errors_before_round = out.recovering.errors;
      in_round = 0;
    }
    return now - active_at > kClientBack;
  });
  if (!out.client_back) return out;
  const auto until = SteadyClock::now() + 1s;
  load(client, exhausted, all_keys(), out.after,
       [&](SteadyClock::time_point now) { return now >= until; });
  cluster.wait_for_all();
  return out;
}

TEST_CASE(
    "etcd mode: every lease lost at once and the nodes resumed together: exhausted keys stay so") {
  EtcdCluster cluster(3);
  cluster.wait_for_all();
  auto client = connect_client(cluster, 0, 100ms);
  const Exhausted exhausted = exhaust(cluster, *client, "mass-together:");
  const long long stopped_ms = pause_all_until_leases_expire(cluster);

  const auto resumed_at = SteadyClock::now();
  for (int i = 0; i < cluster.size(); ++i) cluster.child(i).send_signal(SIGCONT);
  Traffic traffic;
  const auto active_at = load_until_all_active(cluster, *client, exhausted, traffic, 0ms);
  INFO("node-0's log: " << cluster.log(0) << "\nnode-1's log: " << cluster.log(1)
                        << "\nnode-2's log: " << cluster.log(2));
  REQUIRE(active_at.has_value());
  const AfterActive then = after_all_active(cluster, *client, exhausted, *active_at);
  INFO("the client's errors once all were active: " << then.recovering.errors << ", the first: "
                                                    << then.recovering.first_error);
  REQUIRE(then.client_back.has_value());
  const Traffic& after = then.after;

  std::uint64_t granted = 0;
  for (std::size_t k = 0; k < exhausted.keys.size(); ++k) {
    INFO("key " << exhausted.keys[k]);
    CHECK(traffic.admitted[k].empty());
    CHECK(then.recovering.admitted[k].empty());
    CHECK(after.admitted[k].empty());
    granted +=
        traffic.admitted[k].size() + then.recovering.admitted[k].size() + after.admitted[k].size();
  }
  INFO("first error in the second after: " << after.first_error);
  CHECK(after.errors == 0);
  report(fmt::format(
      "every lease lost, resumed together: stopped {} ms (until etcd had no member left); all "
      "active {} ms after the resume, {} calls meanwhile ({} errors, the first: {}); the client "
      "back {} ms after that ({} errors meanwhile); {} calls in the second after ({} errors); "
      "{} of the {} exhausted keys' calls admitted again",
      stopped_ms, ms(*active_at - resumed_at), traffic.calls, traffic.errors, traffic.first_error,
      *then.client_back, then.recovering.errors, after.calls, after.errors, granted,
      exhausted.keys.size()));
}

TEST_CASE(
    "etcd mode: every lease lost at once and one node back seconds before the others: counts "
    "survive") {
  EtcdCluster cluster(3);
  cluster.wait_for_all();
  auto client = connect_client(cluster, 0, 100ms);
  const Exhausted exhausted = exhaust(cluster, *client, "mass-staggered:");
  const long long stopped_ms = pause_all_until_leases_expire(cluster);

  // node-0 alone: no member to ask, it serves every partition with what it has. It held the
  // keys whose primary or replica it was: those keep their counts.
  const auto first_at = SteadyClock::now();
  cluster.child(0).send_signal(SIGCONT);
  cluster.wait_for({0}, {0});
  const long long alone_after_ms = ms(SteadyClock::now() - first_at);
  std::vector<int> held;
  std::vector<int> orphans;
  for (int k = 0; k < kKeys; ++k) {
    (exhausted.holders[static_cast<std::size_t>(k)].count(0) != 0 ? held : orphans).push_back(k);
  }
  REQUIRE_FALSE(held.empty());
  REQUIRE_FALSE(orphans.empty());
  // "Minutes apart", scaled to the 2 s TTL: node-0 first asks the nodes it knew (3 s each
  // without an answer: Coordinator::kSourceTimeout), then serves with what it has; the others
  // come back only after it has served alone for 2 s (a TTL). Traffic meanwhile is on the keys
  // it held; those it did not hold are left alone.
  Traffic gap;
  std::optional<SteadyClock::time_point> serving_at;
  load(*client, exhausted, held, gap, [&](SteadyClock::time_point now) {
    if (!serving_at && gap.calls > gap.errors) serving_at = now;
    return (serving_at && now - *serving_at >= 2s) || now - first_at > 20s;
  });
  REQUIRE(serving_at.has_value());

  const auto healed_at = SteadyClock::now();
  cluster.child(1).send_signal(SIGCONT);
  cluster.child(2).send_signal(SIGCONT);
  Traffic traffic;
  const auto active_at = load_until_all_active(cluster, *client, exhausted, traffic, 0ms);
  INFO("node-0's log: " << cluster.log(0) << "\nnode-1's log: " << cluster.log(1)
                        << "\nnode-2's log: " << cluster.log(2));
  REQUIRE(active_at.has_value());
  const AfterActive then = after_all_active(cluster, *client, exhausted, *active_at);
  INFO("the client's errors once all were active: " << then.recovering.errors << ", the first: "
                                                    << then.recovering.first_error);
  REQUIRE(then.client_back.has_value());
  const Traffic& after = then.after;
  INFO("first error in the second after: " << after.first_error);
  CHECK(after.errors == 0);

  std::uint64_t granted_gap = 0;
  std::uint64_t granted_held = 0;
  std::uint64_t granted_orphans_returning = 0;
  std::uint64_t granted_after_active = 0;
  std::uint64_t orphans_granted = 0;
  long long last_orphan_ms = -1;  // the last admission of the return, after the resume
  for (std::size_t k = 0; k < exhausted.keys.size(); ++k) {
    const bool is_held = exhausted.holders[k].count(0) != 0;
    granted_gap += gap.admitted.empty() ? 0 : gap.admitted[k].size();
    const std::uint64_t returning = traffic.admitted[k].size();
    const std::uint64_t once_active = then.recovering.admitted[k].size() + after.admitted[k].size();
    (is_held ? granted_held : granted_orphans_returning) += returning;
    granted_after_active += once_active;
    orphans_granted += !is_held && returning != 0 ? 1 : 0;
    for (const auto at : traffic.admitted[k]) {
      last_orphan_ms = std::max(last_orphan_ms, ms(at - healed_at));
    }
    // No key is admitted beyond its limit again: node-0's fresh copy of a key it never held
    // counts from zero, the merge keeps the more consumed.
    CHECK(returning + once_active <= kLimit);
  }
  CHECK(granted_gap == 0);
  CHECK(granted_held == 0);
  CHECK(granted_after_active == 0);
  report(fmt::format(
      "every lease lost, staggered: stopped {} ms; node-0 resumed alone, active {} ms later, "
      "serving {} ms later (after asking the stopped nodes), then 2 s alone: {} admissions on "
      "its {} exhausted keys ({} calls, {} errors: the client sent some to the stopped nodes "
      "until it saw node-0's new epoch); node-1 and node-2 resumed, all active {} ms later ({} "
      "calls, {} errors): {} admissions on the {} keys node-0 held, {} on {} of the {} keys it "
      "did not hold (before their holders were back; the last {} ms after the resume); the "
      "client back {} ms after all were active ({} errors meanwhile), {} admissions from then "
      "to the end of the second after ({} calls)",
      stopped_ms, alone_after_ms, ms(*serving_at - first_at), granted_gap, held.size(), gap.calls,
      gap.errors, ms(*active_at - healed_at), traffic.calls, traffic.errors, granted_held,
      held.size(), granted_orphans_returning, orphans_granted, orphans.size(), last_orphan_ms,
      *then.client_back, then.recovering.errors, granted_after_active, after.calls));
}

}  // namespace
}  // namespace sluice::test
