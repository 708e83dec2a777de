// The client's node-level calls (PING, STATS, CLUSTER, RELOAD, DRAIN, INSPECT) and the synchronous
// adapters of the batch calls. Each call is a SyncCall (client/sync_call.h) queued with
// start_call() on a node's public connection; a call to several nodes starts them all, then
// waits for each.
#include "client/client.h"

#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/client_impl.h"
#include "client/router.h"
#include "client/sync_call.h"
#include "cluster/cluster_map.h"
#include "cluster/ring.h"
#include "core/clock.h"
#include "core/key_hash.h"
#include "protocol/cluster_messages.h"
#include "protocol/messages.h"

namespace sluice::client {

using detail::NodeConnection;
using detail::start_call;
using detail::SyncCall;
using detail::unexpected_reply;
using protocol::Frame;
using protocol::Opcode;

namespace {

// The first protocol version with INSPECT.
constexpr std::uint8_t kFirstInspectVersion = 6;

class PingCall final : public SyncCall<std::chrono::nanoseconds> {
 public:
  PingCall() : start_ns_(monotonic_now_ns()) {}
  void on_reply(std::uint32_t, const Frame& reply) override {
    if (reply.header.opcode != Opcode::kPing) return finish(unexpected_reply("PING"));
    finish(std::chrono::nanoseconds(monotonic_now_ns() - start_ns_));
  }

 private:
  std::uint64_t start_ns_;
};

void encode_ping(protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
  protocol::encode_ping(out, id, std::span<const std::uint8_t>(), false, framing);
}

class StatsCall final : public SyncCall<std::vector<Stat>> {
 public:
  void on_reply(std::uint32_t, const Frame& reply) override {
    std::vector<protocol::StatEntry> entries;
    if (reply.header.opcode != Opcode::kStats ||
        !protocol::parse_stats_reply(reply.body, entries)) {
      return finish(unexpected_reply("STATS"));
    }
    std::vector<Stat> stats;
    stats.reserve(entries.size());
    for (protocol::StatEntry& e : entries) stats.push_back(Stat{std::move(e.name), e.value});
    finish(std::move(stats));
  }
};

void encode_stats(protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
  protocol::encode_stats_request(out, id, framing);
}

// RELOAD or DRAIN: both answer an epoch and, when refused, why.
class AdminCall final : public SyncCall<ReloadOutcome> {
 public:
  explicit AdminCall(Opcode opcode) : opcode_(opcode) {}
  void on_reply(std::uint32_t, const Frame& reply) override {
    const bool reload = opcode_ == Opcode::kReload;
    protocol::ReloadReply answer;
    if (reply.header.opcode != opcode_ ||
        !(reload ? protocol::parse_reload_reply(reply.body, answer)
                 : protocol::parse_drain_reply(reply.body, answer))) {
      return finish(unexpected_reply(reload ? "RELOAD" : "DRAIN"));
    }
    ReloadOutcome outcome;
    outcome.epoch = answer.epoch;
    outcome.refusal.assign(answer.message);
    finish(std::move(outcome));
  }

 private:
  Opcode opcode_;
};

void encode_reload(protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
  protocol::encode_reload_request(out, id, framing);
}

// INSPECT (protocol 6): what the node stores for one key.
class InspectCall final : public SyncCall<StoredCopy> {
 public:
  void on_reply(std::uint32_t, const Frame& reply) override {
    protocol::InspectReply answer;
    if (reply.header.opcode != Opcode::kInspect ||
        !protocol::parse_inspect_reply(reply.body, answer)) {
      return finish(unexpected_reply("INSPECT"));
    }
    if (answer.status == protocol::InspectStatus::kInvalidKey) {
      return finish(Status(ErrorCode::kInvalidKey, "the node refused the key (empty or too long)"));
    }
    StoredCopy copy;
    copy.role = role_name(answer.role);
    if (answer.role == protocol::InspectRole::kPrimary) {
      copy.partition_state = partition_state_name(answer.partition_state);
    }
    copy.shard = answer.shard;
    copy.now_ns = answer.now_ns;
    copy.stored = answer.status == protocol::InspectStatus::kStored;
    if (copy.stored) {
      const protocol::WireRecord& record = answer.record;
      copy.algorithm = static_cast<Algorithm>(record.algorithm);
      copy.capacity_class = record.capacity_class;
      copy.state = CounterState{record.state_a, record.state_b};
      copy.expires_at_ns = record.idle_at_ns;
      copy.log.reserve(record.log_count);
      for (std::uint32_t i = 0; i < record.log_count; ++i) copy.log.push_back(record.log_at(i));
    }
    finish(std::move(copy));
  }

