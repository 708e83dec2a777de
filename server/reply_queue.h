// ReplyQueue: the output of one connection (server/socket_peer.h), from the handlers that append
// replies to the writer that sends them. Handlers append to tail(); once the tail holds kSealAt
// bytes it is sealed into a chain of blocks and a fresh tail of kBlock bytes begins. So output
// backed up by a client that does not read grows block by block: no buffer is ever copied to
// grow, each block is first touched as it fills (not all at once, as a doubling buffer is, for
// every connection that reaches the same size in the same turn of its shard), and each is
// mapped on its own (kBlock is sluiced's M_MMAP_THRESHOLD) and unmapped once sent or dropped.
// The pages just ahead of a block's fill are made resident in one call (MADV_POPULATE_WRITE)
// rather than by a page fault each, several times dearer. A client that reads never fills a
// tail: its replies go out of one buffer, reused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "protocol/messages.h"

namespace sluice::server {

class ReplyQueue {
 public:
  // The least and the most a fresh tail holds after a seal: as much as is sealed before it,
  // within these bounds, so a connection that does not read at --max-queued-output holds a
  // few blocks.
  static constexpr std::size_t kBlock = 128 * 1024;
  static constexpr std::size_t kMaxBlock = 1024 * 1024;
  // A tail is sealed once it holds kSealAt and has less than kTurnRoom left. A turn of a
  // connection adds up to SocketPeer::kTurnOutput and one reply beyond it before the next
  // seal: with that room, a block of a connection whose replies are small never regrows.
  static constexpr std::size_t kTurnRoom = 32 * 1024;
  static constexpr std::size_t kSealAt = kBlock - kTurnRoom;
  // A block's next pages are made resident up to this far ahead of its fill, at least half of
  // it at a time: what it holds resident beyond its bytes (and within its capacity).
  static constexpr std::size_t kPopulateAhead = 128 * 1024;
  // An empty tail (or the last block written, kept for the next tail) keeps up to this much
  // capacity; larger buffers are freed, so a burst does not pin its peak.
  static constexpr std::size_t kKeepEmpty = 256 * 1024;

  // Replies are appended here, after everything queued.
  protocol::Bytes& tail() { return tail_; }

  // Bytes not yet handed to the writer, bytes in flight, and both together.
  std::size_t queued() const { return sealed_bytes_ + tail_.size(); }
  std::size_t in_flight() const { return writing_bytes_; }
  std::size_t size() const { return queued() + in_flight(); }
  // Bytes of buffers held (capacity, whether written or not): what the buffer budget counts.
  std::size_t held() const {
    return tail_.capacity() + spare_.capacity() + sealed_capacity_ + writing_capacity_;
  }
  bool has_sealed() const { return !sealed_.empty(); }

  // After a turn of handlers: seals the tail into the chain when it is full, and makes the
  // pages of a block's tail up to kPopulateAhead past its fill resident.
  void prepare_tail();

  // Hands everything queued to the writer, in order; returns the blocks to send.
  // REQUIRES: nothing in flight (finish_write() after the last start_write()).
  std::span<const protocol::Bytes> start_write();
  // The blocks of start_write() are sent (or the send failed): frees them, keeping one buffer
  // of at most kKeepEmpty for the next tail.
  void finish_write();

  // The first `n` bytes of the tail were sent directly (not through start_write()).
  // REQUIRES: no sealed block (they go before the tail), n <= tail().size().
  void consume_tail(std::size_t n);

  // Drops everything queued (not what is in flight) and frees its buffers.
  void drop_queued();

 private:
  void seal_if_full();
  void populate_ahead();

  protocol::Bytes tail_;
  protocol::Bytes spare_;  // an empty buffer for the next tail
  // The bytes [0, populated_) of the buffer at populated_in_ (the tail, unless it changed
  // since) are resident.
  const std::uint8_t* populated_in_ = nullptr;
  std::size_t populated_ = 0;
  std::vector<protocol::Bytes> sealed_;
  std::vector<protocol::Bytes> writing_;
  std::size_t sealed_bytes_ = 0;
  std::size_t sealed_capacity_ = 0;
  std::size_t writing_bytes_ = 0;
  std::size_t writing_capacity_ = 0;
};

}  // namespace sluice::server
