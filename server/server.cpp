#include "server/server.h"
#include "log/log.h"

#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>
#include <pthread.h>
#include <sys/resource.h>
#include <algorithm>
#include <atomic>
#include <boost/asio/socket_base.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "cluster/cluster_map.h"
#include "cluster/etcd_members.h"
#include "cluster/lease_fence.h"
#include "cluster/lost_members.h"
#include "cluster/membership_file.h"
#include "cluster/node.h"
#include "core/utc_time.h"
#include "net/host_port.h"
#include "server/cluster_view.h"
#include "server/coordinator.h"
#include "server/etcd_membership.h"
#include "server/http_endpoint.h"
#include "server/shard.h"

namespace sluice::server {

namespace {

// HELLO numbers shards with 16 bits and reserves 0xFFFF for the public port.
constexpr unsigned kMaxShards = 1024;
constexpr std::chrono::milliseconds kMaxIdleTimeout{366ll * 24 * 3600 * 1000};

// Binds `guard` (SO_REUSEADDR, not SO_REUSEPORT, not listening) to the address and returns the
// port; throws std::system_error (address in use when another socket listens there).
std::uint16_t bind_guard(boost::asio::ip::tcp::acceptor& guard,
                         const boost::asio::ip::address& address, std::uint16_t port) {
  const boost::asio::ip::tcp::endpoint endpoint(address, port);
  boost::system::error_code ec;
  guard.open(endpoint.protocol(), ec);
  if (!ec) guard.set_option(boost::asio::socket_base::reuse_address(true), ec);
  if (!ec) guard.bind(endpoint, ec);
  std::uint16_t bound = 0;
  if (!ec) bound = guard.local_endpoint(ec).port();
  if (ec) {
    // Nodes on one host collide through their shard ports more often than through their
    // public ones: say how the ports are laid out.
    const std::string hint = ec == boost::asio::error::address_in_use
                                 ? " (a node takes its port and port + 1 ... port + shards: "
                                   "space nodes on one host by shards + 1)"
                                 : "";
    throw std::system_error(
        std::error_code(ec.value(), std::system_category()),
        "cannot bind " + net::format_host_port(address.to_string(), port) + hint);
  }
  return bound;
}

// Descriptors the node holds besides its connections: stdio (3); sluiced's signal loop (epoll,
// eventfd, timerfd and a self-pipe: 6 with room); per shard its epoll, eventfd, timerfd, two
// listeners and the spare kept for refusing under EMFILE (6); and a margin for refused
// connections still being answered and the port guard (16).
constexpr std::uint64_t kFixedDescriptors = 3 + 6 + 16;
constexpr std::uint64_t kDescriptorsPerShard = 6;

// Raises the soft RLIMIT_NOFILE to the hard one; when even that cannot hold max_connections
// plus what the node needs, lowers max_connections to fit and says so on stderr.
void fit_connections_to_descriptors(ServerConfig& config, unsigned shards) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY) return;
  const std::uint64_t needed = kFixedDescriptors + kDescriptorsPerShard * shards;
  const std::uint64_t available = limit.rlim_cur > needed ? limit.rlim_cur - needed : 0;
  if (available >= config.max_connections) return;
  log::warning("node", fmt::format("open-file limit {} (hard {}) is below --max-connections {} "
                                   "plus {} descriptors the node needs: serving at most {} "
                                   "connections (raise ulimit -n)",
                                   limit.rlim_cur, limit.rlim_max, config.max_connections, needed,
                                   available));
  config.max_connections = static_cast<std::uint32_t>(available);
}