 private:
  static std::string role_name(protocol::InspectRole role) {
    switch (role) {
      case protocol::InspectRole::kStandalone:
        return "standalone";
      case protocol::InspectRole::kPrimary:
        return "primary";
      case protocol::InspectRole::kReplica:
        return "replica";
      case protocol::InspectRole::kOther:
        break;
    }
    return "other";
  }
  static std::string partition_state_name(std::uint8_t state) {
    return state == 0 ? "serving" : state == 1 ? "pulling" : "fenced";
  }
};

// Starts a `Call` on each of `targets` at once, then waits for them all: the results in the
// targets' order. A target that is not a connection answers with its own status.
template <typename Call, typename Encode, typename... Args>
std::vector<Result<typename Call::Value>> ask_all(
    const std::vector<Result<NodeConnection*>>& targets, const Encode& encode, Args... args) {
  std::vector<std::unique_ptr<Call>> calls(targets.size());
  std::vector<Result<typename Call::Value>> results(targets.size(),
                                                    Status(ErrorCode::kClosed, "not asked"));
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!targets[i].ok()) {
      results[i] = targets[i].status();
      continue;
    }
    calls[i] = std::make_unique<Call>(args...);
    if (Status queued = start_call(**targets[i], *calls[i], encode); !queued.ok()) {
      results[i] = queued;
      calls[i].reset();
    }
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (calls[i]) results[i] = calls[i]->wait();
  }
  return results;
}

// "replication.<peer>.<field>" counters, by peer in the order first seen. Ids may hold dots:
// the field is what follows the last one.
std::vector<ReplicationLag> replication_lag(const std::vector<Stat>& stats) {
  constexpr std::string_view kPrefix = "replication.";
  std::vector<ReplicationLag> out;
  for (const Stat& stat : stats) {
    const std::string_view name = stat.name;
    if (!name.starts_with(kPrefix)) continue;
    const std::string_view rest = name.substr(kPrefix.size());
    const std::size_t dot = rest.rfind('.');
    if (dot == std::string_view::npos || dot == 0) continue;
    const std::string_view peer = rest.substr(0, dot);
    const std::string_view field = rest.substr(dot + 1);
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const ReplicationLag& lag) { return lag.peer == peer; });
    if (it == out.end()) {
      out.push_back(ReplicationLag{std::string(peer)});
      it = out.end() - 1;
    }
    if (field == "records") {
      it->records = stat.value;
    } else if (field == "lag_ms") {
      it->lag_ms = stat.value;
    } else if (field == "up") {
      it->up = stat.value != 0;
    } else if (field == "link") {
      it->link = static_cast<int>(std::min<std::uint64_t>(stat.value, 2));
    } else if (field == "stalled") {
      it->stalled = stat.value != 0;
    }
  }
  return out;
}

