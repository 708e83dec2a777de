// Internal: the client's view of the cluster (docs/CLIENT.md, sections 3 and 5). A MapTracker
// owns the links to every node the client has known (NodeLink: a node's public and shard
// connections and its breaker), the cluster map in force and the epochs replies carried, the
// refresh of a newer map (one CLUSTER at a time) and who waits for it, and the Router built from
// all that, which it publishes to every thread.
//
// Threading, member by member below: "I/O side" means connect() alone until arm() (armed() is
// false), then only the I/O thread. Routers are immutable and read by any thread.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"
#include "client/node_connection.h"
#include "client/router.h"
#include "cluster/cluster_map.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace sluice::client::detail {

class AsyncBatch;

// "HOST:PORT" to an endpoint: IP addresses as they are, names through the resolver (which
// blocks the calling thread for the lookup). kInvalidArgument for malformed text,
// kConnectionFailed for a name that does not resolve.
Result<boost::asio::ip::tcp::endpoint> resolve(boost::asio::io_context& io,
                                               std::string_view address);

// Where a MapTracker gets the connections of the links it opens: the client, which owns every
// connection (they live until it dies) and the timer that closes idle ones.
// A seed's map, from its CLUSTER reply: the map, and the answering node's index in it (if a
// member).
struct SeedMap {
  cluster::ClusterMap map;
  std::optional<std::size_t> self;
};
// The map in a seed's CLUSTER reply (`from`: "HOST:PORT", for the message): nullopt for a node
// outside any cluster, kProtocolError when it is not a valid map.
Result<std::optional<SeedMap>> seed_map(const protocol::ClusterMapMessage& message,
                                        std::string_view from);

class ConnectionFactory {
 public:
  // A new connection to `endpoint`, not yet connecting; `expected_shard` is what its HELLO must
  // report (protocol::kPublicPort for a public port).
  virtual NodeConnection& add_connection(std::string name, boost::asio::ip::tcp::endpoint endpoint,
                                         std::uint16_t expected_shard) = 0;
  // I/O thread: the client's timer ticks while anything needs it (a retired link's connections
  // close on its ticks once idle).
  virtual void arm_timer() = 0;

 protected:
  ~ConnectionFactory() = default;
};

class MapTracker {
 public:
  MapTracker(boost::asio::io_context& io, const ClientOptions& options,
             ConnectionFactory& connections);
  MapTracker(const MapTracker&) = delete;
  MapTracker& operator=(const MapTracker&) = delete;

  // ---- connecting (connect() only) ---------------------------------------------------------

  // The seed answered HELLO on `public_port`, reached at `endpoint` as `address`: it becomes the
  // first link (not shard-aware: with connections_per_shard public connections), and its shard
  // connections start connecting.
  void set_seed(NodeConnection& public_port, const boost::asio::ip::tcp::endpoint& endpoint,
                const std::string& address);
  // No seed answered (`why` names each and what it said): the first link is a stand-in with no
  // connections, whose every key fails with `why` (and so goes to its failure policy), until
  // seed_answered().
  void set_no_seed(Status why);
  // Takes the node's limits (and, shard-aware, opens its shard connections) from the HELLO of
  // its first public connection, once that is answered. True when it did.
  bool learn_hello(NodeLink& link);
  // Routes by `map` if it is newer than the map in force: links for its active nodes (new ones
  // connect at once), the others retired. `via` answered with `map`, being its node `self`.
  bool adopt(cluster::ClusterMap map, NodeConnection* via, std::optional<std::size_t> self);
  std::vector<std::unique_ptr<NodeLink>>& links() { return links_; }
  // connect() is done: from now on the I/O thread follows epochs and HELLOs, starting with what
  // it missed meanwhile (posted to the I/O thread).
  void arm();
  bool armed() const { return armed_.load(std::memory_order_acquire); }

  // ---- any thread --------------------------------------------------------------------------

  // What the seed's HELLO said (empty until a seed answered), and its public connection (PING,
  // STATS, CLUSTER go there), or set_no_seed()'s reason while there is none.
  ServerInfo seed_info() const;
  Result<NodeConnection*> control() const;
  bool seeded() const { return control_.load(std::memory_order_acquire) != nullptr; }
  // The router in force.
  std::shared_ptr<const Router> current_router() const {
    std::lock_guard lock(router_mu_);
    return router_;
  }
  // The router in force, from this thread's cache: one atomic load when it is current, no lock
  // and no reference count. Valid until this thread's next call of it (on any client), so only
  // for code that calls no callback meanwhile.
  const Router& cached_router();
  // The epoch frames carry (the map's; 0 outside a cluster), and the highest epoch the client
  // has or has asked for: replies above it start a refresh. Connections read both
  // (ConnectionConfig).
  const std::atomic<std::uint64_t>& map_epoch() const { return map_epoch_; }
  const std::atomic<std::uint64_t>& epoch_floor() const { return epoch_floor_; }
  std::uint64_t epoch() const { return map_epoch_.load(std::memory_order_relaxed); }
  // Newer maps adopted after connect().
  std::uint64_t map_refreshes() const { return map_refreshes_.load(std::memory_order_relaxed); }
  // Not the I/O thread: waits until the map's epoch reaches `epoch`, the refresh under way ends,
  // or `deadline_ns` (monotonic_now_ns()) passes.
  void wait_for_epoch(std::uint64_t epoch, std::uint64_t deadline_ns);

  // ---- I/O side ----------------------------------------------------------------------------

