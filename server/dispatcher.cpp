#include "server/dispatcher.h"

#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>
#include <algorithm>
#include <new>
#include <type_traits>

#include "core/clock.h"
#include "core/key_hash.h"
#include "core/rule.h"
#include "protocol/cluster_messages.h"
#include "server/auth.h"
#include "server/shard.h"

namespace sluice::server {

using protocol::WireErrorCode;

namespace {

ItemKind kind_of(const protocol::AcquireItem& item) {
  if (item.lease) return ItemKind::kLease;
  if (item.give_back) return ItemKind::kGiveBack;
  return ItemKind::kDecide;
}

}  // namespace

Dispatcher::Dispatcher(Shard& shard)
    : shard_(shard), requires_authentication_(requires_authentication(shard.context().config)) {}

DispatchResult Dispatcher::dispatch_frames(Peer& peer, const protocol::FrameDecoder& decoder,
                                           std::span<const std::uint8_t> input) {
  DispatchResult result;
  while (result.consumed < input.size()) {
    if (peer.stop_dispatching()) {
      result.stopped_early = true;
      break;
    }
    const protocol::DecodeResult decoded = decoder.decode(input.subspan(result.consumed));
    if (decoded.status == protocol::DecodeStatus::kNeedMore) break;
    if (decoded.status == protocol::DecodeStatus::kMalformed) {
      fail(peer, decoded.request_id, decoded.error, decoded.reason);
      break;
    }
    result.handled_any = true;
    dispatch(peer, decoded.frame);
    result.consumed += decoded.frame_size;
  }
  return result;
}

bool Dispatcher::backlog_full(const Peer& peer, const ServerConfig& config) {
  return peer.frames_pending() >= kMaxFramesPending ||
         peer.items_pending() >= config.max_pending_items;
}

void Dispatcher::fail(Peer& peer, std::uint32_t request_id, WireErrorCode code,
                      std::string_view message) {
  shard_.engine().counters()[ShardStat::kProtocolErrors].add();
  peer.reject(request_id, code, message);
}

void Dispatcher::fail_authentication(Peer& peer, std::uint32_t request_id,
                                     std::string_view message) {
  shard_.engine().counters()[ShardStat::kAuthFailures].add();
  peer.reject(request_id, WireErrorCode::kUnauthenticated, message);
}

void Dispatcher::dispatch(Peer& peer, const protocol::Frame& frame) {
  const protocol::FrameHeader& header = frame.header;
  // Each reply goes in its request's framing; in version 2 it names the epoch decided by.
  const ClusterView* view = shard_.engine().view();
  framing_ = protocol::Framing{header.version, view != nullptr ? view->epoch() : 0};
  if (requires_authentication_ && !peer.authenticated_ &&
      header.opcode != protocol::Opcode::kHello) {
    return fail_authentication(peer, header.request_id, kHelloFirstMessage);
  }
  if (header.is_reply()) {
    return fail(peer, header.request_id, WireErrorCode::kMalformedFrame,
                "a client must not send a reply frame");
  }
  switch (header.opcode) {
    case protocol::Opcode::kHello:
      return handle_hello(peer, header.request_id, frame.body);
    case protocol::Opcode::kPing:
      return protocol::encode_ping(peer.reply_buffer(), header.request_id, frame.body,
                                   /*reply=*/true, framing_);
    case protocol::Opcode::kAcquire:
      return handle_acquire(peer, header.request_id, frame.body);
    case protocol::Opcode::kReset:
      return handle_reset(peer, header.request_id, frame.body);
    case protocol::Opcode::kStats:
      return handle_stats(peer, header.request_id, frame.body);
    case protocol::Opcode::kCluster:
      return handle_cluster(peer, header.request_id, frame.body);
    case protocol::Opcode::kReplicate:
      return handle_replicate(peer, header.request_id, frame.body);
    case protocol::Opcode::kPull:
      return handle_pull(peer, header.request_id, header.epoch, frame.body);
    case protocol::Opcode::kReload:
      return handle_reload(peer, header.request_id, frame.body);
    case protocol::Opcode::kDrain:
      return handle_drain(peer, header.request_id, frame.body);
    case protocol::Opcode::kInspect:
      return handle_inspect(peer, header.request_id, frame.body);
    default:
      return fail(
          peer, header.request_id, WireErrorCode::kUnknownOpcode,
          fmt::format("unknown request opcode 0x{:02x}", static_cast<unsigned>(header.opcode)));
  }
}

void Dispatcher::handle_hello(Peer& peer, std::uint32_t request_id,
                              std::span<const std::uint8_t> body) {
  protocol::HelloRequest request;
  if (const auto parsed = protocol::parse_hello_request(body, request); !parsed) {
    return fail(peer, request_id, parsed.error, parsed.reason);
  }
  if (request.version < 1) {
    return fail(peer, request_id, WireErrorCode::kUnsupportedVersion,
                fmt::format("HELLO version {} is not supported (this server speaks 1 to {})",
                            request.version, protocol::kVersion));
  }
  const ServerContext& context = shard_.context();
  // Every HELLO is checked: a wrong token closes even an authenticated connection.
  if (!hello_admits(context.config, request)) {
    return fail_authentication(peer, request_id, kWrongTokenMessage);
  }
  peer.authenticated_ = true;
  if (request.client_name.starts_with(kNodeClientPrefix)) {
    peer.peer_node_.assign(request.client_name.substr(kNodeClientPrefix.size()));
  }
  protocol::HelloReply reply;
  reply.version = std::min(request.version, protocol::kVersion);
  reply.this_shard = peer.this_shard();
  reply.max_frame = context.config.max_frame;
  reply.max_key = context.config.max_key;
  reply.max_batch = context.config.max_batch;
  reply.shard_ports = context.shard_ports;
  reply.node_id = context.node_id;
  protocol::encode_hello_reply(peer.reply_buffer(), request_id, reply, framing_);
}

void Dispatcher::handle_acquire(Peer& peer, std::uint32_t request_id,
                                std::span<const std::uint8_t> body) {
  // One of the two clock reads per ACQUIRE frame (not per item) that time it for
  // sluice_decision_duration_seconds; the other is when its reply is appended.
  const std::uint64_t started_ns = monotonic_now_ns();
  const ServerContext& context = shard_.context();
  if (const auto parsed =
          protocol::parse_acquire_request(body, context.config.max_batch, acquire_items_);
      !parsed) {
    return fail(peer, request_id, parsed.error, parsed.reason);
  }
  acquire_results_.assign(acquire_items_.size(), protocol::AcquireResult{});
  acquire_hashes_.resize(acquire_items_.size());
  local_items_.clear();
  auto& staging = shard_.staging();
  bool handed_over = false;
  std::uint64_t invalid = 0;
  for (std::size_t i = 0; i < acquire_items_.size(); ++i) {
    const protocol::AcquireItem& item = acquire_items_[i];
    protocol::AcquireResult& result = acquire_results_[i];
    if (validate(item.rule, item.cost, context.config.sliding_log_cap) != RuleError::kOk) {
      result.status = protocol::ItemStatus::kInvalidRule;
      ++invalid;
      continue;
    }
    if ((item.lease || item.give_back) && item.cost > protocol::kMaxLeaseUnits) {
      result.status = protocol::ItemStatus::kInvalidRule;  // `granted` has 24 bits
      ++invalid;
      continue;
    }
    if (item.key.empty() || item.key.size() > context.config.max_key) {
      result.status = protocol::ItemStatus::kInvalidKey;
      ++invalid;
      continue;
    }
    const KeyHash hash = hash_key(item.key);
    const unsigned owner = shard_for(hash, context.shard_count);
    if (owner != shard_.index()) {
      staging[owner].push_back(HandoverItem{hash, item.rule, item.cost, item.peek,
                                            static_cast<std::uint32_t>(i), kind_of(item),
                                            item.stamp});
      handed_over = true;
      continue;
    }
    acquire_hashes_[i] = hash;
    local_items_.push_back(static_cast<std::uint32_t>(i));
  }
  if (!local_items_.empty()) {
    // The owned items are decided in a second pass, with their records prefetched ahead.
    const std::uint64_t now_ns = context.clock->now_ns();
    shard_.engine().decide_prefetched(
        local_items_.size(), [&](std::size_t k) { return acquire_hashes_[local_items_[k]]; },
        [&](std::size_t k) {
          const std::uint32_t i = local_items_[k];
          const protocol::AcquireItem& item = acquire_items_[i];
          // Made in its slot, not copied there: a copy right after the result was built would
          // wait for its stores to land (CounterTable::update_counter).
          static_assert(std::is_trivially_destructible_v<protocol::AcquireResult>);
          new (&acquire_results_[i]) protocol::AcquireResult(
              shard_.engine().acquire(acquire_hashes_[i], item.rule, item.cost, item.peek, now_ns,
                                      kind_of(item), item.stamp));
        });
  }
  if (invalid != 0) shard_.engine().counters()[ShardStat::kInvalidItems].add(invalid);
  if (!handed_over) {
    protocol::encode_acquire_reply(peer.reply_buffer(), request_id, acquire_results_, framing_);
    shard_.engine().counters().acquire_latency.observe(monotonic_now_ns() - started_ns);
    return;
  }
  PendingFrame* frame = shard_.new_pending_frame();
  frame->opcode = protocol::Opcode::kAcquire;
  frame->request_id = request_id;
  frame->framing = framing_;
  frame->started_ns = started_ns;
  frame->acquire_results.swap(acquire_results_);
  hand_over(peer, frame);
}

void Dispatcher::handle_reset(Peer& peer, std::uint32_t request_id,
                              std::span<const std::uint8_t> body) {
  const ServerContext& context = shard_.context();
  if (const auto parsed =
          protocol::parse_reset_request(body, context.config.max_batch, reset_keys_);
      !parsed) {
    return fail(peer, request_id, parsed.error, parsed.reason);
  }
  reset_results_.assign(reset_keys_.size(), protocol::ResetStatus::kAbsent);
  auto& staging = shard_.staging();
  bool handed_over = false;
  std::uint64_t invalid = 0;
  const std::uint64_t now_ns = context.clock->now_ns();
  shard_.engine().check_fence();
  for (std::size_t i = 0; i < reset_keys_.size(); ++i) {
    const std::string_view key = reset_keys_[i];
    if (key.empty() || key.size() > context.config.max_key) {
      reset_results_[i] = protocol::ResetStatus::kInvalidKey;
      ++invalid;
      continue;
    }
    const KeyHash hash = hash_key(key);
    const unsigned owner = shard_for(hash, context.shard_count);
    if (owner != shard_.index()) {
      HandoverItem item;
      item.hash = hash;
      item.index = static_cast<std::uint32_t>(i);
      staging[owner].push_back(item);
      handed_over = true;
      continue;
    }
    reset_results_[i] = shard_.engine().reset(hash, now_ns);
  }
  if (invalid != 0) shard_.engine().counters()[ShardStat::kInvalidItems].add(invalid);
  if (!handed_over) {
    protocol::encode_reset_reply(peer.reply_buffer(), request_id, reset_results_, framing_);
    return;
  }
  PendingFrame* frame = shard_.new_pending_frame();
  frame->opcode = protocol::Opcode::kReset;
  frame->request_id = request_id;
  frame->framing = framing_;
  frame->reset_results.swap(reset_results_);
  hand_over(peer, frame);
}

void Dispatcher::handle_inspect(Peer& peer, std::uint32_t request_id,
                                std::span<const std::uint8_t> body) {
  std::string_view key;
  if (const auto parsed = protocol::parse_inspect_request(body, key); !parsed) {
    return fail(peer, request_id, parsed.error, parsed.reason);
  }
  const ServerContext& context = shard_.context();
  if (key.empty() || key.size() > context.config.max_key) {
    inspect_ = protocol::InspectReply{};
    inspect_.status = protocol::InspectStatus::kInvalidKey;
    inspect_.now_ns = context.clock->now_ns();
    shard_.engine().counters()[ShardStat::kInvalidItems].add();
    return protocol::encode_inspect_reply(peer.reply_buffer(), request_id, inspect_, {}, framing_);
  }
  const KeyHash hash = hash_key(key);
  const unsigned owner = shard_for(hash, context.shard_count);
  if (owner == shard_.index()) {
    shard_.engine().inspect(hash, context.clock->now_ns(), inspect_, log_);
    return protocol::encode_inspect_reply(peer.reply_buffer(), request_id, inspect_, log_,
                                          framing_);
  }
  HandoverItem item;
  item.hash = hash;
  shard_.staging()[owner].push_back(item);
  PendingFrame* frame = shard_.new_pending_frame();
  frame->opcode = protocol::Opcode::kInspect;
  frame->request_id = request_id;
  frame->framing = framing_;
  hand_over(peer, frame);
}

void Dispatcher::hand_over(Peer& peer, PendingFrame* frame) {
  auto& staging = shard_.staging();
  // Count first: the frame is complete before any of its tasks can come back.
  std::uint32_t items_handed_over = 0;
  for (const auto& items : staging) {
    if (items.empty()) continue;
    ++frame->tasks_pending;
    items_handed_over += static_cast<std::uint32_t>(items.size());
  }
  frame->items_handed_over = items_handed_over;
  ++peer.frames_pending_;
  peer.items_pending_ += items_handed_over;
  const std::shared_ptr<Peer> owner_of_frame = peer.shared_from_this();
  for (unsigned owner = 0; owner < staging.size(); ++owner) {
    if (staging[owner].empty()) continue;
    HandoverTask* task = shard_.new_task();
    task->phase = HandoverTask::Phase::kRun;
    task->opcode = frame->opcode;
    task->origin = shard_.index();
    task->peer = owner_of_frame;
    task->frame = frame;
    task->items.swap(staging[owner]);  // the staging slot keeps the task's old capacity
    staging[owner].clear();
    shard_.send(owner, task);
  }
  shard_.engine().counters()[ShardStat::kHandedOver].add(items_handed_over);
}

void Dispatcher::finish_frame(Peer& peer, PendingFrame& frame) {
  --peer.frames_pending_;
  peer.items_pending_ -= frame.items_handed_over;
  if (peer.wants_replies()) {
    if (frame.opcode == protocol::Opcode::kAcquire) {
      protocol::encode_acquire_reply(peer.reply_buffer(), frame.request_id, frame.acquire_results,
                                     frame.framing);
      shard_.engine().counters().acquire_latency.observe(monotonic_now_ns() - frame.started_ns);
    } else if (frame.opcode == protocol::Opcode::kInspect) {
      protocol::encode_inspect_reply(peer.reply_buffer(), frame.request_id, frame.inspect,
                                     frame.inspect_log, frame.framing);
    } else {
      protocol::encode_reset_reply(peer.reply_buffer(), frame.request_id, frame.reset_results,
                                   frame.framing);
    }
  }
  peer.frame_finished();
}

void Dispatcher::handle_stats(Peer& peer, std::uint32_t request_id,
                              std::span<const std::uint8_t> body) {
  if (const auto parsed = protocol::parse_stats_request(body); !parsed) {
    return fail(peer, request_id, parsed.error, parsed.reason);
  }
  shard_.engine().append_stats_reply(peer.reply_buffer(), request_id, framing_);
}

void Dispatcher::handle_cluster(Peer& peer, std::uint32_t request_id,
                                std::span<const std::uint8_t> body) {
  if (const auto parsed = protocol::parse_cluster_request(body); !parsed) {
    return fail(peer, request_id, parsed.error, parsed.reason);
  }
  const ClusterView* view = shard_.engine().view();
  static const protocol::ClusterMapMessage kNoCluster;
  protocol::encode_cluster_reply(peer.reply_buffer(), request_id,
                                 view != nullptr ? view->message : kNoCluster, framing_);
}

void Dispatcher::handle_replicate(Peer& peer, std::uint32_t request_id,
                                  std::span<const std::uint8_t> body) {
  if (const auto parsed = protocol::parse_replicate_request(body, records_); !parsed) {
    return fail(peer, request_id, parsed.error, parsed.reason);
  }
  // Records come to the shard port of their owner, from the node that is their primary in this
  // node's view; anything else is refused (and counted): a sender with another view, or a
  // client posing as a node.
  protocol::ReplicateReply reply;
  const ClusterView* view = shard_.engine().view();
  const std::optional<cluster::NodeIndex> sender =
      view != nullptr ? view->map.ring().find(peer.peer_node()) : std::nullopt;
  const std::uint64_t now_ns = shard_.context().clock->now_ns();
  const cluster::Ring* ring = sender.has_value() ? &view->map.ring() : nullptr;
  // Each record's key is random to this node's caches: its partition's owners and its table
  // slot are both prefetched a few records ahead, so their misses overlap (docs/BENCHMARKS.md,
  // "Replication").
  shard_.engine().apply_prefetched(
      records_.size(),
      [&](std::size_t k) {
        const KeyHash hash{records_[k].fp_lo, records_[k].fp_hi};
        if (ring != nullptr) ring->prefetch(hash);
        return hash;
      },
      [&](std::size_t k) {
        const protocol::WireRecord& record = records_[k];
        const KeyHash hash{record.fp_lo, record.fp_hi};
        const bool from_primary = ring != nullptr && ring->primary_of(hash) == *sender &&
                                  shard_for(hash, shard_.context().shard_count) == shard_.index();
        if (!from_primary) {
          ++reply.refused;
          return;
        }
        log_.clear();
        for (std::uint32_t i = 0; i < record.log_count; ++i) log_.push_back(record.log_at(i));
        shard_.engine().apply_record(record, log_, now_ns);
        ++reply.applied;
      });
  shard_.engine().counters()[ShardStat::kReplicaApplied].add(reply.applied);
  shard_.engine().counters()[ShardStat::kReplicaRefused].add(reply.refused);
  protocol::encode_replicate_reply(peer.reply_buffer(), request_id, reply, framing_);
}

void Dispatcher::handle_pull(Peer& peer, std::uint32_t request_id, std::uint64_t epoch,
                             std::span<const std::uint8_t> body) {
  protocol::PullRequest request;
  if (const auto parsed = protocol::parse_pull_request(body, request); !parsed) {
    return fail(peer, request_id, parsed.error, parsed.reason);
  }
  const ClusterView* view = shard_.engine().view();
  if (peer.this_shard() == protocol::kPublicPort || view == nullptr) {
    return fail(peer, request_id, WireErrorCode::kMalformedFrame,
                view == nullptr ? "PULL on a node outside any cluster"
                                : "PULL goes to a shard's own port: each shard has its records");
  }
  // Only a member node may pull (and fence): it said HELLO as a node the map lists. (With a
  // token, only holders of the token can say HELLO at all.)
  if (peer.peer_node().empty() || view->map.find(peer.peer_node()) == nullptr) {
    return fail(peer, request_id, WireErrorCode::kMalformedFrame,
                "PULL is for the cluster's nodes: say HELLO as a member node first");
  }
  const std::uint32_t partitions = view->map.ring().partition_count();
  wanted_.assign(partitions, false);
  for (const std::uint16_t p : request.partitions) {
    if (p < partitions) wanted_[p] = true;
  }
  // Fencing first: no item of these partitions is decided here once the scan starts, on any
  // shard (the states are the node's, and each shard reads them before each decision).
  if (request.fence) {
    // A fence planned under a map older than this node's is taken only for the partitions
    // whose primary is still the puller here: a late pull of an old hand-over must not fence a
    // partition that has moved on (back to this node, say). The others are left as they are
    // (their records are sent all the same: a copy is harmless), and counted.
    // Nor does a fence older than the partition's own state: a newer map set it (this node
    // adopting that map may not have published its view yet), and in that map the partition
    // is not the puller's.
    const cluster::Ring& ring = view->map.ring();
    for (const std::uint16_t p : request.partitions) {
      if (p >= partitions) continue;
      if (epoch < view->states->epoch(p)) {
        shard_.engine().counters()[ShardStat::kStaleFences].add();
        continue;
      }
      if (epoch < view->epoch()) {
        const cluster::NodeIndex primary = ring.owners(p).primary;
        if (primary == cluster::kNoNode || ring.nodes()[primary] != peer.peer_node()) {
          shard_.engine().counters()[ShardStat::kStaleFences].add();
          continue;
        }
      }
      // Marked with the newer of the two epochs: a node that has not adopted the puller's map
      // yet must know the fence is that map's (Server::Impl::adopt_locked keeps it then).
      view->states->set(p, PartitionServing::kFenced, std::max(epoch, view->epoch()));
    }
  }
  shard_.engine().pull_page(peer.reply_buffer(), request_id, framing_, request, wanted_,
                            view->map.ring());
}

void Dispatcher::handle_reload(Peer& peer, std::uint32_t request_id,
                               std::span<const std::uint8_t> body) {
  if (const auto parsed = protocol::parse_reload_request(body); !parsed) {
    return fail(peer, request_id, parsed.error, parsed.reason);
  }
  run_admin(peer, protocol::Opcode::kReload, request_id, shard_.context().reload_cluster);
}

void Dispatcher::handle_drain(Peer& peer, std::uint32_t request_id,
                              std::span<const std::uint8_t> body) {
  std::string_view node;
  if (const auto parsed = protocol::parse_drain_request(body, node); !parsed) {
    return fail(peer, request_id, parsed.error, parsed.reason);
  }
  const ServerContext& context = shard_.context();
  if (node != context.node_id) {
    const ClusterView* view = shard_.engine().view();
    const std::string refusal = fmt::format("this is node '{}', not '{}'", context.node_id, node);
    protocol::encode_drain_reply(
        peer.reply_buffer(), request_id,
        protocol::ReloadReply{view != nullptr ? view->epoch() : 0, refusal}, framing_);
    return;
  }
  run_admin(peer, protocol::Opcode::kDrain, request_id, context.drain_node);
}

void Dispatcher::run_admin(
    Peer& peer, protocol::Opcode opcode, std::uint32_t request_id,
    const std::function<void(std::function<void(std::uint64_t, std::string)>)>& hook) {
  if (!hook) {  // a node without a Server around it (tests)
    finish_admin_now(peer, opcode, request_id, framing_, 0,
                     opcode == protocol::Opcode::kReload ? "not in static cluster mode"
                                                         : "not in etcd cluster mode");
    return;
  }
  ++peer.frames_pending_;
  const protocol::Framing framing = framing_;
  Shard* shard = &shard_;
  std::shared_ptr<Peer> keep = peer.shared_from_this();
  hook([shard, keep, opcode, request_id, framing](std::uint64_t epoch, std::string message) {
    boost::asio::post(shard->io(), [shard, keep, opcode, request_id, framing, epoch,
                                    message = std::move(message)] {
      shard->dispatcher().finish_admin(*keep, opcode, request_id, framing, epoch, message);
    });
  });
}

void Dispatcher::finish_admin_now(Peer& peer, protocol::Opcode opcode, std::uint32_t request_id,
                                  const protocol::Framing& framing, std::uint64_t epoch,
                                  std::string_view message) {
  const protocol::ReloadReply reply{epoch, message};
  if (opcode == protocol::Opcode::kReload) {
    protocol::encode_reload_reply(peer.reply_buffer(), request_id, reply, framing);
  } else {
    protocol::encode_drain_reply(peer.reply_buffer(), request_id, reply, framing);
  }
}

void Dispatcher::finish_admin(Peer& peer, protocol::Opcode opcode, std::uint32_t request_id,
                              const protocol::Framing& framing, std::uint64_t epoch,
                              std::string_view message) {
  --peer.frames_pending_;
  if (peer.wants_replies()) finish_admin_now(peer, opcode, request_id, framing, epoch, message);
  peer.frame_finished();
}

}  // namespace sluice::server