// "lost.<id>.epoch" counters folded into `lost`: one entry per id, the highest epoch. Ids may
// hold dots: the id is what lies between the prefix and the suffix.
void add_lost_members(const std::vector<Stat>& stats, std::vector<LostMember>& lost) {
  constexpr std::string_view kPrefix = "lost.";
  constexpr std::string_view kSuffix = ".epoch";
  for (const Stat& stat : stats) {
    const std::string_view name = stat.name;
    if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
        !name.ends_with(kSuffix)) {
      continue;
    }
    const std::string_view id =
        name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
    auto it =
        std::find_if(lost.begin(), lost.end(), [&](const LostMember& m) { return m.id == id; });
    if (it == lost.end()) {
      lost.push_back({std::string(id), stat.value});
    } else {
      it->epoch = std::max(it->epoch, stat.value);
    }
  }
}

// Opens once; wait() returns after that. Same notify-under-mutex rule as SyncCall.
class Latch {
 public:
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_one();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace

// ---- synchronous batches ------------------------------------------------------------------

void Client::acquire_batch(std::span<const AcquireRequest> items,
                           std::vector<Result<Decision>>& results) {
  Latch latch;
  acquire_batch_async(items, [&results, &latch](std::span<const Result<Decision>> answered) {
    results.assign(answered.begin(), answered.end());
    latch.open();
  });
  latch.wait();
}

std::vector<Result<Decision>> Client::acquire_batch(std::span<const AcquireRequest> items) {
  std::vector<Result<Decision>> results;
  acquire_batch(items, results);
  return results;
}

// ---- node-level calls ---------------------------------------------------------------------

Result<std::chrono::nanoseconds> Client::ping() {
  Result<NodeConnection*> control = impl_->maps.control();
  if (!control.ok()) return control.status();
  PingCall call;
  if (Status queued = start_call(**control, call, encode_ping); !queued.ok()) {
    return queued;
  }
  return call.wait();
}

Result<std::vector<Stat>> Client::stats() {
  Result<NodeConnection*> control = impl_->maps.control();
  if (!control.ok()) return control.status();
  StatsCall call;
  if (Status queued = start_call(**control, call, encode_stats); !queued.ok()) {
    return queued;
  }
  return call.wait();
}

Result<ClusterInfo> Client::cluster() {
  Result<NodeConnection*> seed = impl_->maps.control();
  if (!seed.ok()) return seed.status();
  NodeConnection& control = **seed;
  // A node of an older protocol is outside any cluster and knows no CLUSTER.
  if (control.hello().version < detail::kFirstClusterVersion) return ClusterInfo{};
  detail::ClusterCall call;
  if (Status queued = start_call(control, call, detail::encode_cluster); !queued.ok()) {
    return queued;
  }
  Result<protocol::ClusterMapMessage> message = call.wait();
  if (!message.ok()) return message.status();
  ClusterInfo out;
  out.epoch = message->epoch;
  if (message->epoch == 0 && message->nodes.empty()) return out;
  Expected<cluster::ClusterMap> map = detail::map_from_message(*message);
  if (!map) {
    return Status(ErrorCode::kProtocolError, "the cluster map from " +
                                                 impl_->maps.seed_info().endpoint +
                                                 " is not valid: " + map.error());
  }
  const cluster::Ring& ring = map->ring();
  out.ring_version = ring.params().hash_version;
  out.partition_bits = ring.params().partition_bits;
  out.partitions = ring.partition_count();
  out.vnodes_per_node = ring.params().vnodes_per_node;
  std::vector<std::uint32_t> primaries(ring.nodes().size(), 0);
  std::vector<std::uint32_t> replicas(ring.nodes().size(), 0);
  for (const cluster::PartitionOwners& owners : ring.partitions()) {
    if (owners.primary != cluster::kNoNode) ++primaries[owners.primary];
    if (owners.replica != cluster::kNoNode) ++replicas[owners.replica];
  }
  for (const cluster::ClusterNode& node : map->nodes()) {
    ClusterNodeInfo info;
    info.id = node.id;
    info.address = node.address;
    info.state = std::string(cluster::node_state_name(node.state));
    if (const std::optional<cluster::NodeIndex> index = ring.find(node.id)) {
      info.primary_partitions = primaries[*index];
      info.replica_partitions = replicas[*index];
    }
    out.nodes.push_back(std::move(info));
  }
  if (message->self != protocol::kNotAMember) out.self = message->self;

  // Every node's STATS at once, over the client's connection to it.
  const std::shared_ptr<const detail::Router> router = impl_->maps.current_router();
  std::vector<Result<NodeConnection*>> targets;
  for (const ClusterNodeInfo& node : out.nodes) {
    if (router->clustered()) {
      targets.push_back(router->node_control(node.id));
    } else {
      targets.push_back(
          Status(ErrorCode::kConnectionFailed, "the client routes to no node " + node.id));
    }
  }
  const std::vector<Result<std::vector<Stat>>> stats = ask_all<StatsCall>(targets, encode_stats);
  for (std::size_t i = 0; i < out.nodes.size(); ++i) {
    if (stats[i].ok()) {
      out.nodes[i].replication = replication_lag(*stats[i]);
      for (const Stat& stat : *stats[i]) {
        const auto value = static_cast<int>(std::min<std::uint64_t>(stat.value, 1u << 30));
        if (stat.name == "node.fence_reason") out.nodes[i].fence_reason = value;
        if (stat.name == "node.etcd_endpoint") out.nodes[i].etcd_endpoint = value;
      }
      add_lost_members(*stats[i], out.lost);
    } else {
      out.nodes[i].stats_status = stats[i].status();
    }
  }
  // A member some node still counts as lost but the seed's map lists is not missing.
  std::erase_if(out.lost, [&](const LostMember& m) {
    return std::any_of(out.nodes.begin(), out.nodes.end(),
                       [&](const ClusterNodeInfo& n) { return n.id == m.id; });
  });
  std::sort(out.lost.begin(), out.lost.end(), [](const LostMember& a, const LostMember& b) {
    return a.epoch != b.epoch ? a.epoch > b.epoch : a.id < b.id;
  });
  return out;
}

Result<ReloadOutcome> Client::reload() {
  Result<NodeConnection*> control = impl_->maps.control();
  if (!control.ok()) return control.status();
  AdminCall call(Opcode::kReload);
  if (Status queued = start_call(**control, call, encode_reload); !queued.ok()) {
    return queued;
  }
  Result<ReloadOutcome> outcome = call.wait();
  if (!outcome.ok()) return outcome.status();
  outcome->node_id = impl_->maps.seed_info().node_id;
  outcome->address = impl_->maps.seed_info().endpoint;
  return outcome;
}

Result<std::vector<ReloadOutcome>> Client::reload_all() {
  const std::shared_ptr<const detail::Router> router = impl_->maps.current_router();
  if (!router->clustered()) {
    Result<ReloadOutcome> one = reload();
    if (!one.ok() && one.code() == ErrorCode::kClosed) return one.status();
    if (one.ok()) return std::vector<ReloadOutcome>{std::move(*one)};
    ReloadOutcome failed;
    failed.node_id = impl_->maps.seed_info().node_id;
    failed.address = impl_->maps.seed_info().endpoint;
    failed.status = one.status();
    return std::vector<ReloadOutcome>{std::move(failed)};
  }
  const cluster::ClusterMap& map = *router->map();
  const std::vector<std::string>& ids = map.ring().nodes();
  std::vector<Result<NodeConnection*>> targets;
  for (const std::string& id : ids) targets.push_back(router->node_control(id));
  std::vector<Result<ReloadOutcome>> answers =
      ask_all<AdminCall>(targets, encode_reload, Opcode::kReload);
  std::vector<ReloadOutcome> out(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (answers[i].ok()) out[i] = std::move(*answers[i]);
    out[i].node_id = ids[i];
    out[i].address = map.nodes()[map.node_index(static_cast<cluster::NodeIndex>(i))].address;
    if (!answers[i].ok()) out[i].status = answers[i].status();
  }
  for (const ReloadOutcome& outcome : out) {
    if (outcome.status.code() == ErrorCode::kClosed) return outcome.status;
  }
  return out;
}

Result<KeyInspection> Client::inspect(std::string_view key) {
  if (key.empty()) return Status(ErrorCode::kInvalidArgument, "the key is empty");
  const std::shared_ptr<const detail::Router> router = impl_->maps.current_router();
  KeyInspection out;
  std::vector<Result<NodeConnection*>> targets;
  if (router->clustered()) {
    const cluster::ClusterMap& map = *router->map();
    const cluster::Ring& ring = map.ring();
    out.epoch = map.epoch();
    out.clustered = true;
    out.partitions = ring.partition_count();
    out.partition = ring.partition_of(hash_key(key));
    const cluster::PartitionOwners& owners = ring.owners(out.partition);
    for (const cluster::NodeIndex owner : {owners.primary, owners.replica}) {
      if (owner == cluster::kNoNode) continue;
      const std::string& id = ring.nodes()[owner];
      (out.primary.empty() ? out.primary : out.replica) = id;
      StoredCopy copy;
      copy.node_id = id;
      copy.address = map.nodes()[map.node_index(owner)].address;
      out.copies.push_back(std::move(copy));
      targets.push_back(router->node_control(id));
    }
  } else {
    Result<NodeConnection*> seed = impl_->maps.control();
    if (!seed.ok()) return seed.status();
    StoredCopy copy;
    copy.node_id = impl_->maps.seed_info().node_id;
    copy.address = impl_->maps.seed_info().endpoint;
    out.copies.push_back(std::move(copy));
    targets.push_back(seed);
  }
  // A node of an older protocol would close the connection on the unknown opcode.
  for (Result<NodeConnection*>& target : targets) {
    if (target.ok() && (*target)->hello().version < kFirstInspectVersion) {
      target = Status(ErrorCode::kServerError,
                      "the node speaks protocol " + std::to_string((*target)->hello().version) +
                          "; INSPECT needs " + std::to_string(kFirstInspectVersion));
    }
  }
  const std::string owned_key(key);
  const auto encode = [&owned_key](protocol::Bytes& bytes, std::uint32_t request,
                                   const protocol::Framing& framing) {
    protocol::encode_inspect_request(bytes, request, owned_key, framing);
  };
  std::vector<Result<StoredCopy>> answers = ask_all<InspectCall>(targets, encode);
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (!answers[i].ok()) {
      if (answers[i].code() == ErrorCode::kClosed) return answers[i].status();
      out.copies[i].status = answers[i].status();
      continue;
    }
    answers[i]->node_id = std::move(out.copies[i].node_id);
    answers[i]->address = std::move(out.copies[i].address);
    out.copies[i] = std::move(*answers[i]);
  }
  return out;
}

Result<ReloadOutcome> Client::drain(std::string_view node_id) {
  const std::shared_ptr<const detail::Router> router = impl_->maps.current_router();
  if (!router->clustered()) {
    return Status(ErrorCode::kInvalidArgument,
                  "the seed is not a cluster member: no node to drain");
  }
  const cluster::ClusterNode* node = router->map()->find(node_id);
  if (node == nullptr) {
    return Status(ErrorCode::kInvalidArgument, "no node '" + std::string(node_id) +
                                                   "' in the cluster map of epoch " +
                                                   std::to_string(router->map()->epoch()));
  }
  Result<NodeConnection*> connection = router->node_control(node->id);
  if (!connection.ok()) return connection.status();
  AdminCall call(Opcode::kDrain);
  const std::string id(node_id);
  if (Status queued = start_call(
          **connection, call,
          [&id](protocol::Bytes& out, std::uint32_t request, const protocol::Framing& framing) {
            protocol::encode_drain_request(out, request, id, framing);
          });
      !queued.ok()) {
    return queued;
  }
  Result<ReloadOutcome> outcome = call.wait();
  if (!outcome.ok()) return outcome.status();
  outcome->node_id = node->id;
  outcome->address = node->address;
  return outcome;
}

}  // namespace sluice::client
