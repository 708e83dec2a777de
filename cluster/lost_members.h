// The members an etcd-mode node saw leave the member map without draining first: their lease
// expired (a node killed, frozen or cut off) or their record was deleted. A drained node that
// leaves is intended and is not one of them; a lost node that comes back is forgotten. Kept
// since the node's start, so that `sluicectl cluster` can say how many members were expected
// (docs/OPERATIONS.md, "sluicectl cluster"). Pure logic over the maps adopted one after another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cluster/cluster_map.h"

namespace sluice::cluster {

struct LostMember {
  std::string id;
  std::uint64_t epoch = 0;  // the epoch of the first map without it
  friend bool operator==(const LostMember&, const LostMember&) = default;
};

class LostMembers {
 public:
  // The most lost members kept: the most recent ones (a node reports them all in STATS).
  static constexpr std::size_t kMaxLost = 64;

  // Notes the change from `previous` to `next`, the map adopted right after it (next's epoch is
  // the later one): a member of `previous` that `next` lacks is lost at next's epoch, unless it
  // was seen draining; a member of `next` is no longer lost. Returns the ids lost by this change.
  std::vector<std::string> note(const ClusterMap& previous, const ClusterMap& next);

  // The most recent first (higher epoch, then by id); at most kMaxLost.
  const std::vector<LostMember>& lost() const { return lost_; }

 private:
  std::vector<LostMember> lost_;
  // Ids seen draining and not seen in another state since, all in the last map noted: their
  // leaving is intended.
  std::vector<std::string> draining_;
};

}  // namespace sluice::cluster
