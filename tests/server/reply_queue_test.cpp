#include "server/reply_queue.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::server {
namespace {

// Appends `n` bytes that continue the sequence 0, 1, 2, ... (mod 251) from `next`.
void append(ReplyQueue& queue, std::size_t n, std::uint32_t& next) {
  for (std::size_t i = 0; i < n; ++i)
    queue.tail().push_back(static_cast<std::uint8_t>(next++ % 251));
}

// Everything start_write() hands over, in order.
std::vector<std::uint8_t> take_all(ReplyQueue& queue) {
  std::vector<std::uint8_t> out;
  for (const protocol::Bytes& block : queue.start_write())
    out.insert(out.end(), block.begin(), block.end());
  return out;
}

bool is_sequence(const std::vector<std::uint8_t>& bytes, std::uint32_t from) {
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != static_cast<std::uint8_t>((from + i) % 251)) return false;
  }
  return true;
}

TEST_CASE("a tail one byte short of kSealAt stays the tail, and one at kSealAt is sealed",
          "[reply_queue]") {
  ReplyQueue queue;
  std::uint32_t next = 0;
  queue.tail().reserve(ReplyQueue::kSealAt);  // full: less than kTurnRoom left either way
  append(queue, ReplyQueue::kSealAt - 1, next);
  queue.prepare_tail();
  CHECK_FALSE(queue.has_sealed());
  CHECK(queue.tail().size() == ReplyQueue::kSealAt - 1);
  append(queue, 1, next);
  queue.prepare_tail();
  CHECK(queue.has_sealed());
  CHECK(queue.tail().empty());
  // The fresh tail holds a block, so that the next turns append without regrowing.
  CHECK(queue.tail().capacity() >= ReplyQueue::kBlock);
  CHECK(queue.queued() == ReplyQueue::kSealAt);
  CHECK(queue.size() == ReplyQueue::kSealAt);
}

TEST_CASE("a tail with kTurnRoom or more left is not sealed, even past kSealAt", "[reply_queue]") {
  ReplyQueue queue;
  std::uint32_t next = 0;
  queue.tail().reserve(4 * ReplyQueue::kBlock);
  append(queue, ReplyQueue::kSealAt, next);
  queue.prepare_tail();
  CHECK_FALSE(queue.has_sealed());
  append(queue, 4 * ReplyQueue::kBlock - ReplyQueue::kTurnRoom - ReplyQueue::kSealAt, next);
  queue.prepare_tail();
  CHECK_FALSE(queue.has_sealed());
  append(queue, 1, next);  // now less than kTurnRoom is left
  queue.prepare_tail();
  CHECK(queue.has_sealed());
}

TEST_CASE("blocks grow with what is sealed, from kBlock up to kMaxBlock, and never regrow",
          "[reply_queue]") {
  ReplyQueue queue;
  std::uint32_t next = 0;
  std::size_t largest = 0;
  // Turns of 16 KiB, as SocketPeer::kTurnOutput makes them, up to 8 MiB queued.
  while (queue.queued() < 8u << 20) {
    const std::size_t capacity = queue.tail().capacity();
    append(queue, 16 * 1024, next);
    // A block always has room for a turn: appending to it never copies it.
    if (capacity >= ReplyQueue::kBlock) CHECK(queue.tail().capacity() == capacity);
    queue.prepare_tail();
    CHECK(queue.tail().capacity() <= ReplyQueue::kMaxBlock);
    largest = std::max(largest, queue.tail().capacity());
  }
  CHECK(largest == ReplyQueue::kMaxBlock);
  // Each sealed block is full but for less than kTurnRoom; the tail is a block at most.
  const std::size_t queued = queue.queued();
  CHECK(queue.held() <= queued + queued / 8 + ReplyQueue::kMaxBlock);
  const std::vector<std::uint8_t> all = take_all(queue);
  CHECK(all.size() == queued);
  CHECK(is_sequence(all, 0));
  CHECK(queue.queued() == 0);
  CHECK(queue.in_flight() == queued);
}

