// Internal: a client that no seed answered at connect() (ClientOptions::
// require_cluster_at_connect false) looks for one in the background. Rounds of connects to
// every seed, SeedBackoff apart; the first seed whose HELLO is answered is asked for its map
// (CLUSTER), and MapTracker::seed_answered() makes it the seed, exactly as connect() would have:
// from then on calls go to the cluster. Until then every key's owner is the stand-in of
// MapTracker::set_no_seed(), which has no connection, so each call fails as for an unreachable
// node and its failure policy answers it (client/local_layer.h).
//
// Threading: start() from connect(); everything else on the I/O thread.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "client/client.h"
#include "client/map_tracker.h"
#include "client/node_connection.h"
#include "protocol/frame.h"

namespace sluice::client::detail {

// The waits between a seedless client's rounds: kFirstNs doubling to kMaxNs, each jittered by
// +-20% so that gateways restarted together do not knock in step. A node that starts is found
// within kMaxNs * 1.2 plus a handshake. Pure: the caller gives the random numbers.
class SeedBackoff {
 public:
  static constexpr std::uint64_t kFirstNs = 50'000'000;
  static constexpr std::uint64_t kMaxNs = 500'000'000;

  // The next wait: the current base, -20% + (`random` mod 40% + 1 ns); the base then doubles,
  // up to kMaxNs.
  std::uint64_t next_wait_ns(std::uint64_t random);

 private:
  std::uint64_t base_ns_ = kFirstNs;
};

class SeedFinder final : public ReplySink {
 public:
  SeedFinder(boost::asio::io_context& io, const ClientOptions& options, MapTracker& maps,
             ConnectionFactory& connections);
  SeedFinder(const SeedFinder&) = delete;
  SeedFinder& operator=(const SeedFinder&) = delete;

  // connect(), after MapTracker::set_no_seed() and arm(): `tried[i]` is the connection it made
  // to options.servers[i] (null: the address did not resolve). The rounds start on the I/O
  // thread, the first after SeedBackoff's first wait.
  void start(std::vector<NodeConnection*> tried);
  // `connection` answered HELLO (the client's ConnectionObserver): a seed's is asked for its
  // map at once, without waiting for the next round.
  void on_ready(NodeConnection& connection);
  // The client is closing: no round starts again, and nothing found is adopted.
  void close();

  // ReplySink, part = the seed's index: its answer to CLUSTER, or why there is none (the next
  // round asks again).
  void on_reply(std::uint32_t seed, const protocol::Frame& reply) override;
  void on_failure(std::uint32_t seed, const Status& status) override;

 private:
  void arm();
  // Every seed not connected starts connecting; one that is ready is asked for its map.
  void round();
  void ask(std::size_t seed);
  void found(std::size_t seed, std::optional<SeedMap> map);

  boost::asio::io_context& io_;
  const ClientOptions& options_;
  MapTracker& maps_;
  ConnectionFactory& connections_;
  boost::asio::steady_timer timer_;

  // I/O thread.
  std::vector<NodeConnection*> seeds_;  // by index in options_.servers; null until it resolves
  bool seeking_ = false;                // started, and neither found nor closed
  bool closed_ = false;
  bool asking_ = false;  // a CLUSTER is out to one seed (one at a time)
  SeedBackoff backoff_;
  std::uint64_t random_;  // xorshift64 state of the jitter
};

}  // namespace sluice::client::detail
