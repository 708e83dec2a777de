#include "server/reply_queue.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <utility>

namespace sluice::server {

void ReplyQueue::prepare_tail() {
  seal_if_full();
  populate_ahead();
}

void ReplyQueue::populate_ahead() {
  // Below kBlock a tail is a heap buffer that small replies fill: left to the allocator.
  if (tail_.capacity() < kBlock) return;
  // A tail regrown by a large reply is another buffer: count from its start.
  if (tail_.data() != populated_in_) populated_ = 0;
  populated_in_ = tail_.data();
  if (tail_.size() + kPopulateAhead / 2 <= populated_) return;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto base = reinterpret_cast<std::uintptr_t>(tail_.data());
  const std::size_t end = std::min(tail_.capacity(), tail_.size() + kPopulateAhead);
  // From the page holding byte populated_ (it may be resident already: populating it again
  // changes nothing). An older kernel refuses the advice: the pages then fault one by one.
  const std::uintptr_t from = (base + populated_) & ~(page - 1);
  ::madvise(reinterpret_cast<void*>(from), base + end - from, MADV_POPULATE_WRITE);
  populated_ = end;
}

void ReplyQueue::seal_if_full() {
  if (tail_.size() < kSealAt || tail_.size() + kTurnRoom <= tail_.capacity()) return;
  sealed_bytes_ += tail_.size();
  sealed_capacity_ += tail_.capacity();
  sealed_.push_back(std::exchange(tail_, std::exchange(spare_, {})));
  tail_.clear();
  populated_ = 0;
  // As large as what is sealed, within [kBlock, kMaxBlock]: few blocks (each freed by a
  // munmap of its own) for a connection at --max-queued-output.
  const std::size_t block = std::clamp(std::bit_ceil(sealed_bytes_), kBlock, kMaxBlock);
  if (tail_.capacity() < block) {
    protocol::Bytes fresh;
    fresh.reserve(block);
    tail_.swap(fresh);
  }
}

std::span<const protocol::Bytes> ReplyQueue::start_write() {
  writing_.swap(sealed_);  // sealed_ gets the empty list back, with its capacity
  writing_bytes_ = std::exchange(sealed_bytes_, 0);
  writing_capacity_ = std::exchange(sealed_capacity_, 0);
  if (!tail_.empty()) {
    writing_bytes_ += tail_.size();
    writing_capacity_ += tail_.capacity();
    writing_.push_back(std::exchange(tail_, std::exchange(spare_, {})));
    tail_.clear();
    populated_ = 0;
  }
  return writing_;
}

void ReplyQueue::finish_write() {
  if (!writing_.empty() && spare_.capacity() == 0 && writing_.back().capacity() <= kKeepEmpty) {
    spare_ = std::move(writing_.back());
    spare_.clear();
  }
  writing_.clear();
  writing_bytes_ = 0;
  writing_capacity_ = 0;
}

void ReplyQueue::consume_tail(std::size_t n) {
  tail_.erase(tail_.begin(), tail_.begin() + static_cast<std::ptrdiff_t>(n));
  if (tail_.empty() && tail_.capacity() > kKeepEmpty) {
    protocol::Bytes().swap(tail_);
    populated_ = 0;
  }
}

void ReplyQueue::drop_queued() {
  protocol::Bytes().swap(tail_);
  populated_ = 0;
  protocol::Bytes().swap(spare_);
  sealed_.clear();
  sealed_bytes_ = 0;
  sealed_capacity_ = 0;
}

}  // namespace sluice::server