TEST_CASE("a fresh block's first kPopulateAhead bytes are resident before they are written",
          "[reply_queue]") {
  ReplyQueue queue;
  std::uint32_t next = 0;
  queue.tail().reserve(ReplyQueue::kSealAt);
  append(queue, ReplyQueue::kSealAt, next);
  queue.prepare_tail();
  REQUIRE(queue.has_sealed());
  const protocol::Bytes& tail = queue.tail();
  REQUIRE(tail.empty());
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto from = reinterpret_cast<std::uintptr_t>(tail.data()) & ~(page - 1);
  const std::uintptr_t to =
      reinterpret_cast<std::uintptr_t>(tail.data()) + ReplyQueue::kPopulateAhead;
  std::vector<unsigned char> resident((to - from + page - 1) / page);
  REQUIRE(::mincore(reinterpret_cast<void*>(from), to - from, resident.data()) == 0);
  std::size_t missing = 0;
  for (const unsigned char r : resident) missing += (r & 1) ? 0 : 1;
  CHECK(missing == 0);
}

TEST_CASE("the writer gets sealed blocks and the tail in order, and later bytes after them",
          "[reply_queue]") {
  ReplyQueue queue;
  std::uint32_t next = 0;
  for (int turn = 0; turn < 20; ++turn) {
    append(queue, 20'000, next);
    queue.prepare_tail();
  }
  CHECK(queue.has_sealed());
  const std::vector<std::uint8_t> first = take_all(queue);
  CHECK(first.size() == 400'000);
  CHECK(is_sequence(first, 0));
  // Appended while the write is in flight: they wait for the next write.
  append(queue, 1000, next);
  queue.prepare_tail();
  CHECK(queue.size() == 401'000);
  queue.finish_write();
  CHECK(queue.in_flight() == 0);
  const std::vector<std::uint8_t> second = take_all(queue);
  CHECK(second.size() == 1000);
  CHECK(is_sequence(second, 400'000));
  queue.finish_write();
  CHECK(queue.size() == 0);
}

TEST_CASE("a tail sent in part directly keeps its remaining bytes first", "[reply_queue]") {
  ReplyQueue queue;
  std::uint32_t next = 0;
  append(queue, 5000, next);
  queue.consume_tail(1200);
  CHECK(queue.queued() == 3800);
  const std::vector<std::uint8_t> rest = take_all(queue);
  CHECK(is_sequence(rest, 1200));
}

TEST_CASE("an emptied tail above kKeepEmpty is freed, and one at it is kept", "[reply_queue]") {
  ReplyQueue queue;
  std::uint32_t next = 0;
  queue.tail().reserve(ReplyQueue::kKeepEmpty);
  append(queue, 100, next);
  queue.consume_tail(100);
  CHECK(queue.tail().capacity() >= ReplyQueue::kKeepEmpty);
  queue.tail().reserve(ReplyQueue::kKeepEmpty + 1);
  append(queue, 100, next);
  queue.consume_tail(100);
  CHECK(queue.tail().capacity() == 0);
  CHECK(queue.held() == 0);
}

TEST_CASE("dropping frees what is queued and keeps what is in flight", "[reply_queue]") {
  ReplyQueue queue;
  std::uint32_t next = 0;
  append(queue, 300'000, next);
  queue.prepare_tail();
  const std::size_t in_flight = take_all(queue).size();
  for (int turn = 0; turn < 10; ++turn) {
    append(queue, 50'000, next);
    queue.prepare_tail();
  }
  queue.drop_queued();
  CHECK(queue.queued() == 0);
  CHECK(queue.in_flight() == in_flight);
  queue.finish_write();
  CHECK(queue.held() <= ReplyQueue::kKeepEmpty);
}

}  // namespace
}  // namespace sluice::server
