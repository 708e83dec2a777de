// The node's cluster coordinator (docs/ARCHITECTURE.md, "Moving partitions"): when the node
// adopts a map, it works out which partitions it must fetch and from whom, marks the partitions
// it will be primary of `pulling` (items answered UNAVAILABLE) before the map is published,
// pulls their records page by page from the source node's shards (fencing the old primary
// when it is still there), merges them into this node's shards, and then marks them `serving`.
// A source that cannot be reached within the pull deadline is given up: the next candidate
// (the old replica) is tried, else the node serves the partitions with what it has, and says
// so on stderr. It runs on a thread of its own, so a pull never delays a shard's requests.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster_map.h"

namespace sluice::server {

struct ClusterView;
struct ServerContext;
class PullJob;

// One partition to fetch: from which nodes, in order of preference, and whether this node is
// to be its primary (then it is `pulling` until the records are in) or its replica.
// The most partitions one PULL names (docs/PROTOCOL.md 10.5).
inline constexpr std::size_t kMaxPullPartitions = 65'535;

struct PullPlan {
  struct Source {
    std::string node;     // id
    std::string address;  // HOST:PORT of its public port
    bool fence = false;   // the source may still serve the partitions: stop it first
  };
  std::vector<std::uint32_t> partitions;
  std::vector<Source> sources;  // tried in order; none left = serve with what is here
  bool primary = true;
  // A joining node's warm-up (Coordinator::warm_up): nothing is fenced and no partition state
  // changes; the records come in, and the source's clock is kept for a later pull of what
  // changed since.
  bool warm = false;
  // Only the records changed at or after this instant of the first source's clock (protocol 5;
  // the other sources, and a source of an older version, send every record).
  std::optional<std::uint64_t> since_ns;
  // Every source in turn, each copy merged (core/merge.h keeps the more consumed), instead of
  // the first that answers: for partitions whose holders are not known (every lease expired).
  // A source that answers with an error is asked again until kSourceTimeout without progress.
  bool gather = false;
  // The partitions stay served while the records come in, and what they change here is
  // streamed to the replicas: a returning node's copies merged into a primary's.
  bool serving = false;
};

// What to pull when the node goes from map `from` (null at start-up) to map `to`. Beside the
// hand-overs (docs/ARCHITECTURE.md, "Moving partitions"):
//  - a partition this node is to be primary of that has no owner in `from` (no member was
//    active: every lease expired, or the cluster is new) is gathered, fenced, from every other
//    member of `to`, joining ones included, then from the nodes of `absent` (nodes this one
//    knew that are not members now: they may be back but not registered yet), before it is
//    served;
//  - a partition it serves as primary in both maps is gathered, unfenced and while served, from
//    the members of `to` that `from` did not have: a node that comes back brings its copies.
std::vector<PullPlan> plan_pulls(const cluster::ClusterMap* from, const cluster::ClusterMap& to,
                                 const std::string& self,
                                 const std::vector<PullPlan::Source>& absent = {});

class Coordinator {
 public:
  explicit Coordinator(ServerContext& context);
  ~Coordinator();  // stop()
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Starts pulling for `view` (just published to the shards; the primary partitions of the
  // plans already `pulling`). Pulls of an earlier view still running go on: each partition's
  // state is set by whichever finishes last. Any thread.
  void start(std::shared_ptr<const ClusterView> view, std::vector<PullPlan> plans);
  // A joining node fetches the partitions it will own once active (plans from plan_pulls
  // towards cluster::with_joining_active(view's map), turned into warm plans here), then calls
  // done(records fetched) on the coordinator's thread. A later pull of the same partitions from
  // the same source, as the hand-over when the node turns active, then asks only for what
  // changed since the warm-up read it. Any thread.
  void warm_up(std::shared_ptr<const ClusterView> view, std::vector<PullPlan> plans,
               std::function<void(std::size_t records)> done);
  // Stops every pull and the thread. Idempotent.
  void stop();
  // Runs `work` on the coordinator's thread (off the shards'); false (and not run) once
  // stopped.
  bool run(std::function<void()> work);

  // The coordinator's event loop (the etcd membership agent runs on it).
  boost::asio::io_context& io() { return io_; }
  // After stop(): destroys the handlers still queued or waiting on the event loop (coroutine
  // frames of the etcd agent among them) while its services stay, so that the objects those
  // handlers refer to, and the timers and sockets they own, can be destroyed next. Once.
  void shut_down_io() { io_.shut_down(); }
  // Pulls not finished yet (tests wait for 0).
  std::size_t running() const { return running_.load(); }
  // How long a source may take to answer before the next one is tried.
  static constexpr std::chrono::milliseconds kSourceTimeout{3000};

 private:
  friend class PullJob;
  void finished(PullJob* job);
  // What a warm-up read from `source` and when, by the source's clock (coordinator thread).
  struct WarmCopy {
    std::uint64_t since_ns = 0;
    std::vector<bool> partitions;
  };
  void warmed(const std::string& source, std::uint64_t since_ns,
              const std::vector<std::uint32_t>& partitions, std::uint32_t partition_count);
  // Splits `plan` into the part a warm copy of its first source covers (since_ns set, those
  // partitions taken out of the warm copy: one use each) and the rest.
  void use_warm_copies(PullPlan& plan, std::vector<PullPlan>& out);

  // An io_context whose shutdown (ending every pending handler, services kept) can be asked
  // for before its destruction.
  struct Loop : boost::asio::io_context {
    explicit Loop(int concurrency) : io_context(concurrency) {}
    void shut_down() { shutdown(); }
  };

  ServerContext& context_;
  Loop io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
  std::vector<std::shared_ptr<PullJob>> jobs_;  // coordinator thread only
  std::map<std::string, WarmCopy> warm_;        // by source node; coordinator thread only
  std::atomic<std::size_t> running_{0};
  std::atomic<bool> stopped_{false};
};

}  // namespace sluice::server
