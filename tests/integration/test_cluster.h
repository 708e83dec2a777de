// N in-process nodes "node-0" .. "node-(N-1)" on loopback in static cluster mode, sharing one
// cluster file in the temporary directory; a node can be stopped and restarted on its port, and
// nodes added. Tests wait for pulls and replication to settle with bounded polls.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cluster/cluster_map.h"
#include "core/key_hash.h"
#include "tests/integration/raw_client.h"
#include "tests/integration/test_server.h"

namespace sluice::test {

class TestCluster {
 public:
  explicit TestCluster(int nodes, unsigned shards = 2) : shards_(shards) {
    static int files = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("sluice-cluster-" + std::to_string(::getpid()) + "-" + std::to_string(++files));
    for (int i = 0; i < nodes; ++i) servers_.push_back(start_node(i, 0));
    write(1, nodes);
    for (auto& s : servers_) require_loaded(s->server().load_cluster(path_.string()));
    // Each node pulled its partitions from the others at load: serving once they are in.
    if (!settled()) throw std::runtime_error("the cluster's start-up pulls did not finish");
  }
  ~TestCluster() {
    servers_.clear();
    std::filesystem::remove(path_);
  }

  // Rewrites the file with `epoch` and the first `nodes` nodes.
  void write(std::uint64_t epoch, int nodes) {
    std::ofstream file(path_);
    file << "# test cluster\nepoch " << epoch << "\n";
    for (int i = 0; i < nodes; ++i) file << "node-" << i << " 127.0.0.1:" << ports_.at(i) << "\n";
  }

  TestServer& node(int i) { return *servers_.at(i); }
  bool running(int i) const { return servers_.at(i) != nullptr; }
  int size() const { return static_cast<int>(servers_.size()); }
  std::string path() const { return path_.string(); }
  std::uint16_t port(int i) const { return ports_.at(i); }

  // Rereads the file on every running node.
  void reload_all() {
    for (auto& s : servers_) {
      if (s) require_loaded(s->server().reload_cluster());
    }
  }
  // Starts one more node (not yet in the file: write() it, then reload_all()).
  int add_node() {
    servers_.push_back(start_node(size(), 0));
    return size() - 1;
  }
  // Loads the current file on node `i` (one just added).
  void load(int i) { require_loaded(node(i).server().load_cluster(path_.string())); }
  // Stops node i (its counters are gone with it).
  void stop(int i) { servers_.at(i).reset(); }
  // Starts node i again on its port, from the current file: it catches up from the others.
  void restart(int i) {
    servers_.at(i) = start_node(i, ports_.at(i));
    load(i);
  }

  // Waits until every running node has finished its pulls.
  bool settled(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    return eventually(
        [&] {
          for (auto& s : servers_) {
            if (s && s->server().TEST_pulls_running() != 0) return false;
          }
          return true;
        },
        limit);
  }

  // The map the nodes route by, computed as a client would.
  cluster::ClusterMap map(std::uint64_t epoch, int nodes) const {
    std::vector<cluster::ClusterNode> members;
    for (int i = 0; i < nodes; ++i) {
      members.push_back({"node-" + std::to_string(i), "127.0.0.1:" + std::to_string(ports_.at(i)),
                         cluster::NodeState::kActive});
    }
    return cluster::ClusterMap::make(epoch, members).value();
  }

 private:
  static void require_loaded(const std::string& refused) {
    if (!refused.empty()) throw std::runtime_error("cluster file refused: " + refused);
  }
  std::unique_ptr<TestServer> start_node(int i, std::uint16_t port) {
    server::ServerConfig config = test_config(shards_);
    config.node_id = "node-" + std::to_string(i);
    config.port = port;
    config.ephemeral_shard_ports = true;
    auto server = std::make_unique<TestServer>(config);
    if (static_cast<int>(ports_.size()) <= i) ports_.resize(i + 1);
    ports_[i] = server->port();
    return server;
  }

  unsigned shards_;
  std::filesystem::path path_;
  std::vector<std::uint16_t> ports_;
  std::vector<std::unique_ptr<TestServer>> servers_;
};

// The index of the node that is the primary (or, with replica = true, the replica) of `key`.
inline int owner_of(const cluster::ClusterMap& map, const std::string& key, bool replica = false) {
  const cluster::ClusterNode* node =
      replica ? map.replica_of(hash_key(key)) : map.primary_of(hash_key(key));
  if (node == nullptr) throw std::runtime_error("no owner for " + key);
  return std::stoi(node->id.substr(5));
}

}  // namespace sluice::test
