// Client::connect(): the options checked, the seed found, the cluster map adopted and every
// connection of every node opened and handshaken before the first call; or, when no seed
// answers, a client with no cluster yet whose SeedFinder keeps trying them.
#include "client/client.h"

#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/client_impl.h"
#include "client/map_tracker.h"
#include "client/node_connection.h"
#include "client/router.h"
#include "client/seed_finder.h"
#include "client/sync_call.h"
#include "net/host_port.h"
#include "protocol/cluster_messages.h"
#include "protocol/messages.h"

namespace sluice::client {

namespace asio = boost::asio;
using detail::NodeConnection;

namespace {

constexpr unsigned kMaxConnectionsPerShard = 1024;
// Request ids are 32-bit and index each connection's pending ring: keep far below that.
constexpr std::size_t kMaxInFlight = std::size_t{1} << 24;

// Whether a node other than the seed's that fails at connect() fails it: only when the
// options are wrong for it (a refused token) or it is not Sluice. A node that is down is not
// the client's fault: its keys fail until it answers.
bool fails_connect(const Status& status) {
  return status.code() == ErrorCode::kUnauthenticated || status.code() == ErrorCode::kProtocolError;
}

// connect()'s error when no seed answered: each seed's own (each names its seed), in order.
// kTimeout when every seed timed out, else kConnectionFailed.
Status no_seed_answered(const std::vector<Status>& failures) {
  bool all_timed_out = true;
  std::string message = "no seed answered: ";
  for (std::size_t i = 0; i < failures.size(); ++i) {
    if (i != 0) message += "; ";
    message += failures[i].message();
    all_timed_out = all_timed_out && failures[i].code() == ErrorCode::kTimeout;
  }
  return Status(all_timed_out ? ErrorCode::kTimeout : ErrorCode::kConnectionFailed, message);
}

}  // namespace

namespace detail {

Status check_options(ClientOptions& options) {
  if (options.servers.empty()) {
    return Status(ErrorCode::kInvalidArgument, "no servers given");
  }
  if (options.timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return Status(ErrorCode::kInvalidArgument, "timeouts must be positive");
  }
  // Deadlines are counted in nanoseconds: a larger timeout would overflow them.
  options.timeout = std::min(options.timeout, kMaxTimeout);
  options.connect_timeout = std::min(options.connect_timeout, kMaxTimeout);
  if (options.max_in_flight == 0 || options.max_in_flight > kMaxInFlight) {
    return Status(ErrorCode::kInvalidArgument,
                  "max_in_flight must be 1.." + std::to_string(kMaxInFlight));
  }
  if (options.connections_per_shard == 0 ||
      options.connections_per_shard > kMaxConnectionsPerShard) {
    return Status(ErrorCode::kInvalidArgument,
                  "connections_per_shard must be 1.." + std::to_string(kMaxConnectionsPerShard));
  }
  // Refused rather than cut: a cut token is a wrong one. The message never shows the token.
  if (options.auth_token.size() > protocol::kMaxTokenLength) {
    return Status(
        ErrorCode::kInvalidArgument,
        "auth_token is longer than " + std::to_string(protocol::kMaxTokenLength) + " bytes");
  }
  if (options.gateways == 0 || options.gateways > 65535) {
    return Status(ErrorCode::kInvalidArgument, "gateways must be 1..65535");
  }
  if (options.fallback_keys == 0) {
    return Status(ErrorCode::kInvalidArgument, "fallback_keys must be at least 1");
  }
  if (options.lease_duration.count() < 0 || options.lease_duration > std::chrono::minutes(1)) {
    return Status(ErrorCode::kInvalidArgument, "lease_duration must be 0..60s");
  }
  for (const std::string& server : options.servers) {
    if (!net::parse_host_port(server)) {
      return Status(ErrorCode::kInvalidArgument, "expected HOST:PORT, got \"" + server + "\"");
    }
  }
  return Status();
}

}  // namespace detail

Result<std::unique_ptr<Client>> Client::connect(ClientOptions options) {
  return connect_on(std::move(options), nullptr);
}

Result<std::unique_ptr<Client>> Client::connect(ClientOptions options, asio::io_context& io) {
  return connect_on(std::move(options), &io);
}

Result<std::unique_ptr<Client>> Client::connect_on(ClientOptions options,
                                                   asio::io_context* external) {
  if (Status checked = detail::check_options(options); !checked.ok()) return checked;
  auto impl = std::make_unique<Impl>(std::move(options), external);
  const ClientOptions& opts = impl->options;

  // The seed: the first server that answers HELLO.
  std::vector<NodeConnection*> tried(opts.servers.size(), nullptr);  // by seed; null: unresolved
  std::vector<Status> failures;
  NodeConnection* public_port = nullptr;
  for (std::size_t i = 0; i < opts.servers.size() && public_port == nullptr; ++i) {
    const std::string& server = opts.servers[i];
    Result<asio::ip::tcp::endpoint> endpoint = detail::resolve(impl->io, server);
    if (!endpoint.ok()) {
      failures.push_back(endpoint.status());
      continue;
    }
    NodeConnection& candidate = impl->add_connection(server, *endpoint, protocol::kPublicPort);
    tried[i] = &candidate;
    if (Status ready = impl->wait_ready(candidate); !ready.ok()) {
      failures.push_back(ready);
      continue;  // the failed connection stays owned by impl, idle
    }
    impl->maps.set_seed(candidate, *endpoint, server);
    public_port = &candidate;
  }
  if (public_port == nullptr) {
    // A seed that refused the token or is not Sluice: the options are wrong, not the cluster.
    for (const Status& failure : failures) {
      if (fails_connect(failure)) return failure;
    }
    Status none = no_seed_answered(failures);
    if (opts.require_cluster_at_connect) return none;
    // No cluster yet: calls follow their failure policy while the seeds are tried again.
    impl->maps.set_no_seed(std::move(none));
    if (external != nullptr && external->stopped()) external->restart();
    impl->maps.arm();
    impl->seeds.start(std::move(tried));
    return std::unique_ptr<Client>(new Client(std::move(impl)));
  }

  // The seed's map: a node outside any cluster is the only node; a member names the others. A
  // node of an older protocol knows no CLUSTER and is outside any cluster.
  if (public_port->hello().version >= detail::kFirstClusterVersion) {
    detail::ClusterCall call;
    if (Status queued = detail::start_call(*public_port, call, detail::encode_cluster);
        !queued.ok()) {
      return queued;
    }
    Result<protocol::ClusterMapMessage> message = call.wait(impl->owned_io ? nullptr : &impl->io);
    if (!message.ok()) return message.status();
    Result<std::optional<detail::SeedMap>> map =
        detail::seed_map(*message, impl->maps.seed_info().endpoint);
    if (!map.ok()) return map.status();
    if (*map) impl->maps.adopt(std::move((*map)->map), public_port, (*map)->self);
  }

  // Every other node's public port, then every shard: all connect at once (eager), so that
  // no call pays for a handshake and every key goes straight to its shard.
  std::vector<bool> up(impl->maps.links().size(), true);
  for (std::size_t l = 1; l < impl->maps.links().size(); ++l) {
    detail::NodeLink& link = *impl->maps.links()[l];
    if (link.retired || link.publics.empty()) {
      up[l] = false;
      continue;
    }
    Status ready = impl->wait_ready(*link.publics.front());
    if (!ready.ok() && fails_connect(ready)) return ready;
    up[l] = ready.ok();
    if (ready.ok()) impl->maps.learn_hello(link);
  }
  for (std::size_t l = 0; l < impl->maps.links().size(); ++l) {
    if (!up[l]) continue;
    detail::NodeLink& link = *impl->maps.links()[l];
    std::vector<NodeConnection*> all(link.publics.begin(), link.publics.end());
    for (const auto& shard : link.shards) all.insert(all.end(), shard.begin(), shard.end());
    for (NodeConnection* c : all) {
      Status ready = impl->wait_ready(*c);
      // The seed's node must be whole, as a single node always had to be.
      if (!ready.ok() && (l == 0 || fails_connect(ready))) return ready;
      if (!ready.ok()) break;
    }
  }
  if (external != nullptr && external->stopped()) external->restart();
  impl->maps.arm();
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

}  // namespace sluice::client