// What the membership agent needs from the node's configuration; throws std::invalid_argument
// for a bad --etcd, --cluster-name, --lease-ttl or address.
MembershipConfig etcd_membership_config(const ServerConfig& config, std::uint16_t public_port) {
  MembershipConfig out;
  auto endpoints = etcd::parse_endpoints(config.etcd);
  if (!endpoints) throw std::invalid_argument("--etcd: " + endpoints.error());
  out.endpoints = std::move(*endpoints);
  if (const std::string bad = cluster::check_cluster_name(config.cluster_name); !bad.empty()) {
    throw std::invalid_argument("--cluster-name: " + bad);
  }
  out.cluster = config.cluster_name;
  if (const std::string bad = cluster::check_node_id(config.node_id); !bad.empty()) {
    throw std::invalid_argument("--node-id: " + bad);
  }
  out.node_id = config.node_id;
  out.source_address = config.source_address;
  if (config.etcd_lease_ttl < std::chrono::seconds(2)) {
    throw std::invalid_argument("--lease-ttl must be at least 2 s (etcd's minimum)");
  }
  out.ttl = config.etcd_lease_ttl;
  if (config.fence_margin >= config.etcd_lease_ttl / 2) {
    throw std::invalid_argument("the lease margin must be below half the lease TTL");
  }
  out.margin = config.fence_margin;
  std::string address = config.advertise;
  if (address.empty()) {
    boost::system::error_code ec;
    const auto bind = boost::asio::ip::make_address(config.bind, ec);
    if (ec || bind.is_unspecified()) {
      throw std::invalid_argument("--bind " + config.bind +
                                  " is no address other nodes can reach: give --advertise");
    }
    address = net::format_host_port(config.bind, public_port);
  }
  if (const auto parsed = cluster::parse_node_address(address); !parsed) {
    throw std::invalid_argument("--advertise: " + parsed.error());
  }
  out.address = address;
  return out;
}

}  // namespace

struct Server::Impl {
  ~Impl() {
    if (coordinator != nullptr) {
      coordinator->stop();  // its thread joined (Server::wait() did it already)
      coordinator->shut_down_io();
    }
    membership.reset();
  }

  ServerContext context;
  std::vector<std::thread> threads;
  std::atomic<bool> started{false};
  std::atomic<bool> stop_requested{false};
  std::mutex wait_mutex;

  // Static cluster mode. reload_mutex serializes loads; the rest is written under it.
  std::mutex reload_mutex;
  std::string cluster_file;
  std::shared_ptr<PartitionStates> partition_states;
  std::shared_ptr<const ClusterView> view;  // the one in force; null outside a cluster
  std::atomic<std::uint64_t> epoch{0};
  // etcd mode. The agent's coroutines wait on the coordinator's io_context and refer to it, and
  // its timers and sockets are that io_context's objects: ~Impl ends the coroutines first (the
  // io_context's shutdown), then destroys the agent, then the coordinator and its io_context.
  std::unique_ptr<EtcdMembership> membership;
  std::unique_ptr<Coordinator> coordinator;  // created with the first map, never destroyed early
  // The same pointer, for the shard threads (RELOAD) and stop(), which must not take
  // reload_mutex: a reload holding it waits for every shard thread (publish).
  std::atomic<Coordinator*> coordinator_live{nullptr};

  std::string reload_locked();
  // Adopts `map` (checked by the caller) as the one in force: marks what must be pulled,
  // publishes it, starts the pulls. REQUIRES reload_mutex.
  void adopt_locked(const cluster::ClusterMap& map);
  // Every node id seen in a map adopted so far, with its last address (under reload_mutex).
  std::map<std::string, std::string> known_nodes;
  // etcd mode: the members that left the map without draining (under reload_mutex).
  cluster::LostMembers lost_members;
  // etcd mode: the membership agent's maps, on the coordinator's thread.
  void adopt_from_etcd(const cluster::ClusterMap& map);
  // etcd mode, joining: fetches the partitions this node will own once active
  // (Coordinator::warm_up), then done(records). On the coordinator's thread.
  void warm_up(std::function<void(std::size_t)> done);
  // etcd mode: closes the fence and revokes the lease, waiting at most about one etcd call.
  void leave_etcd();
  // Gives every shard `next`: directly before the threads run, else by a post, waiting until
  // each has it.
  void publish(std::shared_ptr<const ClusterView> next);

