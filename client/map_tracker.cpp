#include "client/map_tracker.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "client/async_batch.h"
#include "client/sync_call.h"
#include "net/host_port.h"

namespace sluice::client::detail {

namespace asio = boost::asio;

namespace {

// Router versions, unique in the process: a thread's cache entry can never match a router of
// another client, even one at the address of a client destroyed since.
std::atomic<std::uint64_t> router_versions{0};

// One router per thread, of the client it last served.
struct CachedRouter {
  std::uint64_t version = 0;  // 0: empty
  std::shared_ptr<const Router> router;
};
thread_local CachedRouter cached;

}  // namespace

Result<asio::ip::tcp::endpoint> resolve(asio::io_context& io, std::string_view address) {
  const std::optional<net::HostPort> parsed = net::parse_host_port(address);
  if (!parsed) {
    return Status(ErrorCode::kInvalidArgument,
                  "expected HOST:PORT, got \"" + std::string(address) + "\"");
  }
  boost::system::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(parsed->host, ec);
  if (!ec) return asio::ip::tcp::endpoint(ip, parsed->port);
  asio::ip::tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(parsed->host, std::to_string(parsed->port), ec);
  if (ec || endpoints.empty()) {
    return Status(ErrorCode::kConnectionFailed,
                  "cannot resolve " + std::string(address) + ": " + ec.message());
  }
  return endpoints.begin()->endpoint();
}

Result<std::optional<SeedMap>> seed_map(const protocol::ClusterMapMessage& message,
                                        std::string_view from) {
  // Epoch 0 and no nodes: a node outside any cluster.
  if (message.epoch == 0 && message.nodes.empty()) return std::optional<SeedMap>();
  Expected<cluster::ClusterMap> map = map_from_message(message);
  if (!map) {
    return Status(ErrorCode::kProtocolError,
                  "the cluster map from " + std::string(from) + " is not valid: " + map.error());
  }
  std::optional<std::size_t> self;
  if (message.self != protocol::kNotAMember) self = message.self;
  return std::optional<SeedMap>(SeedMap{std::move(map).value(), self});
}

MapTracker::MapTracker(asio::io_context& io, const ClientOptions& options,
                       ConnectionFactory& connections)
    : io_(io), options_(options), connections_(connections) {}

// ---- connecting ---------------------------------------------------------------------------

void MapTracker::set_seed(NodeConnection& public_port, const asio::ip::tcp::endpoint& endpoint,
                          const std::string& address) {
  const protocol::HelloReply hello = public_port.hello();
  {
    std::lock_guard lock(info_mu_);
    info_.endpoint = address;
    info_.node_id = hello.node_id;
    info_.shard_ports = hello.shard_ports;
    info_.max_frame = hello.max_frame;
    info_.max_key = hello.max_key;
    info_.max_batch = hello.max_batch;
  }
  control_.store(&public_port, std::memory_order_release);
  auto seed = std::make_unique<NodeLink>();
  seed->address = address;
  seed->publics.push_back(&public_port);
  if (!options_.shard_aware) {
    for (unsigned k = 1; k < options_.connections_per_shard; ++k) {
      seed->publics.push_back(
          &connections_.add_connection(address, endpoint, protocol::kPublicPort));
      seed->publics.back()->begin_connect();
    }
  }
  for (NodeConnection* c : seed->publics) c->set_health(seed->health.get());
  // The stand-in of set_no_seed() stays (routers still hold it), retired, behind the seed.
  if (!links_.empty()) links_.front()->retired = true;
  links_.insert(links_.begin(), std::move(seed));
  learn_hello(*links_.front());  // its shard connections start connecting
}

void MapTracker::set_no_seed(Status why) {
  no_seed_ = why;
  auto stand_in = std::make_unique<NodeLink>();
  stand_in->unreachable = std::move(why);
  stand_in->health.reset();
  links_.push_back(std::move(stand_in));
}

ServerInfo MapTracker::seed_info() const {
  std::lock_guard lock(info_mu_);
  return info_;
}

Result<NodeConnection*> MapTracker::control() const {
  NodeConnection* seed = control_.load(std::memory_order_acquire);
  if (seed == nullptr) return no_seed_;
  return seed;
}

void MapTracker::seed_answered(NodeConnection& public_port, const std::string& address,
                               std::optional<SeedMap> map) {
  set_seed(public_port, public_port.config().endpoint, address);
  if (map) {
    adopt(std::move(map->map), &public_port, map->self);
  } else {
    rebuild_router();
  }
}

NodeLink& MapTracker::add_link(std::string id, std::string address) {
  auto link = std::make_unique<NodeLink>();
  link->id = std::move(id);
  link->address = std::move(address);
  {
    std::lock_guard lock(info_mu_);
    link->limits = NodeLimits{info_.max_frame, info_.max_key, info_.max_batch, 0};
  }
  Result<asio::ip::tcp::endpoint> endpoint = resolve(io_, link->address);
  if (!endpoint.ok()) {
    link->unreachable = Status(ErrorCode::kConnectionFailed, endpoint.status().message());
  } else {
    // Shard-aware, the public port carries only the first HELLO; keys go to the shards.
    const unsigned publics = options_.shard_aware ? 1 : options_.connections_per_shard;
    for (unsigned k = 0; k < publics; ++k) {
      link->publics.push_back(
          &connections_.add_connection(link->address, *endpoint, protocol::kPublicPort));
      link->publics.back()->set_health(link->health.get());
      link->publics.back()->begin_connect();
    }
  }
  links_.push_back(std::move(link));
  return *links_.back();
}

bool MapTracker::learn_hello(NodeLink& link) {
  if (link.hello_known || link.publics.empty() || !link.publics.front()->ready()) return false;
  const protocol::HelloReply hello = link.publics.front()->hello();
  link.limits = NodeLimits{hello.max_frame, hello.max_key, hello.max_batch, hello.version};
  link.hello_known = true;
  if (options_.shard_aware && !hello.shard_ports.empty() && link.shards.empty()) {
    const asio::ip::address address = link.publics.front()->config().endpoint.address();
    const std::string host = address.to_string();
    for (std::size_t i = 0; i < hello.shard_ports.size(); ++i) {
      const asio::ip::tcp::endpoint endpoint(address, hello.shard_ports[i]);
      auto& group = link.shards.emplace_back();
      for (unsigned k = 0; k < options_.connections_per_shard; ++k) {
        group.push_back(
            &connections_.add_connection(net::format_host_port(host, hello.shard_ports[i]),
                                         endpoint, static_cast<std::uint16_t>(i)));
        group.back()->set_health(link.health.get());
        group.back()->begin_connect();  // all handshakes overlap
      }
    }
  }
  return true;
}

NodeLink* MapTracker::link_of(const NodeConnection& connection) {
  for (auto& link : links_) {
    for (const NodeConnection* c : link->publics) {
      if (c == &connection) return link.get();
    }
    for (const auto& shard : link->shards) {
      for (const NodeConnection* c : shard) {
        if (c == &connection) return link.get();
      }
    }
  }
  return nullptr;
}

NodeLink* MapTracker::link_with(const NodeHealth& health) {
  for (auto& link : links_) {
    if (link->health.get() == &health) return link.get();
  }
  return nullptr;
}

bool MapTracker::adopt(cluster::ClusterMap map, NodeConnection* via,
                       std::optional<std::size_t> self) {
  if (current_map_ && map.epoch() <= current_map_->epoch()) return false;
  // A node outside any cluster that has joined one: its link becomes the answering node's.
  if (via != nullptr && self && *self < map.nodes().size()) {
    if (NodeLink* from = link_of(*via); from != nullptr && from->id.empty()) {
      from->id = map.nodes()[*self].id;
      from->address = map.nodes()[*self].address;
    }
  }
  const cluster::Ring& ring = map.ring();
  std::vector<const NodeLink*> next(ring.nodes().size(), nullptr);
  for (std::size_t i = 0; i < next.size(); ++i) {
    const cluster::ClusterNode& node =
        map.nodes()[map.node_index(static_cast<cluster::NodeIndex>(i))];
    NodeLink* link = nullptr;
    for (auto& l : links_) {
      if (l->id == node.id && l->address == node.address) link = l.get();
    }
    if (link == nullptr) {
      link = &add_link(node.id, node.address);
    } else if (link->retired) {
      // Back in the ring: reconnect at once, as for a new node.
      link->retired = false;
      for (NodeConnection* c : link->publics) c->begin_connect();
      for (const auto& shard : link->shards) {
        for (NodeConnection* c : shard) c->begin_connect();
      }
    }
    next[i] = link;
  }
  // Nodes out of the ring get no new calls; their connections close once the calls in flight
  // on them are answered (a REDIRECT then sends an item on) or time out. The seed's public
  // connection stays: ping(), stats() and cluster() use it.
  for (auto& l : links_) {
    if (l->retired || std::find(next.begin(), next.end(), l.get()) != next.end()) continue;
    if (!l->publics.empty() && l->publics.front() == control_.load(std::memory_order_relaxed)) {
      continue;
    }
    l->retired = true;
    retired_pending_ = true;
  }
  ring_links_ = std::move(next);
  const std::uint64_t epoch = map.epoch();
  current_map_ = std::move(map);
  ringless_.store(current_map_->ring().nodes().empty(), std::memory_order_release);
  rebuild_router();
  map_epoch_.store(epoch, std::memory_order_relaxed);
  if (epoch_floor_.load(std::memory_order_relaxed) < epoch) {
    epoch_floor_.store(epoch, std::memory_order_relaxed);
  }
  if ((retired_pending_ || ringless()) && armed()) connections_.arm_timer();
  return true;
}

void MapTracker::arm() {
  rebuild_router();
  armed_.store(true, std::memory_order_release);
  asio::post(io_, [this] { catch_up(); });
}

void MapTracker::catch_up() {
  if (closed_) return;
  bool learned = false;
  for (auto& link : links_) learned = learn_hello(*link) || learned;
  if (learned) rebuild_router();
  const std::uint64_t missed = missed_epoch_.load(std::memory_order_relaxed);
  NodeConnection* seed = control_.load(std::memory_order_relaxed);
  if (seed != nullptr && missed > epoch_floor_.load(std::memory_order_relaxed)) {
    epoch_floor_.store(missed, std::memory_order_relaxed);
    request_refresh(*seed);
  }
}

// ---- routers ------------------------------------------------------------------------------

void MapTracker::rebuild_router() {
  NodeConnection* seed = control_.load(std::memory_order_relaxed);
  if (current_map_) {
    publish(Router::for_cluster(seed, *current_map_, ring_links_, options_.shard_aware));
  } else {
    publish(Router::for_node(seed, *links_.front(), options_.shard_aware));
  }
}

void MapTracker::publish(std::shared_ptr<const Router> next) {
  std::lock_guard lock(router_mu_);
  router_ = std::move(next);
  router_version_.store(router_versions.fetch_add(1, std::memory_order_relaxed) + 1,
                        std::memory_order_release);
}

const Router& MapTracker::cached_router() {
  // A version read before the router: a publish() in between leaves an older version beside
  // the newer router, and the next call takes the router again.
  const std::uint64_t version = router_version_.load(std::memory_order_acquire);
  if (cached.version != version || version == 0) {
    cached.router = current_router();
    cached.version = version;
  }
  return *cached.router;
}

// ---- following the map --------------------------------------------------------------------

void MapTracker::on_newer_epoch(NodeConnection& connection, std::uint64_t epoch) {
  if (!armed()) {
    std::uint64_t seen = missed_epoch_.load(std::memory_order_relaxed);
    while (epoch > seen && !missed_epoch_.compare_exchange_weak(seen, epoch)) {
    }
    return;
  }
  if (closed_ || epoch <= epoch_floor_.load(std::memory_order_relaxed)) return;
  epoch_floor_.store(epoch, std::memory_order_relaxed);  // once per epoch, not per reply
  request_refresh(connection);
}

void MapTracker::on_ready(NodeConnection& connection) {
  if (!armed() || closed_) return;
  NodeLink* link = link_of(connection);
  if (link != nullptr && link->publics.front() == &connection && learn_hello(*link)) {
    rebuild_router();
  }
}

void MapTracker::on_failed(NodeConnection& connection) {
  if (!armed() || closed_) return;
  if (const NodeLink* link = link_of(connection); link != nullptr && !link->retired) {
    refresh_from_other_than(*link);
  }
}

void MapTracker::request_refresh(NodeConnection& via) {
  if (closed_) return;
  if (refresh_via_ != nullptr) {  // one at a time: the next one goes when this one ends
    refresh_again_ = &via;
    return;
  }
  {
    std::lock_guard lock(map_mu_);
    refreshing_ = true;
  }
  refresh_via_ = &via;
  if (!start_call(via, refresh_sink_, encode_cluster).ok()) end_refresh();
}

void MapTracker::refresh_from_other_than(const NodeLink& down) {
  if (!current_map_) return;
  for (auto& other : links_) {
    if (other.get() == &down || other->retired || other->publics.empty() ||
        other->health->down.load(std::memory_order_relaxed) || !other->publics.front()->ready()) {
      continue;
    }
    request_refresh(*other->publics.front());
    return;
  }
}

void MapTracker::refresh_from_any() {
  if (!current_map_) return;
  NodeConnection* control = control_.load(std::memory_order_relaxed);
  if (control != nullptr && control->ready()) return request_refresh(*control);
  for (auto& link : links_) {
    if (link->publics.empty() || !link->publics.front()->ready()) continue;
    request_refresh(*link->publics.front());
    return;
  }
  // None is up. Without a route no call reconnects them (a ringless map fails every call before
  // it reaches a connection), so reconnect here, each at its own backoff: the next refresh
  // finds one ready.
  if (control != nullptr) control->connect_when_due();
  for (auto& link : links_) {
    if (!link->retired && !link->publics.empty()) link->publics.front()->connect_when_due();
  }
}

void MapTracker::on_refresh_reply(const protocol::Frame& reply) {
  protocol::ClusterMapMessage message;
  if (reply.header.opcode != protocol::Opcode::kCluster ||
      !protocol::parse_cluster_reply(reply.body, message)) {
    return end_refresh();
  }
  if (message.epoch != 0 || !message.nodes.empty()) {
    Expected<cluster::ClusterMap> map = map_from_message(message);
    if (!map) return end_refresh();
    std::optional<std::size_t> self;
    if (message.self != protocol::kNotAMember) self = message.self;
    if (adopt(std::move(map).value(), refresh_via_, self)) {
      map_refreshes_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  end_refresh();
}

void MapTracker::end_refresh() {
  refresh_via_ = nullptr;
  NodeConnection* again = std::exchange(refresh_again_, nullptr);
  {
    std::lock_guard lock(map_mu_);
    refreshing_ = false;
    ++map_events_;
  }
  map_cv_.notify_all();
  const std::uint64_t have = map_epoch_.load(std::memory_order_relaxed);
  if (again != nullptr && !closed_ && epoch_floor_.load(std::memory_order_relaxed) > have) {
    // A newer epoch was seen while this refresh was under way and it did not bring it.
    request_refresh(*again);
  } else {
    // The next reply above the map in force starts a refresh again (this one may have failed).
    epoch_floor_.store(have, std::memory_order_relaxed);
  }
  waking_.swap(map_waiters_);
  for (AsyncBatch* batch : waking_) batch->on_map();  // may wait again: map_waiters_
  waking_.clear();
}

bool MapTracker::wait_for_map(AsyncBatch& batch) {
  if (closed_ || refresh_via_ == nullptr) return false;
  map_waiters_.push_back(&batch);
  return true;
}

void MapTracker::wait_for_epoch(std::uint64_t epoch, std::uint64_t deadline_ns) {
  std::unique_lock lock(map_mu_);
  const std::uint64_t events = map_events_;
  const std::chrono::steady_clock::time_point until{std::chrono::nanoseconds(deadline_ns)};
  map_cv_.wait_until(lock, until, [&] {
    return map_epoch_.load(std::memory_order_relaxed) >= epoch || !refreshing_ ||
           map_events_ != events;
  });
}

bool MapTracker::close_retired() {
  if (!retired_pending_ || !armed() || closed_) return false;
  bool all_closed = true;
  for (auto& link : links_) {
    if (!link->retired) continue;
    for (NodeConnection* c : link->publics) all_closed = c->close_if_idle() && all_closed;
    for (const auto& shard : link->shards) {
      for (NodeConnection* c : shard) all_closed = c->close_if_idle() && all_closed;
    }
  }
  retired_pending_ = !all_closed;
  return !all_closed;
}

void MapTracker::close() { closed_ = true; }

void MapTracker::end_waits() {
  {
    std::lock_guard lock(map_mu_);
    ++map_events_;
  }
  map_cv_.notify_all();
}

}  // namespace sluice::client::detail
