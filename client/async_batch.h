// Internal: the async batch machinery (acquire_batch_async, probe_batch_async, and in a cluster
// the single acquires that must go again, answered REDIRECT or UNAVAILABLE, and those with a key
// too long for the copy a connection keeps, ResendCopy). A batch's items are grouped by owner and
// cut into parts, one frame each, within the owner's max_batch and max_frame; results go back by
// item index. In a cluster a batch keeps a copy of its items, so that an item answered REDIRECT is
// sent once more to its owner in the (refreshed) map, and one answered UNAVAILABLE again after a
// short pause, within the call's deadline. Batches are pooled, so a warm client allocates nothing
// per batch. docs/CLIENT.md, sections 3 and 5, describes the life of a batch.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "client/client.h"
#include "client/node_connection.h"
#include "protocol/messages.h"

namespace sluice::client::detail {

class Router;

// A retry after UNAVAILABLE waits 2..5 ms, jittered so that clients do not come back in step.
inline constexpr std::uint64_t kMinRetryPauseNs = 2'000'000;
inline constexpr std::uint64_t kMaxRetryPauseNs = 5'000'000;
// A pause in [kMinRetryPauseNs, kMaxRetryPauseNs], from the xorshift state `state` (not 0).
std::uint64_t retry_pause_ns(std::uint64_t& state);

// One async batch. Completion is counted with one extra hold for the submitting thread, so the
// batch cannot finish (and be reused) while that thread still reads it; whoever drops the last
// hold completes it on the I/O thread. A wait for a map or a pause holds one more. A batch
// started by resume_one() has no submitting thread: it runs on the I/O thread, whose one hold
// stands for the answer it took over.
class AsyncBatch final : public ReplySink {
 public:
  explicit AsyncBatch(Client::Impl& impl);

  // Plans, submits and arranges for `done` to run. The caller must not touch the batch after.
  void run(std::span<const AcquireRequest> items, bool probe, BatchCallback& done);
  // One item (a cluster's acquire): exactly one of the callbacks is given, and moved from.
  void run_one(const AcquireRequest& item, bool probe, AcquireCallback* done,
               BatchCallback* batch_done);
  // I/O thread: takes over a cluster's one-item acquire sent straight to its owner
  // (Completion::keep_request) and answered `answer`, REDIRECT or UNAVAILABLE, in a reply of epoch
  // `reply_epoch`: it goes on as if this batch had sent it, within `deadline_ns`. Callbacks as
  // for run_one().
  void resume_one(const AcquireRequest& item, std::uint64_t deadline_ns,
                  const protocol::AcquireResult& answer, std::uint64_t reply_epoch,
                  AcquireCallback* done, BatchCallback* batch_done);

  void on_reply(std::uint32_t part, const protocol::Frame& reply) override;
  void on_failure(std::uint32_t part, const Status& status) override;

  // I/O thread: the refresh this batch waited for has ended (with a newer map or not), or the
  // client is closing. Its redirected items go to their owner in the map in force.
  void on_map();
  // I/O thread, closing: a pause under way ends at once; its items fail with kClosed.
  void cancel_pause();

 private:
  struct Part {
    std::size_t owner = 0;    // the router's owner index
    std::uint32_t begin = 0;  // into order_ (a first part) or retry_order_ (a retry)
    std::uint32_t end = 0;
    NodeHealth* health = nullptr;  // the owner's node's breaker: a frame counts once
  };
  struct Policy {
    std::uint32_t quota = 0;
    std::uint64_t window_ms = 0;
  };
  // Part ids with this bit index retry_parts_, the others parts_.
  static constexpr std::uint32_t kRetryPart = 0x8000'0000u;

