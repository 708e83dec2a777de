#include "cluster/lost_members.h"

#include <algorithm>

namespace sluice::cluster {

std::vector<std::string> LostMembers::note(const ClusterMap& previous, const ClusterMap& next) {
  std::vector<std::string> now_lost;
  const auto set_draining = [&](const std::string& id, bool draining) {
    const auto it = std::find(draining_.begin(), draining_.end(), id);
    if (draining && it == draining_.end()) draining_.push_back(id);
    if (!draining && it != draining_.end()) draining_.erase(it);
  };
  for (const ClusterNode& node : previous.nodes()) {
    if (node.state == NodeState::kDraining) set_draining(node.id, true);
  }
  for (const ClusterNode& node : previous.nodes()) {
    if (next.find(node.id) != nullptr) continue;
    const bool drained = std::find(draining_.begin(), draining_.end(), node.id) != draining_.end();
    set_draining(node.id, false);
    if (drained) continue;
    std::erase_if(lost_, [&](const LostMember& m) { return m.id == node.id; });
    lost_.push_back({node.id, next.epoch()});
    now_lost.push_back(node.id);
  }
  for (const ClusterNode& node : next.nodes()) {
    std::erase_if(lost_, [&](const LostMember& m) { return m.id == node.id; });
    set_draining(node.id, node.state == NodeState::kDraining);
  }
  std::sort(lost_.begin(), lost_.end(), [](const LostMember& a, const LostMember& b) {
    return a.epoch != b.epoch ? a.epoch > b.epoch : a.id < b.id;
  });
  if (lost_.size() > kMaxLost) lost_.resize(kMaxLost);
  return now_lost;
}

}  // namespace sluice::cluster
