#include "cluster/lease_fence.h"

#include <catch2/catch.hpp>

namespace {

using sluice::cluster::LeaseFence;
using sluice::cluster::MapConfirmation;
using std::chrono::milliseconds;
using std::chrono::seconds;

}  // namespace

TEST_CASE("a lease fence is closed until a grant is answered", "[lease-fence]") {
  LeaseFence fence(milliseconds(250));
  CHECK(fence.deadline() == LeaseFence::Nanos::zero());
  CHECK_FALSE(fence.alive_at(milliseconds(0)));
  CHECK_FALSE(fence.alive_at(milliseconds(1)));
}

TEST_CASE("a lease fence closes the TTL less the margin after the send time", "[lease-fence]") {
  LeaseFence fence(milliseconds(250));
  // Sent at 1000 ms, answered much later: the deadline counts from the send, not the answer.
  fence.on_answer(milliseconds(1000), seconds(2));
  CHECK(fence.deadline() == milliseconds(2750));
  CHECK(fence.alive_at(milliseconds(2749)));
  CHECK_FALSE(fence.alive_at(milliseconds(2750)));
}

TEST_CASE("a late answer to an older keepalive does not move a lease fence back", "[lease-fence]") {
  LeaseFence fence(milliseconds(250));
  fence.on_answer(milliseconds(1500), seconds(2));  // the newer keepalive answered first
  fence.on_answer(milliseconds(1000), seconds(2));  // then the older one
  CHECK(fence.deadline() == milliseconds(3250));
  fence.on_answer(milliseconds(2000), seconds(2));
  CHECK(fence.deadline() == milliseconds(3750));
}

TEST_CASE("a lease fence closes at once when etcd says the lease is gone", "[lease-fence]") {
  LeaseFence fence(milliseconds(250));
  fence.on_answer(milliseconds(1000), seconds(2));
  fence.on_answer(milliseconds(1500), seconds(0));
  CHECK(fence.deadline() == LeaseFence::Nanos::zero());
  CHECK_FALSE(fence.alive_at(milliseconds(1501)));
  // A new lease starts over.
  fence.on_answer(milliseconds(1600), seconds(2));
  CHECK(fence.deadline() == milliseconds(3350));
  fence.lose();
  CHECK_FALSE(fence.alive_at(milliseconds(1700)));
}

TEST_CASE(
    "a map is trusted for the TTL less the margin after the send time of its last "
    "confirming read, and not at all after a reset",
    "[lease-fence]") {
  MapConfirmation map(seconds(2), milliseconds(250));
  CHECK(map.deadline() == MapConfirmation::Nanos::zero());
  map.on_confirmed(seconds(10));
  CHECK(map.deadline() == seconds(10) + milliseconds(1750));
  // A late answer to an older read does not move it back.
  map.on_confirmed(seconds(9));
  CHECK(map.deadline() == seconds(10) + milliseconds(1750));
  map.on_confirmed(seconds(11));
  CHECK(map.deadline() == seconds(11) + milliseconds(1750));
  map.reset();
  CHECK(map.deadline() == MapConfirmation::Nanos::zero());
}

TEST_CASE("a fence reason names the bound that passed first", "[lease-fence]") {
  using sluice::cluster::fence_reason;
  using sluice::cluster::FenceReason;
  LeaseFence lease(milliseconds(250));
  MapConfirmation map(seconds(2), milliseconds(250));
  CHECK(fence_reason(milliseconds(0), lease, map) == FenceReason::kNoLease);
  lease.on_answer(milliseconds(0), seconds(2));  // alive until 1750 ms
  CHECK(fence_reason(milliseconds(10), lease, map) == FenceReason::kMapUnconfirmed);
  map.on_confirmed(milliseconds(100));  // trusted until 1850 ms
  CHECK(fence_reason(milliseconds(1749), lease, map) == FenceReason::kNone);
  CHECK(fence_reason(milliseconds(1750), lease, map) == FenceReason::kLeaseLapsed);
  lease.on_answer(milliseconds(500), seconds(2));  // alive until 2250 ms
  CHECK(fence_reason(milliseconds(1849), lease, map) == FenceReason::kNone);
  CHECK(fence_reason(milliseconds(1850), lease, map) == FenceReason::kMapUnconfirmed);
  CHECK(fence_reason(milliseconds(2250), lease, map) == FenceReason::kLeaseLapsed);
  lease.lose();
  CHECK(fence_reason(milliseconds(1000), lease, map) == FenceReason::kNoLease);
}

TEST_CASE(
    "a read of the member set confirms the map when it shows it or when the watch has "
    "passed its revision",
    "[lease-fence]") {
  using sluice::cluster::judge_member_read;
  using sluice::cluster::MemberRead;
  // The watch has brought revision 40 and its set is the map in force.
  CHECK(judge_member_read(true, 40, 40, true) == MemberRead::kConfirms);
  // Other keys moved etcd's revision on, the member set did not change.
  CHECK(judge_member_read(true, 55, 40, true) == MemberRead::kConfirms);
  // Sent before a member's change at 40 and answered after the watch brought it: the read shows
  // the set before the change, and the map in force is newer than what it shows.
  CHECK(judge_member_read(false, 39, 40, true) == MemberRead::kConfirms);
  CHECK(judge_member_read(false, 40, 40, true) == MemberRead::kConfirms);
  // The set at 40 made no map: the map in force is older than the watch, and proves nothing.
  CHECK(judge_member_read(false, 39, 40, false) == MemberRead::kNothing);
  // etcd is past the watch with another set: the watch missed it.
  CHECK(judge_member_read(false, 41, 40, true) == MemberRead::kAdoptRead);
  CHECK(judge_member_read(false, 41, 40, false) == MemberRead::kAdoptRead);
}