  // The view in force for observers (cluster_status()), under its own small lock: a reload
  // holds reload_mutex while it waits for the shards, and a scrape must not wait for that.
  mutable std::mutex observed_mutex;
  std::shared_ptr<const ClusterView> observed_view;
  // /metrics, /healthz, /readyz (ServerConfig::http_listen). Last: destroyed first.
  std::unique_ptr<HttpEndpoint> http;
};

namespace {

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) {
    if (!out.empty()) out += '\n';
    out += line;
  }
  return out;
}

// The member sets of two maps, as ids with addresses, for "did the members change".
bool same_members(const cluster::ClusterMap& a, const cluster::ClusterMap& b) {
  return a.nodes() == b.nodes() && a.ring_params() == b.ring_params();
}

}  // namespace

std::string Server::Impl::reload_locked() {
  if (cluster_file.empty()) return "not in static cluster mode (no --cluster file)";
  auto file = cluster::read_membership_file(cluster_file);
  if (!file) return join_lines(file.error());
  std::vector<cluster::ClusterNode> nodes;
  for (const cluster::StaticMember& member : file->members) {
    nodes.push_back({member.id, member.address.text(), cluster::NodeState::kActive});
  }
  auto map = cluster::ClusterMap::make(file->epoch, std::move(nodes));
  if (!map) return fmt::format("{}: {}", cluster_file, map.error());
  const std::string& self = context.node_id;
  // At start-up a file without this node is a mistake; later it removes the node, which then
  // serves no key (it redirects every one) rather than keep counting by a map nobody else uses.
  if (map->find(self) == nullptr && view == nullptr) {
    return fmt::format("{}: this node's id '{}' (--node-id) is not listed", cluster_file, self);
  }
  if (view != nullptr) {
    const cluster::ClusterMap& current = view->map;
    if (map->epoch() < current.epoch()) {
      return fmt::format("{}: epoch {} is below the epoch in force, {}", cluster_file, map->epoch(),
                         current.epoch());
    }
    if (map->epoch() == current.epoch()) {
      if (same_members(*map, current)) return "";  // nothing changed
      return fmt::format(
          "{}: the members changed but the epoch is still {}: raise the `epoch N` line",
          cluster_file, current.epoch());
    }
  }
  adopt_locked(*map);
  return "";
}

