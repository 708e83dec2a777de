// An intrusive, unbounded, lock-free multi-producer single-consumer queue (after Dmitry Vyukov's
// node-based MPSC queue). Shards use it to hand work to the shard that owns a key and to send
// the answers back (docs/ARCHITECTURE.md, "Cross-shard hand-over").
//
// Memory ordering:
//  - push() publishes a node with one exchange on head_ (acq_rel, made seq_cst so that the
//    wake-up protocol of the caller can pair it with a seq_cst flag) and one release store into
//    the previous node's `next`. Everything the producer wrote into the node before push()
//    happens-before the consumer's acquire load of that `next`, hence before pop() returns it.
//  - The exchange is also an acquire, so a producer's store into prev->next is ordered after
//    the previous producer's reset of that same field.
//  - pop() may return nullptr while a producer is between its exchange and its link store: the
//    queue is then not empty (empty() says so) and the consumer must try again later.
#pragma once

#include <atomic>
#include <type_traits>

namespace sluice::server {

// The link embedded in every queued object. A node is in at most one queue at a time and must
// outlive its stay in the queue; the queue never allocates or frees.
struct MpscNode {
  std::atomic<MpscNode*> next{nullptr};
};

template <typename T>
class MpscQueue {
  static_assert(std::is_base_of_v<MpscNode, T>, "queued types derive from MpscNode");

 public:
  MpscQueue() : head_(&stub_), tail_(&stub_) {}
  MpscQueue(const MpscQueue&) = delete;
  MpscQueue& operator=(const MpscQueue&) = delete;

  // Any thread. Wait-free: one exchange and one store.
  void push(T* item) { link(item); }

  // Consumer thread only. Returns the oldest node, or nullptr when the queue is empty or a
  // push is half done (see empty()). FIFO per producer; pushes from different producers are
  // ordered by their exchange on head_.
  T* pop() {
    MpscNode* tail = tail_;
    MpscNode* next = tail->next.load(std::memory_order_acquire);
    if (tail == &stub_) {
      if (next == nullptr) return nullptr;
      tail_ = next;  // skip the stub
      tail = next;
      next = next->next.load(std::memory_order_acquire);
    }
    if (next != nullptr) {
      tail_ = next;
      return static_cast<T*>(tail);
    }
    // `tail` is the last linked node. Unless a producer has already swung head_ past it (and
    // not yet linked), put the stub behind it so that `tail` can be handed out.
    if (tail != head_.load(std::memory_order_acquire)) return nullptr;
    link(&stub_);
    next = tail->next.load(std::memory_order_acquire);
    if (next != nullptr) {
      tail_ = next;
      return static_cast<T*>(tail);
    }
    return nullptr;  // another producer got in between; its link is still pending
  }

  // Consumer thread only. True when nothing is queued and no push is in progress. The load of
  // head_ is seq_cst: a consumer that stores "not scheduled" (seq_cst) and then finds the queue
  // empty cannot miss a producer that pushes and then reads the flag (both seq_cst).
  bool empty() const { return tail_ == &stub_ && head_.load(std::memory_order_seq_cst) == &stub_; }

 private:
  void link(MpscNode* node) {
    node->next.store(nullptr, std::memory_order_relaxed);
    MpscNode* prev = head_.exchange(node, std::memory_order_seq_cst);
    prev->next.store(node, std::memory_order_release);
  }

  alignas(64) std::atomic<MpscNode*> head_;  // producers' end: the newest node
  alignas(64) MpscNode* tail_;               // consumer's end: the oldest node (or the stub)
  MpscNode stub_;
};

}  // namespace sluice::server