  // After set_no_seed(): `public_port`, the connection to seed `address`, answered HELLO and
  // CLUSTER (`map`). It becomes the seed, as in connect(), and the client routes by its map
  // from now on: its nodes' connections (and its shards') start connecting, and calls queue
  // on them until they are ready. The stand-in is retired.
  void seed_answered(NodeConnection& public_port, const std::string& address,
                     std::optional<SeedMap> map);
  // A reply on `connection` carried `epoch`, above epoch_floor() (NodeConnection's observer).
  void on_newer_epoch(NodeConnection& connection, std::uint64_t epoch);
  // `connection`'s HELLO was answered (NodeConnection's observer).
  void on_ready(NodeConnection& connection);
  // A connection of a node in the map failed: a node that answers is asked for its map, which
  // may move the failed node's keys (a client whose every call goes to a dead node would
  // otherwise never see the epoch that hands them to their replica).
  void on_failed(NodeConnection& connection);
  // Asks `via` for its map (CLUSTER), unless a refresh is under way (then once it ends).
  void request_refresh(NodeConnection& via);
  // A batch waits for the refresh under way (AsyncBatch::on_map() when it ends); false (nothing
  // registered) when there is none.
  bool wait_for_map(AsyncBatch& batch);
  // Whether a cluster map is in force (false for a node outside any cluster).
  bool has_map() const { return current_map_.has_value(); }
  // The link whose breaker is `health`; nullptr when there is none.
  NodeLink* link_with(const NodeHealth& health);
  // Asks a node other than `down` that answers for its map (a quiet client's breaker probe:
  // docs/CLIENT.md section 10). Nothing when none does.
  void refresh_from_other_than(const NodeLink& down);
  // Whether the map in force has no active node (every node's lease lost, say): it routes no
  // key, so no reply brings a newer epoch, and the client's timer asks for one instead.
  // Any thread: the client's timer reads it on the I/O thread while connect() may still adopt
  // the first map on the caller's.
  bool ringless() const { return ringless_.load(std::memory_order_acquire); }
  // Asks any node that answers (the seed's connection first) for its map; when none is
  // connected, reconnects them (each at its own backoff) so that a later call finds one.
  void refresh_from_any();
  // On the client's timer: closes the idle connections of retired links. True while some are
  // still busy (the timer must keep ticking).
  bool close_retired();
  // The client is closing: no refresh starts and no batch waits for a map from now on.
  void close();
  // Wakes every sync call in wait_for_epoch() (the client closed: they find out).
  void end_waits();

 private:
  class RefreshSink final : public ReplySink {
   public:
    explicit RefreshSink(MapTracker& maps) : maps_(maps) {}
    void on_reply(std::uint32_t, const protocol::Frame& reply) override {
      maps_.on_refresh_reply(reply);
    }
    void on_failure(std::uint32_t, const Status&) override { maps_.end_refresh(); }

   private:
    MapTracker& maps_;
  };

  // A link to the node at `address` ("HOST:PORT"), its public connections connecting.
  NodeLink& add_link(std::string id, std::string address);
  NodeLink* link_of(const NodeConnection& connection);
  // A new router for the links as they are (a map adopted, a node's shards became known).
  void rebuild_router();
  void publish(std::shared_ptr<const Router> next);
  void on_refresh_reply(const protocol::Frame& reply);
  // Wakes every batch and sync call waiting for a map: a refresh ended (or the client closes).
  void end_refresh();
  // Posted by arm(): what the I/O side saw while it was not armed.
  void catch_up();

  boost::asio::io_context& io_;
  const ClientOptions& options_;
  ConnectionFactory& connections_;
  mutable std::mutex info_mu_;
  ServerInfo info_;  // guarded by info_mu_: set by set_seed(), then read-only
  // The seed's public connection: null until a seed answers; set once (I/O side), read anywhere.
  std::atomic<NodeConnection*> control_{nullptr};
  Status no_seed_;       // set_no_seed()'s reason: written before arm(), then read-only
  bool closed_ = false;  // I/O side: close() ran

  mutable std::mutex router_mu_;
  std::shared_ptr<const Router> router_;  // guarded by router_mu_; never null once connected
  // Changes after each publish(), to a value no client of the process had: cached_router()
  // takes a thread's cached router only when it was cached under the value in force.
  std::atomic<std::uint64_t> router_version_{0};

  // Written on the I/O side, read anywhere.
  std::atomic<std::uint64_t> map_epoch_{0};
  std::atomic<std::uint64_t> epoch_floor_{0};
  // False until arm(); the observer only notes the highest epoch it sees until then.
  std::atomic<bool> armed_{false};
  std::atomic<std::uint64_t> missed_epoch_{0};
  std::atomic<std::uint64_t> map_refreshes_{0};

  // I/O side.
  std::vector<std::unique_ptr<NodeLink>> links_;
  std::optional<cluster::ClusterMap> current_map_;  // empty: a node outside any cluster
  std::atomic<bool> ringless_{false};        // current_map_ holds no active node (set by adopt())
  std::vector<const NodeLink*> ring_links_;  // by ring NodeIndex of current_map_
  bool retired_pending_ = false;             // a retired link still has a connection open
  RefreshSink refresh_sink_{*this};
  NodeConnection* refresh_via_ = nullptr;    // the connection the refresh under way asked
  NodeConnection* refresh_again_ = nullptr;  // a newer epoch came from it meanwhile
  std::vector<AsyncBatch*> map_waiters_;
  std::vector<AsyncBatch*> waking_;  // end_refresh()'s buffer

  // Sync calls waiting for a map (wait_for_epoch): refreshing_ and map_events_ change under
  // map_mu_.
  std::mutex map_mu_;
  std::condition_variable map_cv_;
  bool refreshing_ = false;       // written on the I/O thread
  std::uint64_t map_events_ = 0;  // refreshes ended, and end_waits()
};

}  // namespace sluice::client::detail