void Server::Impl::adopt_locked(const cluster::ClusterMap& map) {
  const std::string& self = context.node_id;
  if (partition_states == nullptr ||
      partition_states->size() != map.ring_params().partition_count()) {
    partition_states = std::make_shared<PartitionStates>(map.ring_params().partition_count());
  }
  // The partitions this node is to serve but must fetch first are `pulling` before any shard
  // decides by the new map (docs/ARCHITECTURE.md, "Moving partitions").
  // Every node this process has seen in a map, but for those that drained away: after every
  // lease expired, one of them that is back but not registered yet may hold what nobody else
  // does.
  for (const cluster::ClusterNode& node : map.nodes()) {
    if (node.state == cluster::NodeState::kDraining) {
      known_nodes.erase(node.id);
    } else {
      known_nodes[node.id] = node.address;
    }
  }
  std::vector<PullPlan::Source> absent;
  for (const auto& [id, address] : known_nodes) {
    if (map.find(id) == nullptr) absent.push_back({id, address, true});
  }
  std::vector<PullPlan> plans =
      plan_pulls(view != nullptr ? &view->map : nullptr, map, self, absent);
  std::vector<bool> planned(map.ring().partition_count(), false);
  for (const PullPlan& plan : plans) {
    if (!plan.primary || plan.serving) continue;
    for (const std::uint32_t p : plan.partitions) {
      partition_states->set(p, PartitionServing::kPulling, map.epoch());
      planned[p] = true;
    }
  }
  // A partition this node stays primary of, with nothing to pull by the maps it saw, that a
  // puller has fenced under a map this node never adopted (its watch skipped it): by the maps it
  // went from and to, it owns the records, so nothing would ever serve the partition again.
  // Gathered, fenced, from every other member first, as after a lost lease. A fence set under
  // this map or a newer one stands (a newer primary's); a partition left pulling under an older
  // map is served when that pull ends (PartitionStates::serve_pulled).
  if (const auto me = map.ring().find(self)) {
    PullPlan stuck;
    stuck.gather = true;
    for (const cluster::ClusterNode& node : map.nodes()) {
      if (node.id != self && node.state != cluster::NodeState::kDown) {
        stuck.sources.push_back({node.id, node.address, true});
      }
    }
    for (std::uint32_t p = 0; p < map.ring().partition_count(); ++p) {
      if (planned[p] || map.ring().owners(p).primary != *me) continue;
      if (partition_states->get(p) != PartitionServing::kFenced) continue;
      if (partition_states->epoch(p) >= map.epoch()) continue;
      partition_states->set(p, PartitionServing::kPulling, map.epoch());
      stuck.partitions.push_back(p);
    }
    if (!stuck.partitions.empty()) {
      log::info("cluster", fmt::format("epoch {}: {} partitions of this node were fenced under a "
                                       "map it never adopted: gathering them again before "
                                       "serving them",
                                       map.epoch(), stuck.partitions.size()));
      if (stuck.sources.empty()) {
        // Alone in the map: what is here is all there is.
        for (const std::uint32_t p : stuck.partitions) {
          partition_states->set(p, PartitionServing::kServing, map.epoch());
        }
      } else {
        while (stuck.partitions.size() > kMaxPullPartitions) {
          PullPlan part = stuck;
          part.partitions.assign(stuck.partitions.end() - kMaxPullPartitions,
                                 stuck.partitions.end());
          stuck.partitions.resize(stuck.partitions.size() - kMaxPullPartitions);
          plans.push_back(std::move(part));
        }
        plans.push_back(std::move(stuck));
      }
    }
  }
  auto next = make_cluster_view(map, self, partition_states, lost_members.lost());
  publish(next);
  if (coordinator == nullptr) {
    coordinator = std::make_unique<Coordinator>(context);
    coordinator_live.store(coordinator.get());
  }
  coordinator->start(std::move(next), std::move(plans));
}

void Server::Impl::adopt_from_etcd(const cluster::ClusterMap& map) {
  std::lock_guard<std::mutex> lock(reload_mutex);
  if (stop_requested.load()) return;
  const cluster::ClusterMap& current = view->map;  // never null in etcd mode
  // Epochs only grow; the same member set under a later revision changes nothing.
  if (map.epoch() <= current.epoch() || same_members(map, current)) return;
  const cluster::ClusterNode* self = map.find(context.node_id);
  log::info("etcd",
            fmt::format("epoch {}: {} members, {} active; this node {}", map.epoch(),
                        map.nodes().size(), map.ring().nodes().size(),
                        self != nullptr ? cluster::node_state_name(self->state) : "absent"));
  for (const std::string& id : lost_members.note(current, map)) {
    log::warning("etcd", fmt::format("epoch {}: {} left the map without draining (lease expired "
                                     "or record deleted): a lost member",
                                     map.epoch(), id));
  }
  adopt_locked(map);
}

void Server::Impl::warm_up(std::function<void(std::size_t)> done) {
  std::shared_ptr<const ClusterView> current;
  std::vector<PullPlan> plans;
  {
    std::lock_guard<std::mutex> lock(reload_mutex);
    current = view;
    // Towards the map in which the joining nodes (this one among them) are active: what this
    // node will be primary or replica of there, from those who hold it now.
    if (current != nullptr && current->joined) {
      plans = plan_pulls(&current->map, *current->joined, context.node_id);
      // Gathers are planned again at the activation, whose map says who is there.
      std::erase_if(plans, [](const PullPlan& plan) { return plan.gather; });
    }
  }
  if (current == nullptr || coordinator == nullptr) return done(0);
  coordinator->warm_up(std::move(current), std::move(plans), std::move(done));
}

