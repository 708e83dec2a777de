// The shard engine alone: no socket, no event loop, no thread (server/shard_engine.h). Each
// test makes engines over a ServerContext, as a Shard would, drives them with hashed keys and
// reads their answers, counters, STATS replies and record pages.
#include "server/shard_engine.h"

// The engine knows no event loop: its header (and all it includes) must not bring Asio in.
#ifdef BOOST_ASIO_VERSION
#error "server/shard_engine.h includes Asio"
#endif

#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cluster/cluster_map.h"
#include "core/clock.h"
#include "core/key_hash.h"
#include "protocol/cluster_messages.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace sluice::server {
namespace {

using protocol::ItemStatus;
using protocol::ResetStatus;

constexpr std::uint64_t kStartNs = 1'700'000'040'000'000'000ull;
const Rule kTenPerMinute{Algorithm::kFixedWindow, 10, 60'000, 0};

// What the engine handed to its ChangeSink, in order.
class RecordingChanges final : public ChangeSink {
 public:
  void note(const KeyHash& hash) override { noted.push_back(hash); }
  void prefetch(const KeyHash&) const override {}
  std::vector<KeyHash> noted;
};

// A node of `shards` engines without a host: the context they share and the engines, registered
// in context.engines as Shard registers its own.
struct Node {
  explicit Node(unsigned shards = 1) {
    context.config.shards = shards;
    context.config.max_memory = 4u << 20;
    context.config.stats_refresh = std::chrono::milliseconds(0);
    context.clock = &clock;
    context.shard_count = shards;
    context.node_id = "a";
    for (unsigned i = 0; i < shards; ++i) {
      engines.push_back(std::make_unique<ShardEngine>(context, i));
      context.engines.push_back(engines.back().get());
    }
  }
  ShardEngine& engine(unsigned i = 0) { return *engines.at(i); }
  std::uint64_t count(ShardStat stat, unsigned i = 0) { return engine(i).counters()[stat].get(); }

  ManualClock clock{kStartNs};
  ServerContext context;
  std::vector<std::unique_ptr<ShardEngine>> engines;
};

// The view of node `self` in a map of nodes a and b, both active, every partition serving.
std::shared_ptr<const ClusterView> two_node_view(const std::string& self) {
  const cluster::ClusterMap map =
      cluster::ClusterMap::make(7, {{"a", "127.0.0.1:1", cluster::NodeState::kActive},
                                    {"b", "127.0.0.1:2", cluster::NodeState::kActive}})
          .value();
  auto states = std::make_shared<PartitionStates>(map.ring().partition_count());
  return make_cluster_view(map, self, std::move(states));
}

// A key whose primary in `view` is (or, with `mine` false, is not) the view's own node.
KeyHash key_where(const ClusterView& view, bool mine, const std::string& prefix = "k") {
  for (int i = 0;; ++i) {
    const KeyHash hash = hash_key(prefix + std::to_string(i));
    if ((view.route(hash).route == Route::kDecide) == mine) return hash;
  }
}

TEST_CASE("outside a cluster the engine decides every key and counts allowed and denied") {
  Node node;
  const KeyHash key = hash_key("user:1");
  for (int i = 0; i < 10; ++i) {
    CHECK(node.engine().acquire(key, kTenPerMinute, 1, false, kStartNs).status ==
          ItemStatus::kAllowed);
  }
  const protocol::AcquireResult denied =
      node.engine().acquire(key, kTenPerMinute, 1, false, kStartNs);
  CHECK(denied.status == ItemStatus::kDenied);
  CHECK(denied.limit == 10);
  CHECK(denied.retry_after_ms > 0);
  // A peek answers the same and counts nothing.
  CHECK(node.engine().acquire(key, kTenPerMinute, 1, true, kStartNs).status == ItemStatus::kDenied);
  CHECK(node.count(ShardStat::kAllowed) == 10);
  CHECK(node.count(ShardStat::kDenied) == 1);
  CHECK(node.engine().reset(key, kStartNs) == ResetStatus::kRemoved);
  CHECK(node.engine().reset(key, kStartNs) == ResetStatus::kAbsent);
  CHECK(node.engine().acquire(key, kTenPerMinute, 1, false, kStartNs).status ==
        ItemStatus::kAllowed);
}

TEST_CASE("in a cluster a key of another node is redirected to it and never counted here") {
  Node node;
  RecordingChanges changes;
  node.engine().set_changes(&changes);
  node.engine().set_view(two_node_view("a"));
  const ClusterView& view = *node.engine().view();
  const KeyHash theirs = key_where(view, false);
  const protocol::AcquireResult redirected =
      node.engine().acquire(theirs, kTenPerMinute, 1, false, kStartNs);
  CHECK(redirected.status == ItemStatus::kRedirect);
  CHECK(view.map.nodes()[redirected.limit].id == "b");
  CHECK(node.engine().reset(theirs, kStartNs) == ResetStatus::kRedirect);
  CHECK(node.count(ShardStat::kRedirected) == 2);
  CHECK(node.count(ShardStat::kAllowed) == 0);
  CHECK(changes.noted.empty());
}

TEST_CASE(
    "in a cluster an admission, a lease and a reset are noted for the replica, a denial "
    "and a peek are not") {
  Node node;
  RecordingChanges changes;
  node.engine().set_changes(&changes);
  node.engine().set_view(two_node_view("a"));
  const KeyHash mine = key_where(*node.engine().view(), true);
  const Rule one{Algorithm::kFixedWindow, 1, 60'000, 0};
  CHECK(node.engine().acquire(mine, one, 1, true, kStartNs).status == ItemStatus::kAllowed);
  CHECK(changes.noted.empty());  // a peek changes nothing
  CHECK(node.engine().acquire(mine, one, 1, false, kStartNs).status == ItemStatus::kAllowed);
  CHECK(node.engine().acquire(mine, one, 1, false, kStartNs).status == ItemStatus::kDenied);
  REQUIRE(changes.noted.size() == 1);
  CHECK(changes.noted[0] == mine);
  const KeyHash other = key_where(*node.engine().view(), true, "lease");
  const protocol::AcquireResult leased =
      node.engine().acquire(other, kTenPerMinute, 4, false, kStartNs, ItemKind::kLease);
  CHECK(leased.status == ItemStatus::kAllowed);
  CHECK(leased.granted == 4);
  CHECK(node.engine().reset(mine, kStartNs) == ResetStatus::kRemoved);
  CHECK(changes.noted == std::vector<KeyHash>{mine, other, mine});
}

TEST_CASE(
    "with its fence closed the engine answers its own keys UNAVAILABLE, and decides them "
    "again once the fence is open") {
  Node node;
  node.engine().set_view(two_node_view("a"));
  const KeyHash mine = key_where(*node.engine().view(), true);
  node.context.fenced = true;
  node.context.fence_deadline_ns.store(0);  // no etcd lease known
  node.engine().check_fence();
  CHECK(node.engine().acquire(mine, kTenPerMinute, 1, false, kStartNs).status ==
        ItemStatus::kUnavailable);
  CHECK(node.engine().reset(mine, kStartNs) == ResetStatus::kUnavailable);
  CHECK(node.count(ShardStat::kUnavailable) == 2);
  CHECK(node.count(ShardStat::kAllowed) == 0);
  // The fence is read at check_fence(), before each batch: a deadline ahead opens it.
  node.context.fence_deadline_ns.store(monotonic_now_ns() + 60'000'000'000ull);
  CHECK(node.engine().acquire(mine, kTenPerMinute, 1, false, kStartNs).status ==
        ItemStatus::kUnavailable);
  node.engine().check_fence();
  CHECK(node.engine().acquire(mine, kTenPerMinute, 1, false, kStartNs).status ==
        ItemStatus::kAllowed);
}

TEST_CASE("a lease takes what is left, and its give-back credits the unspent units") {
  Node node;
  const KeyHash key = hash_key("hot");
  const protocol::AcquireResult first =
      node.engine().acquire(key, kTenPerMinute, 8, false, kStartNs, ItemKind::kLease);
  CHECK(first.status == ItemStatus::kAllowed);
  CHECK(first.granted == 8);
  const std::uint32_t stamp = static_cast<std::uint32_t>(first.retry_after_ms);
  const protocol::AcquireResult second =
      node.engine().acquire(key, kTenPerMinute, 8, false, kStartNs, ItemKind::kLease);
  CHECK(second.granted == 2);  // only what was left
  CHECK(node.count(ShardStat::kLeases) == 2);
  CHECK(node.count(ShardStat::kLeasedUnits) == 10);
  const protocol::AcquireResult credit =
      node.engine().acquire(key, kTenPerMinute, 5, false, kStartNs, ItemKind::kGiveBack, stamp);
  CHECK(credit.status == ItemStatus::kAllowed);
  CHECK(credit.granted == 5);
  CHECK(node.count(ShardStat::kCreditedUnits) == 5);
  CHECK(node.engine().acquire(key, kTenPerMinute, 5, true, kStartNs).status ==
        ItemStatus::kAllowed);
}

TEST_CASE("a pulled page applied to another node's engine gives it the same counts") {
  Node source;
  Node target;
  std::vector<KeyHash> keys;
  for (int i = 0; i < 20; ++i) keys.push_back(hash_key("pulled:" + std::to_string(i)));
  for (const KeyHash& key : keys) {
    for (int taken = 0; taken < 3; ++taken) {
      source.engine().acquire(key, kTenPerMinute, 1, false, kStartNs);
    }
  }
  // A page of every partition of a ring (the pulling node's view of it).
  const std::shared_ptr<const ClusterView> view = two_node_view("b");
  const cluster::Ring& ring = view->map.ring();
  protocol::PullRequest request;
  request.max_records = 1000;
  for (std::uint32_t p = 0; p < ring.partition_count(); ++p) {
    request.partitions.push_back(static_cast<std::uint16_t>(p));
  }
  const std::vector<bool> wanted(ring.partition_count(), true);
  protocol::Bytes reply;
  source.engine().pull_page(reply, 9, protocol::Framing{}, request, wanted, ring);
  const protocol::DecodeResult decoded = protocol::FrameDecoder(1u << 24).decode(reply);
  REQUIRE(decoded.status == protocol::DecodeStatus::kOk);
  protocol::PullReplyHeader header;
  std::vector<protocol::WireRecord> records;
  REQUIRE(protocol::parse_pull_reply(decoded.frame.body, header, records));
  CHECK(header.done);
  CHECK(records.size() == keys.size());
  CHECK(source.count(ShardStat::kPullPages) == 1);
  for (const protocol::WireRecord& record : records) {
    target.engine().apply_record(record, {}, kStartNs);
  }
  // Every key answers a peek on the target as on the source: 7 units left of 10.
  for (const KeyHash& key : keys) {
    const protocol::AcquireResult there =
        source.engine().acquire(key, kTenPerMinute, 1, true, kStartNs);
    const protocol::AcquireResult here =
        target.engine().acquire(key, kTenPerMinute, 1, true, kStartNs);
    CHECK(here == there);
    CHECK(here.remaining == 6);  // after the peeked unit
  }
}

TEST_CASE("a STATS reply sums every shard's counters and lists each shard's own") {
  Node node(2);
  node.engine(0).acquire(hash_key("x"), kTenPerMinute, 1, false, kStartNs);
  node.engine(1).acquire(hash_key("y"), kTenPerMinute, 1, false, kStartNs);
  node.engine(1).acquire(hash_key("z"), kTenPerMinute, 1, false, kStartNs);
  node.engine(1).publish_table_stats();  // what its own thread does after each batch
  protocol::Bytes reply;
  node.engine(0).append_stats_reply(reply, 3, protocol::Framing{});
  const protocol::DecodeResult decoded = protocol::FrameDecoder(1u << 24).decode(reply);
  REQUIRE(decoded.status == protocol::DecodeStatus::kOk);
  std::vector<protocol::StatEntry> entries;
  REQUIRE(protocol::parse_stats_reply(decoded.frame.body, entries));
  const auto value = [&](const std::string& name) -> std::uint64_t {
    for (const protocol::StatEntry& e : entries) {
      if (e.name == name) return e.value;
    }
    FAIL("no stat " << name);
    return 0;
  };
  CHECK(value("total.allowed") == 3);
  CHECK(value("shard.0.allowed") == 1);
  CHECK(value("shard.1.allowed") == 2);
  CHECK(value("total.keys") == 3);
}

TEST_CASE("the lag a shard publishes is what STATS reports for its replica") {
  Node node;
  node.engine().set_view(two_node_view("a"));
  std::vector<ReplicaLag> lag{{"b", 5, 2, 40, true, 0, 0, ReplicaLink::kUp}};
  node.engine().publish_lag(lag);
  CHECK(node.engine().published_lag().size() == 1);
  protocol::Bytes reply;
  node.engine().append_stats_reply(reply, 1, protocol::Framing{});
  const protocol::DecodeResult decoded = protocol::FrameDecoder(1u << 24).decode(reply);
  REQUIRE(decoded.status == protocol::DecodeStatus::kOk);
  std::vector<protocol::StatEntry> entries;
  REQUIRE(protocol::parse_stats_reply(decoded.frame.body, entries));
  std::vector<std::pair<std::string, std::uint64_t>> replication;
  for (const protocol::StatEntry& e : entries) {
    if (e.name.rfind("replication.", 0) == 0) replication.emplace_back(e.name, e.value);
  }
  CHECK(replication ==
        std::vector<std::pair<std::string, std::uint64_t>>{{"replication.b.records", 7},
                                                           {"replication.b.lag_ms", 40},
                                                           {"replication.b.up", 1},
                                                           {"replication.b.bytes", 0},
                                                           {"replication.b.dropped", 0},
                                                           {"replication.b.stalled", 0},
                                                           {"replication.b.link", 1}});
}

TEST_CASE("over several shards the worst link to a replica is the one reported") {
  CHECK(merge_links(ReplicaLink::kIdle, ReplicaLink::kIdle) == ReplicaLink::kIdle);
  CHECK(merge_links(ReplicaLink::kIdle, ReplicaLink::kUp) == ReplicaLink::kUp);
  CHECK(merge_links(ReplicaLink::kUp, ReplicaLink::kIdle) == ReplicaLink::kUp);
  CHECK(merge_links(ReplicaLink::kUp, ReplicaLink::kDown) == ReplicaLink::kDown);
  CHECK(merge_links(ReplicaLink::kDown, ReplicaLink::kIdle) == ReplicaLink::kDown);
}

TEST_CASE("STATS gives the fence and the etcd member of a node in etcd mode only") {
  Node node;
  node.engine().set_view(two_node_view("a"));
  ServerContext& context = node.engine().context();
  context.config.stats_refresh = std::chrono::milliseconds(0);  // every STATS is built anew
  const auto stats = [&] {
    protocol::Bytes reply;
    node.engine().append_stats_reply(reply, 1, protocol::Framing{});
    const protocol::DecodeResult decoded = protocol::FrameDecoder(1u << 24).decode(reply);
    REQUIRE(decoded.status == protocol::DecodeStatus::kOk);
    std::vector<protocol::StatEntry> entries;
    REQUIRE(protocol::parse_stats_reply(decoded.frame.body, entries));
    std::map<std::string, std::uint64_t> out;
    for (const protocol::StatEntry& e : entries) out[e.name] = e.value;
    return out;
  };
  CHECK(stats().count("node.fenced") == 0);
  context.fenced = true;
  context.fence_reason.store(1);
  context.etcd_endpoint.store(2);
  const auto fenced = stats();
  CHECK(fenced.at("node.fenced") == 1);
  CHECK(fenced.at("node.fence_reason") == 1);
  CHECK(fenced.at("node.etcd_endpoint") == 2);
  context.fence_reason.store(0);
  const auto open = stats();
  CHECK(open.at("node.fenced") == 0);
  CHECK(open.at("node.fence_reason") == 0);
}

TEST_CASE("STATS says a replica is stalled once its oldest unacknowledged change is that old") {
  Node node;
  node.engine().set_view(two_node_view("a"));
  const auto stall_ms =
      static_cast<std::uint64_t>(node.engine().context().config.replication_stall_after.count());
  for (const std::uint64_t oldest_ms : {stall_ms - 1, stall_ms}) {
    std::vector<ReplicaLag> lag{{"b", 65'536, 900, oldest_ms, true, 65'000, 12}};
    node.engine().publish_lag(lag);
    protocol::Bytes reply;
    node.engine().append_stats_reply(reply, 1, protocol::Framing{});
    const protocol::DecodeResult decoded = protocol::FrameDecoder(1u << 24).decode(reply);
    REQUIRE(decoded.status == protocol::DecodeStatus::kOk);
    std::vector<protocol::StatEntry> entries;
    REQUIRE(protocol::parse_stats_reply(decoded.frame.body, entries));
    std::map<std::string, std::uint64_t> stats;
    for (const protocol::StatEntry& e : entries) stats[e.name] = e.value;
    CHECK(stats.at("replication.b.records") == 66'436);
    CHECK(stats.at("replication.b.bytes") == 65'000);
    CHECK(stats.at("replication.b.dropped") == 12);
    CHECK(stats.at("replication.b.stalled") == (oldest_ms >= stall_ms ? 1u : 0u));
  }
}

}  // namespace
}  // namespace sluice::server