  void start(std::span<const AcquireRequest> items, bool probe);
  // A cluster's batch: copies `items` into copies_ (items_ views them) and clears the retries.
  void keep_copies(std::span<const AcquireRequest> items);
  // One item's answer: its result, or a wait for the map or for a pause.
  void absorb(std::uint32_t item, const protocol::AcquireResult& r, std::uint64_t reply_epoch,
              std::uint64_t& now);
  // After a reply's items are absorbed: starts the waits they need and releases the reply's hold.
  void absorbed(std::uint64_t reply_epoch);
  void plan(const Router& router);
  // Appends to `parts` the parts for the items order[first..end), all of owner `owner`.
  void cut(const Router& router, std::size_t owner, const std::vector<std::uint32_t>& order,
           std::uint32_t first, std::uint32_t end, std::vector<Part>& parts);
  Part part_at(std::uint32_t id) const {
    return (id & kRetryPart) != 0 ? retry_parts_[id & ~kRetryPart] : parts_[id];
  }
  const std::vector<std::uint32_t>& order_of(std::uint32_t id) const {
    return (id & kRetryPart) != 0 ? retry_order_ : order_;
  }
  void submit(const Router& router, std::uint32_t id);
  // Runs under the connection's mutex (the submitting thread, or the I/O thread for a retry).
  void encode(const Part& part, const std::vector<std::uint32_t>& order, protocol::Bytes& out,
              std::uint32_t id, const protocol::Framing& framing);
  // I/O thread: sends `items` (indices) to their owners in the map in force, and empties it.
  void resend(std::vector<std::uint32_t>& items);
  void start_pause();
  void on_pause_end(const boost::system::error_code& ec);
  void hold() { outstanding_.fetch_add(1, std::memory_order_relaxed); }
  void release();
  void complete();

  friend class BatchPool;

  Client::Impl& impl_;
  bool one_item_ = false;  // BatchPool: which free list it goes back to
  bool probe_ = false;
  bool clustered_ = false;  // routed by a cluster map: items are copied and may be re-sent
  BatchCallback done_;
  AcquireCallback one_done_;  // run_one() with an AcquireCallback
  std::atomic<std::size_t> outstanding_{0};
  std::uint64_t deadline_ns_ = 0;
  std::span<const AcquireRequest> items_;  // the caller's during run(), else copies_
  std::vector<AcquireRequest> copies_;     // keys point into key_bytes_
  std::vector<char> key_bytes_;
  std::vector<Result<Decision>> results_;
  std::vector<Policy> policies_;
  std::vector<std::uint32_t> owner_;  // planning scratch
  std::vector<std::uint32_t> start_;  // per owner: where its items start in order_
  std::vector<std::uint32_t> next_;
  std::vector<std::uint32_t> order_;  // item indices grouped by owner, then by part
  std::vector<Part> parts_;
  std::vector<protocol::AcquireResult> scratch_;  // I/O thread

  // Cluster retries, I/O thread only (written by the submitting thread before its first part).
  std::vector<std::uint8_t> redirected_;  // per item: a REDIRECT was followed already
  std::vector<std::uint32_t> redirect_wait_;
  std::vector<std::uint32_t> unavailable_wait_;
  std::vector<std::uint32_t> retry_order_;
  std::vector<Part> retry_parts_;
  std::vector<std::pair<std::size_t, std::uint32_t>> retry_owners_;  // resend()'s scratch
  bool waiting_for_map_ = false;
  bool pausing_ = false;
  std::uint64_t wait_epoch_ = 0;  // the epoch a REDIRECT named, waited for
  std::uint64_t jitter_;
  boost::asio::steady_timer pause_timer_;
  net::HandlerSlot pause_slot_;
  net::HandlerSlot post_slot_;
};

// Batches are pooled: a warm client reuses them and their vectors, so a batch call allocates
// nothing. Any thread takes one; the I/O thread gives it back after running its callback. A
// cluster's one-item calls draw from a pool of their own: a batch that served only single items
// would otherwise grow its vectors the first time it serves a whole batch, however warm.
class BatchPool {
 public:
  explicit BatchPool(Client::Impl& impl) : impl_(impl) {}
  ~BatchPool();
  AsyncBatch& take(bool one_item);
  void give(AsyncBatch& batch);
  // Calls `f` on every batch of the pool, in use or not.
  template <typename F>
  void for_each(F f) {
    std::lock_guard lock(mu_);
    for (auto& batch : all_) f(*batch);
  }

 private:
  Client::Impl& impl_;
  std::mutex mu_;
  std::vector<std::unique_ptr<AsyncBatch>> all_;
  std::vector<AsyncBatch*> free_;      // for batches of several items
  std::vector<AsyncBatch*> free_one_;  // for one-item calls
};

}  // namespace sluice::client::detail