void Server::Impl::leave_etcd() {
  Coordinator* live = coordinator_live.load();
  if (membership == nullptr || live == nullptr) return;
  auto left = std::make_shared<std::promise<void>>();
  auto future = left->get_future();
  EtcdMembership* agent = membership.get();
  if (!live->run([agent, left] { agent->stop([left] { left->set_value(); }); })) return;
  future.wait_for(std::chrono::seconds(2));
}

void Server::Impl::publish(std::shared_ptr<const ClusterView> next) {
  view = next;
  {
    std::lock_guard<std::mutex> lock(observed_mutex);
    observed_view = next;
  }
  epoch.store(next->epoch());
  if (threads.empty()) {
    for (auto& shard : context.shards) shard->set_view(next);
    return;
  }
  // Shared with the posted handlers: a stopping server may never run them, and then this
  // returns without waiting for them (the state outlives it).
  struct Pending {
    std::mutex mutex;
    std::condition_variable done;
    std::size_t left = 0;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = context.shards.size();
  for (auto& shard : context.shards) {
    Shard* s = shard.get();
    boost::asio::post(s->io(), [s, next, pending] {
      s->set_view(next);
      std::lock_guard<std::mutex> lock(pending->mutex);
      if (--pending->left == 0) pending->done.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(pending->mutex);
  while (pending->left != 0 && !stop_requested.load()) {
    pending->done.wait_for(lock, std::chrono::milliseconds(50));
  }
}

Server::Server(ServerConfig config) : impl_(std::make_unique<Impl>()) {
  ServerContext& context = impl_->context;
  context.config = std::move(config);
  unsigned shards = context.config.shards;
  if (shards == 0) shards = std::max(1u, std::thread::hardware_concurrency());
  if (shards > kMaxShards) {
    throw std::invalid_argument(fmt::format("{} shards requested, at most {}", shards, kMaxShards));
  }
  if (context.config.max_frame == 0 || context.config.max_key == 0 ||
      context.config.max_batch == 0) {
    throw std::invalid_argument("max_frame, max_key and max_batch must be at least 1");
  }
  if (context.config.sliding_log_cap == 0 || context.config.sliding_log_cap > kMaxSlidingLogCap) {
    throw std::invalid_argument(fmt::format("sliding_log_cap must be 1..{}", kMaxSlidingLogCap));
  }
  if (context.config.replication_window_bytes < kMinReplicationWindow ||
      context.config.replication_window_bytes > kMaxReplicationWindow) {
    throw std::invalid_argument(fmt::format("replication_window_bytes must be {}..{}",
                                            kMinReplicationWindow, kMaxReplicationWindow));
  }
  if (context.config.replication_stall_after.count() <= 0) {
    throw std::invalid_argument("replication_stall_after must be at least 1 ms");
  }
  // 0 would pause every reader for good: nothing is queued, so no write would wake it.
  if (context.config.max_queued_output == 0) {
    throw std::invalid_argument("max_queued_output must be at least 1");
  }
  if (context.config.max_pending_items == 0) {
    throw std::invalid_argument("max_pending_items must be at least 1");
  }
  // One connection at its limits: a whole largest frame being received, its full output.
  const std::size_t one_connection =
      protocol::kHeaderSize + context.config.max_frame + context.config.max_queued_output;
  const std::size_t least_budget = std::size_t{shards} * one_connection;
  if (context.config.max_buffer_memory == 0) {
    // Rounded up to whole MiB, so that the start-up line shows a readable figure.
    constexpr std::size_t kMiB = std::size_t{1} << 20;
    const std::size_t wanted =
        std::max(context.config.max_memory / 4, std::size_t{4} * least_budget);
    context.config.max_buffer_memory = (wanted + kMiB - 1) / kMiB * kMiB;
  } else if (context.config.max_buffer_memory < least_budget) {
    throw std::invalid_argument(fmt::format(
        "max_buffer_memory {} is below what one connection at its limits needs on each of {} "
        "shards ({} bytes: max_frame + max_queued_output); raise it or lower those",
        context.config.max_buffer_memory, shards, least_budget));
  }
  // Longer idle timeouts would overflow steady_clock arithmetic; nobody needs more than this.
  context.config.idle_timeout = std::min(context.config.idle_timeout, kMaxIdleTimeout);
  fit_connections_to_descriptors(context.config, shards);
  context.shard_count = shards;
  context.clock = context.config.clock != nullptr ? context.config.clock : &SystemClock::instance();
  context.shards.reserve(shards);
  for (unsigned i = 0; i < shards; ++i)
    context.shards.push_back(std::make_unique<Shard>(context, i));
}

Server::~Server() {
  stop();
  wait();
}

void Server::start() {
  if (impl_->started.exchange(true)) throw std::logic_error("Server::start() called twice");
  ServerContext& context = impl_->context;
  const ServerConfig& config = context.config;

  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(config.bind, ec);
  if (ec) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            fmt::format("bad bind address '{}'", config.bind));
  }

  // The public port: every shard listens on it through SO_REUSEPORT and the kernel spreads
  // incoming connections over them. SO_REUSEPORT would also let us join another process's
  // listeners, so a guard socket without it binds the port first (picking it when 0): binding
  // fails if anyone listens there. It has SO_REUSEADDR and never listens, so our shards can
  // bind and listen beside it, and other servers' guards fail against our listeners.
  boost::asio::ip::tcp::acceptor guard(context.shards[0]->io());
  context.public_port = bind_guard(guard, address, config.port);
  for (auto& shard : context.shards) shard->listen_public(address, context.public_port);
  guard.close(ec);

  context.shard_ports.resize(context.shard_count);
  for (unsigned i = 0; i < context.shard_count; ++i) {
    unsigned wanted = 0;
    if (config.ephemeral_shard_ports) {
      wanted = 0;
    } else if (config.shard_base_port != 0) {
      wanted = config.shard_base_port + i;
    } else if (config.port != 0) {
      wanted = config.port + 1u + i;
    }
    if (wanted > 65535) {
      throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                              fmt::format("shard {} would listen on port {}", i, wanted));
    }
    context.shard_ports[i] =
        context.shards[i]->listen_shard(address, static_cast<std::uint16_t>(wanted));
  }

  context.node_id = config.node_id.empty() ? net::format_host_port(config.bind, context.public_port)
                                           : config.node_id;

  // RELOAD from a connection: on the coordinator's thread, which may block on the shards.
  context.reload_cluster = [impl =
                                impl_.get()](std::function<void(std::uint64_t, std::string)> done) {
    Coordinator* coordinator = impl->coordinator_live.load();
    if (coordinator == nullptr) {
      done(impl->epoch.load(), "not in static cluster mode (no --cluster file)");
      return;
    }
    const bool queued = coordinator->run([impl, done] {
      std::string refused;
      {
        std::lock_guard<std::mutex> inner(impl->reload_mutex);
        refused = impl->reload_locked();
      }
      done(impl->epoch.load(), std::move(refused));
    });
    if (!queued) done(impl->epoch.load(), "the node is shutting down");
  };
  if (!config.cluster_file.empty()) {
    std::lock_guard<std::mutex> lock(impl_->reload_mutex);
    impl_->cluster_file = config.cluster_file;
    if (const std::string refused = impl_->reload_locked(); !refused.empty()) {
      throw std::runtime_error(refused);
    }
  }
  std::optional<MembershipConfig> membership;
  if (!config.etcd.empty()) {
    membership = etcd_membership_config(config, context.public_port);
    membership->shard_ports = context.shard_ports;
    // Until the first member set is read, nobody owns anything; until the lease is granted,
    // the node decides nothing as primary.
    context.fenced = true;
    context.fence_deadline_ns.store(0);
    std::lock_guard<std::mutex> lock(impl_->reload_mutex);
    impl_->adopt_locked(cluster::ClusterMap());
  }

  if (!config.http_listen.empty()) {
    impl_->http = std::make_unique<HttpEndpoint>(*this);
    impl_->http->start(config.http_listen);
  }

  for (auto& shard : context.shards) shard->spawn();
  impl_->threads.reserve(context.shard_count);
  for (auto& shard : context.shards) {
    Shard* s = shard.get();
    impl_->threads.emplace_back([s] {
      const std::string name = fmt::format("sluiced-{}", s->index());
      pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
      s->run();
    });
  }
  if (membership) {
    Impl* impl = impl_.get();
    impl->membership = std::make_unique<EtcdMembership>(
        impl->coordinator->io(), std::move(*membership),
        [impl](const cluster::ClusterMap& map) { impl->adopt_from_etcd(map); },
        [impl](std::function<void(std::size_t)> done) { impl->warm_up(std::move(done)); },
        context.fence_deadline_ns, context.fence_reason, context.etcd_endpoint);
    EtcdMembership* agent = impl->membership.get();
    impl->coordinator->run([agent] { agent->start(); });
    context.drain_node = [impl, agent](std::function<void(std::uint64_t, std::string)> done) {
      const bool queued =
          impl->coordinator->run([impl, agent, done] { done(impl->epoch.load(), agent->drain()); });
      if (!queued) done(impl->epoch.load(), "the node is shutting down");
    };
  }
}

void Server::stop() {
  if (!impl_->started.load() || impl_->stop_requested.exchange(true)) return;
  if (impl_->http) impl_->http->stop();
  impl_->leave_etcd();
  // Not under reload_mutex: a reload on the coordinator's thread may be waiting for it.
  if (Coordinator* coordinator = impl_->coordinator_live.load()) coordinator->stop();
  for (auto& shard : impl_->context.shards) shard->request_stop(/*graceful=*/true);
}

void Server::stop_now() {
  if (!impl_->started.load()) return;
  if (impl_->http) impl_->http->stop();
  impl_->context.fence_deadline_ns.store(0);
  // Not under reload_mutex: a reload on the coordinator's thread may be waiting for it.
  if (Coordinator* coordinator = impl_->coordinator_live.load()) coordinator->stop();
  impl_->stop_requested.store(true);
  for (auto& shard : impl_->context.shards) shard->request_stop(/*graceful=*/false);
}

void Server::wait() {
  std::lock_guard<std::mutex> lock(impl_->wait_mutex);
  for (std::thread& thread : impl_->threads) {
    if (thread.joinable()) thread.join();
  }
  if (impl_->http) impl_->http->join();
}

std::string Server::reload_cluster() {
  std::lock_guard<std::mutex> lock(impl_->reload_mutex);
  if (impl_->cluster_file.empty()) return "not in static cluster mode (no --cluster file)";
  return impl_->reload_locked();
}

std::string Server::load_cluster(const std::string& path) {
  std::lock_guard<std::mutex> lock(impl_->reload_mutex);
  impl_->cluster_file = path;
  return impl_->reload_locked();
}

std::uint64_t Server::cluster_epoch() const { return impl_->epoch.load(); }

std::optional<Server::TEST_Record> Server::TEST_record(const KeyHash& key) const {
  const ServerContext& context = impl_->context;
  Shard* shard = context.shards[shard_for(key, context.shard_count)].get();
  std::promise<std::optional<TEST_Record>> promise;
  auto future = promise.get_future();
  boost::asio::post(shard->io(), [&] {
    RecordImage image;
    TEST_Record record;
    if (!shard->engine().export_record(key, context.clock->now_ns(), image, record.log)) {
      promise.set_value(std::nullopt);
      return;
    }
    record.algorithm = image.algorithm;
    record.state_a = image.state.a;
    record.state_b = image.state.b;
    promise.set_value(std::move(record));
  });
  return future.get();
}

std::string Server::TEST_adopt_map(const cluster::ClusterMap& map) {
  std::lock_guard<std::mutex> lock(impl_->reload_mutex);
  if (impl_->view != nullptr && map.epoch() <= impl_->view->epoch()) {
    return fmt::format("epoch {} is not above the epoch in force, {}", map.epoch(),
                       impl_->view->epoch());
  }
  impl_->adopt_locked(map);
  return "";
}

std::optional<std::size_t> Server::TEST_warm_up(std::chrono::milliseconds limit) {
  auto records = std::make_shared<std::promise<std::size_t>>();
  std::future<std::size_t> done = records->get_future();
  impl_->warm_up([records](std::size_t n) { records->set_value(n); });
  if (done.wait_for(limit) != std::future_status::ready) return std::nullopt;
  return done.get();
}

std::size_t Server::TEST_pulls_running() const {
  std::lock_guard<std::mutex> lock(impl_->reload_mutex);
  return impl_->coordinator ? impl_->coordinator->running() : 0;
}

bool Server::cluster_member() const {
  std::lock_guard<std::mutex> lock(impl_->reload_mutex);
  return impl_->view != nullptr && impl_->view->map.find(impl_->context.node_id) != nullptr;
}

std::uint16_t Server::port() const { return impl_->context.public_port; }

std::vector<std::uint16_t> Server::shard_ports() const { return impl_->context.shard_ports; }

unsigned Server::shard_count() const { return impl_->context.shard_count; }

std::size_t Server::max_buffer_memory() const { return impl_->context.config.max_buffer_memory; }

const ServerConfig& Server::config() const { return impl_->context.config; }

const ShardCounters& Server::shard_counters(unsigned shard) const {
  return impl_->context.engines.at(shard)->counters();
}

std::uint16_t Server::http_port() const { return impl_->http ? impl_->http->port() : 0; }

ClusterStatus Server::cluster_status() const {
  const ServerContext& context = impl_->context;
  std::shared_ptr<const ClusterView> view;
  {
    std::lock_guard<std::mutex> lock(impl_->observed_mutex);
    view = impl_->observed_view;
  }
  ClusterStatus status;
  if (view == nullptr) return status;  // a single node: no map, no fence
  status.mode = context.fenced ? ClusterStatus::Mode::kEtcd : ClusterStatus::Mode::kStatic;
  status.epoch = view->epoch();
  for (const cluster::ClusterNode& node : view->map.nodes()) {
    const auto state = static_cast<std::size_t>(node.state);
    if (state >= 1 && state <= status.members.size()) ++status.members[state - 1];
  }
  if (const cluster::ClusterNode* self = view->map.find(context.node_id)) {
    status.self_state = static_cast<std::uint8_t>(self->state);
  }
  if (context.fenced) {
    status.fence_reason = context.fence_reason.load(std::memory_order_relaxed);
    status.fenced = status.fence_reason != 0;
  }
  const auto stall_ms = static_cast<std::uint64_t>(context.config.replication_stall_after.count());
  for (const ReplicaLag& peer : context.engines.at(0)->node_lag()) {
    status.peers.push_back(ClusterStatus::Peer{
        .node = peer.node,
        .records = peer.queued + peer.unacked,
        .lag_ms = peer.oldest_ms,
        .bytes = peer.bytes,
        .dropped = peer.dropped,
        .up = peer.up,
        .stalled = peer.oldest_ms >= stall_ms,
    });
  }
  return status;
}

std::string ClusterStatus::not_ready_reason() const {
  if (mode == Mode::kStandalone) return "";
  if (fenced) {
    return fmt::format("fenced: serving nothing as primary ({})",
                       cluster::fence_reason_text(static_cast<cluster::FenceReason>(fence_reason)));
  }
  switch (static_cast<cluster::NodeState>(self_state)) {
    case cluster::NodeState::kActive:
      return "";
    case cluster::NodeState::kJoining:
      return "joining: fetching the partitions it will own, not serving yet";
    case cluster::NodeState::kDraining:
      return "draining: handing its partitions over, serving nothing as primary";
    case cluster::NodeState::kDown:
      return "down in the cluster map";
  }
  return mode == Mode::kEtcd ? "not in the member map yet (registering with etcd)"
                             : "not in the cluster map: serving no key";
}

std::size_t Server::TEST_peak_queued_output() const {
  std::size_t peak = 0;
  for (const auto& shard : impl_->context.shards)
    peak = std::max(peak, shard->TEST_peak_queued_output());
  return peak;
}

}  // namespace sluice::server
