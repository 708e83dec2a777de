// The dispatcher without sockets: frames in, replies out, hand-overs between two shards run by
// this thread (tests/server/memory_node.h).
#include "server/dispatcher.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/key_hash.h"
#include "protocol/cluster_messages.h"
#include "server/cluster_view.h"
#include "tests/server/memory_node.h"

namespace sluice::test {
namespace {

using protocol::ItemStatus;

constexpr std::uint64_t kStartNs = 1'700'000'040'000'000'000ull;

server::ServerConfig two_shards() {
  server::ServerConfig config;
  config.shards = 2;
  config.max_memory = 4u << 20;
  config.stats_refresh = std::chrono::milliseconds(0);
  return config;
}

// A key of `prefix` + a number that shard `shard` of 2 owns.
std::string key_owned_by(unsigned shard, const std::string& prefix) {
  for (int i = 0;; ++i) {
    std::string key = prefix + std::to_string(i);
    if (shard_for(hash_key(key), 2) == shard) return key;
  }
}

protocol::Bytes acquire_frame(std::uint32_t request_id, const std::vector<std::string>& keys,
                              const Rule& rule) {
  std::vector<protocol::AcquireItem> items;
  for (const std::string& key : keys) items.push_back({key, rule, 1, false});
  protocol::Bytes out;
  protocol::encode_acquire_request(out, request_id, items);
  return out;
}

// The reply frames in `bytes`; fails the test if they do not parse.
std::vector<protocol::Frame> replies(const protocol::Bytes& bytes) {
  std::vector<protocol::Frame> frames;
  REQUIRE(split_replies(bytes, frames));
  return frames;
}

TEST_CASE("a frame whose keys are all local is answered inside dispatch", "[dispatcher]") {
  ManualClock clock(kStartNs);
  MemoryNode node(two_shards(), clock);
  auto peer = MemoryPeer::create(node.shard(0));
  const Rule rule{Algorithm::kFixedWindow, 2, 60'000, 0};
  const std::string key = key_owned_by(0, "local-");
  for (std::uint32_t id = 1; id <= 3; ++id) peer->feed(acquire_frame(id, {key}, rule));

  const protocol::Bytes out = peer->take_output();
  const auto frames = replies(out);
  REQUIRE(frames.size() == 3);
  std::vector<protocol::AcquireResult> results;
  for (std::uint32_t i = 0; i < 3; ++i) {
    CHECK(frames[i].header.request_id == i + 1);
    REQUIRE(protocol::parse_acquire_reply(frames[i].body, results));
    REQUIRE(results.size() == 1);
    CHECK(results[0].status == (i < 2 ? ItemStatus::kAllowed : ItemStatus::kDenied));
  }
  CHECK(peer->frames_pending() == 0);
  CHECK(peer->frames_finished() == 0);
}

TEST_CASE("items of another shard come back through its inbox, in item order", "[dispatcher]") {
  ManualClock clock(kStartNs);
  MemoryNode node(two_shards(), clock);
  auto peer = MemoryPeer::create(node.shard(0));
  const Rule rule{Algorithm::kTokenBucket, 1, 60'000, 0};
  const std::string mine = key_owned_by(0, "mine-");
  const std::string theirs = key_owned_by(1, "theirs-");
  const std::string also_theirs = key_owned_by(1, "also-");

  // The second item is the first one's key again: it is denied, in order.
  peer->feed(acquire_frame(7, {theirs, theirs, mine, also_theirs}, rule));
  CHECK(peer->output().empty());  // waiting for shard 1
  CHECK(peer->frames_pending() == 1);
  CHECK(peer->items_pending() == 3);

  REQUIRE(node.run_until_idle());
  CHECK(peer->frames_pending() == 0);
  CHECK(peer->items_pending() == 0);
  CHECK(peer->frames_finished() == 1);
  const protocol::Bytes out = peer->take_output();
  const auto frames = replies(out);
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].header.request_id == 7);
  std::vector<protocol::AcquireResult> results;
  REQUIRE(protocol::parse_acquire_reply(frames[0].body, results));
  REQUIRE(results.size() == 4);
  CHECK(results[0].status == ItemStatus::kAllowed);
  CHECK(results[1].status == ItemStatus::kDenied);
  CHECK(results[2].status == ItemStatus::kAllowed);
  CHECK(results[3].status == ItemStatus::kAllowed);
}

TEST_CASE("a malformed frame is refused with an ERROR and nothing after it is handled",
          "[dispatcher]") {
  ManualClock clock(kStartNs);
  MemoryNode node(two_shards(), clock);
  auto peer = MemoryPeer::create(node.shard(0));
  protocol::Bytes input;
  protocol::encode_ping(input, 1, {}, /*reply=*/false);
  const std::size_t bad = input.size();
  protocol::encode_ping(input, 2, {}, /*reply=*/false);
  input[bad + 6] = 1;  // a reserved byte of the second PING's header
  protocol::encode_ping(input, 3, {}, /*reply=*/false);
  peer->feed(input);

  CHECK(peer->failed());
  const protocol::Bytes out = peer->take_output();
  const auto frames = replies(out);
  REQUIRE(frames.size() == 2);
  CHECK(frames[0].header.opcode == protocol::Opcode::kPing);
  CHECK(frames[0].header.request_id == 1);
  CHECK(frames[1].header.opcode == protocol::Opcode::kError);
  CHECK(frames[1].header.request_id == 2);
  protocol::ErrorReply error;
  REQUIRE(protocol::parse_error(frames[1].body, error));
  CHECK(error.code == protocol::WireErrorCode::kMalformedFrame);
}

TEST_CASE("the frame loop stops when the peer asks and resumes where it stopped", "[dispatcher]") {
  ManualClock clock(kStartNs);
  MemoryNode node(two_shards(), clock);
  auto peer = MemoryPeer::create(node.shard(1));
  protocol::Bytes input;
  for (std::uint32_t id = 1; id <= 3; ++id) protocol::encode_ping(input, id, {}, false);
  peer->set_paused(true);
  peer->feed(input);
  CHECK(peer->output().empty());
  CHECK(peer->input_left() == input.size());
  peer->set_paused(false);
  peer->dispatch();
  CHECK(peer->input_left() == 0);
  const protocol::Bytes out = peer->take_output();
  CHECK(replies(out).size() == 3);
}

TEST_CASE("a reply finished after the peer failed is dropped, and the frame still ends",
          "[dispatcher]") {
  ManualClock clock(kStartNs);
  MemoryNode node(two_shards(), clock);
  auto peer = MemoryPeer::create(node.shard(0));
  const Rule rule{Algorithm::kGcra, 5, 1'000, 0};
  protocol::Bytes input = acquire_frame(1, {key_owned_by(1, "far-")}, rule);
  protocol::encode_ping(input, 2, {}, false);
  input[input.size() - 16] = 0;  // the PING's magic: malformed
  peer->feed(input);
  CHECK(peer->failed());
  CHECK(peer->frames_pending() == 1);
  REQUIRE(node.run_until_idle());
  CHECK(peer->frames_pending() == 0);
  CHECK(peer->frames_finished() == 1);
  const protocol::Bytes out = peer->take_output();
  const auto frames = replies(out);
  REQUIRE(frames.size() == 1);  // only the ERROR: the ACQUIRE's reply came after it
  CHECK(frames[0].header.opcode == protocol::Opcode::kError);
}

TEST_CASE("a peer that closes with a frame on another shard lives until the frame is back",
          "[dispatcher]") {
  ManualClock clock(kStartNs);
  MemoryNode node(two_shards(), clock);
  auto peer = MemoryPeer::create(node.shard(0));
  const Rule rule{Algorithm::kTokenBucket, 5, 1'000, 0};
  protocol::Bytes input = acquire_frame(1, {key_owned_by(1, "gone-")}, rule);
  protocol::encode_ping(input, 2, {}, false);
  peer->feed(input);
  const protocol::Bytes answered = peer->output();  // the PING's reply only
  peer->close();
  peer->feed(acquire_frame(3, {key_owned_by(0, "after-")}, rule));
  CHECK(peer->input_left() == 0);  // a closed peer reads no more
  const std::weak_ptr<MemoryPeer> watch = peer;
  peer.reset();
  REQUIRE_FALSE(watch.expired());  // the hand-over task holds it
  REQUIRE(node.run_until_idle());
  CHECK(watch.expired());
  CHECK(node.context().tasks_in_flight.load() == 0);
  const auto frames = replies(answered);
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].header.opcode == protocol::Opcode::kPing);
}

TEST_CASE("dispatching stops while the items waiting for other shards are at their bound",
          "[dispatcher][backpressure]") {
  ManualClock clock(kStartNs);
  server::ServerConfig config = two_shards();
  config.max_pending_items = 100;
  MemoryNode node(config, clock);
  auto peer = MemoryPeer::create(node.shard(0));
  const Rule rule{Algorithm::kFixedWindow, 1000, 60'000, 0};
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 30; ++i) {
    const std::string key = "backlog-" + std::to_string(i);
    if (shard_for(hash_key(key), 2) == 1) keys.push_back(key);
  }
  protocol::Bytes input;
  for (std::uint32_t id = 1; id <= 6; ++id) {
    const protocol::Bytes frame = acquire_frame(id, keys, rule);
    input.insert(input.end(), frame.begin(), frame.end());
  }
  const std::size_t frame_size = input.size() / 6;
  // Shard 1 does not run yet: 4 frames of 30 items reach the bound of 100, the rest waits.
  peer->feed(input);
  CHECK(peer->items_pending() == 120);
  CHECK(peer->frames_pending() == 4);
  CHECK(peer->input_left() == 2 * frame_size);

  REQUIRE(node.run_until_idle());
  CHECK(peer->items_pending() == 0);
  peer->dispatch();  // what a transport does when frame_finished() wakes its reader
  CHECK(peer->input_left() == 0);
  REQUIRE(node.run_until_idle());
  const protocol::Bytes out = peer->take_output();
  const auto frames = replies(out);
  CHECK(frames.size() == 6);
}

// A node "memory-node" and a node "puller" at epoch 10: the view of the first, its
// partitions all serving.
std::shared_ptr<const server::ClusterView> puller_view(MemoryNode& node) {
  const cluster::ClusterMap map =
      cluster::ClusterMap::make(10, {{"memory-node", "127.0.0.1:1", cluster::NodeState::kActive},
                                     {"puller", "127.0.0.1:2", cluster::NodeState::kActive}})
          .value();
  auto states = std::make_shared<server::PartitionStates>(map.ring().partition_count());
  auto view = server::make_cluster_view(map, "memory-node", std::move(states));
  node.shard(0).engine().set_view(view);
  return view;
}

// The first partition whose primary in `view` is `node`.
std::uint16_t partition_of(const server::ClusterView& view, const std::string& node) {
  const cluster::Ring& ring = view.map.ring();
  for (std::uint32_t p = 0; p < ring.partition_count(); ++p) {
    if (ring.nodes()[ring.owners(p).primary] == node) return static_cast<std::uint16_t>(p);
  }
  FAIL("no partition of " << node);
  return 0;
}

// What a node's PULL with fence of `partitions`, sent under `epoch`, gets back: the frames.
std::vector<protocol::Frame> fencing_pull(MemoryNode& node, std::uint64_t epoch,
                                          std::vector<std::uint16_t> partitions,
                                          protocol::Bytes& out) {
  auto peer = MemoryPeer::create(node.shard(0), /*this_shard=*/0);
  protocol::Bytes input;
  protocol::encode_hello_request(input, 1, {protocol::kVersion, "sluiced/puller", ""});
  protocol::PullRequest request;
  request.fence = true;
  request.max_records = 16;
  request.partitions = std::move(partitions);
  protocol::encode_pull_request(input, 2, request, protocol::Framing::with_epoch(epoch));
  peer->feed(input);
  node.run_until_idle();
  out = peer->take_output();
  return replies(out);
}

TEST_CASE(
    "a fencing PULL planned under an older map fences only partitions whose primary is "
    "still the puller",
    "[dispatcher]") {
  ManualClock clock(kStartNs);
  server::ServerConfig config = two_shards();
  config.shards = 1;
  MemoryNode node(config, clock);
  const auto view = puller_view(node);
  const std::uint16_t mine = partition_of(*view, "memory-node");
  const std::uint16_t theirs = partition_of(*view, "puller");
  const auto stale_fences = [&] {
    return node.shard(0).engine().counters()[server::ShardStat::kStaleFences].get();
  };

  // Epoch 5 < 10, listing a partition this node is primary of at 10 and one whose primary is
  // still the puller: only the second is fenced; the records of both come back.
  protocol::Bytes out;
  auto frames = fencing_pull(node, 5, {mine, theirs}, out);
  REQUIRE(frames.size() == 2);
  CHECK(frames[1].header.opcode == protocol::Opcode::kPull);
  CHECK(view->states->get(mine) == server::PartitionServing::kServing);
  CHECK(view->states->get(theirs) == server::PartitionServing::kFenced);
  CHECK(stale_fences() == 1);

  // Epoch 12 > 10: the puller knows a newer map than this node; it is fenced at once.
  frames = fencing_pull(node, 12, {mine}, out);
  REQUIRE(frames.size() == 2);
  CHECK(frames[1].header.opcode == protocol::Opcode::kPull);
  CHECK(view->states->get(mine) == server::PartitionServing::kFenced);
  CHECK(stale_fences() == 1);
}

TEST_CASE("a pull of an older epoch that ends late never reopens a partition", "[dispatcher]") {
  server::PartitionStates states(4);
  using server::PartitionServing;
  states.set(1, PartitionServing::kPulling, 5);
  CHECK_FALSE(states.serve_pulled(1, 4));  // another epoch's pull
  CHECK(states.get(1) == PartitionServing::kPulling);
  // A newer map pulls it again: the older pull's end does not serve it.
  states.set(1, PartitionServing::kPulling, 7);
  CHECK_FALSE(states.serve_pulled(1, 5));
  CHECK(states.get(1) == PartitionServing::kPulling);
  // Fenced by a newer primary meanwhile: stays fenced.
  states.set(1, PartitionServing::kFenced, 8);
  CHECK_FALSE(states.serve_pulled(1, 7));
  CHECK(states.get(1) == PartitionServing::kFenced);
  // The pull of the epoch in force serves it.
  states.set(2, PartitionServing::kPulling, 9);
  CHECK(states.serve_pulled(2, 9));
  CHECK(states.get(2) == PartitionServing::kServing);
  CHECK_FALSE(states.serve_pulled(2, 9));  // once
}

}  // namespace
}  // namespace sluice::test
