// A throwaway 3-member etcd for a test (issue 23): three /usr/bin/etcd processes on free
// loopback ports, one cluster, each with its data in a temporary directory; healthy (a leader
// elected) in about 2.5 s. A member can be frozen (SIGSTOP: a host that hangs without a FIN),
// resumed, killed and started again; the other two keep the quorum. Never the package's system
// service, never port 2379.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/etcd_process.h"

namespace sluice::test {

class EtcdQuorum {
 public:
  static constexpr int kMembers = 3;

  EtcdQuorum() {
    std::vector<EtcdProcess::Member> members;
    std::string initial;
    for (int i = 0; i < kMembers; ++i) {
      const std::uint16_t port = free_port_pair();
      members.push_back({"e" + std::to_string(i + 1), port, ""});
      initial += (i == 0 ? "" : ",") + members.back().name +
                 "=http://127.0.0.1:" + std::to_string(port + 1);
    }
    for (EtcdProcess::Member& member : members) {
      member.initial_cluster = initial;
      members_.push_back(std::make_unique<EtcdProcess>(member, /*wait=*/false));
    }
    for (auto& member : members_) member->wait_healthy(std::chrono::seconds(20));
  }

  ~EtcdQuorum() {
    // A frozen member would not take the SIGTERM that stops it.
    for (int i = 0; i < kMembers; ++i) thaw(i);
  }
  EtcdQuorum(const EtcdQuorum&) = delete;
  EtcdQuorum& operator=(const EtcdQuorum&) = delete;

  EtcdProcess& member(int i) { return *members_.at(static_cast<std::size_t>(i)); }
  // "http://127.0.0.1:P1,http://127.0.0.1:P2,http://127.0.0.1:P3": what --etcd takes, in the
  // order an operator writes it.
  std::string urls() const {
    std::string out;
    for (const auto& member : members_) out += (out.empty() ? "" : ",") + member->url();
    return out;
  }

  void freeze(int i) { member(i).child().send_signal(SIGSTOP); }
  void thaw(int i) { member(i).child().send_signal(SIGCONT); }

  // The index of the member that is the leader now, as a live member other than `except` says
  // (POST /v3/maintenance/status: its "leader" against each member's own "member_id"); -1
  // when none answers.
  int leader(int except = -1) {
    std::string status[kMembers];
    std::string leader_id;
    for (int i = 0; i < kMembers; ++i) {
      if (i == except) continue;
      status[i] = member(i).get("/v3/maintenance/status", "{}");
      if (leader_id.empty()) leader_id = field(status[i], "leader");
    }
    if (leader_id.empty()) return -1;
    for (int i = 0; i < kMembers; ++i) {
      if (i != except && field(status[i], "member_id") == leader_id) return i;
    }
    return -1;
  }

  // Hands the leadership to member `i` (POST /v3/maintenance/transfer-leadership to the leader)
  // and waits until it leads; false when it does not within `limit`.
  bool make_leader(int i, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      const int now = leader();
      if (now == i) return true;
      if (now >= 0) {
        const std::string target =
            field(member(i).get("/v3/maintenance/status", "{}"), "member_id");
        member(now).get("/v3/maintenance/transfer-leadership", "{\"targetID\":\"" + target + "\"}");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return leader() == i;
  }

 private:
  // The string value of "NAME":"VALUE" in `json` (the gateway writes uint64 ids as strings).
  static std::string field(const std::string& json, const std::string& name) {
    const std::string tag = "\"" + name + "\":\"";
    const std::size_t at = json.find(tag);
    if (at == std::string::npos) return "";
    const std::size_t start = at + tag.size();
    const std::size_t end = json.find('"', start);
    return end == std::string::npos ? "" : json.substr(start, end - start);
  }

  std::vector<std::unique_ptr<EtcdProcess>> members_;
};

}  // namespace sluice::test
