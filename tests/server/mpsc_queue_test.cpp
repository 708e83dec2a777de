#include "server/mpsc_queue.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace sluice::server {
namespace {

struct Item : MpscNode {
  unsigned producer = 0;
  std::uint32_t sequence = 0;
};

TEST_CASE("an empty queue pops nothing and says it is empty", "[mpsc]") {
  MpscQueue<Item> queue;
  CHECK(queue.empty());
  CHECK(queue.pop() == nullptr);
  CHECK(queue.empty());
}

TEST_CASE("a single thread gets items back in the order it pushed them", "[mpsc]") {
  MpscQueue<Item> queue;
  std::vector<Item> items(1000);
  for (std::uint32_t i = 0; i < items.size(); ++i) items[i].sequence = i;

  // Interleave pushes and pops so that the stub is re-inserted many times.
  std::uint32_t expected = 0;
  for (std::uint32_t i = 0; i < items.size(); ++i) {
    queue.push(&items[i]);
    CHECK_FALSE(queue.empty());
    if (i % 3 == 2) {
      while (Item* item = queue.pop()) {
        REQUIRE(item->sequence == expected);
        ++expected;
      }
      CHECK(queue.empty());
    }
  }
  while (Item* item = queue.pop()) {
    REQUIRE(item->sequence == expected);
    ++expected;
  }
  CHECK(expected == items.size());
  CHECK(queue.empty());
}

TEST_CASE("a node can be pushed again after it was popped", "[mpsc]") {
  MpscQueue<Item> queue;
  Item item;
  for (int round = 0; round < 5; ++round) {
    queue.push(&item);
    REQUIRE(queue.pop() == &item);
    REQUIRE(queue.pop() == nullptr);
  }
}

TEST_CASE("four producers: every item arrives exactly once, in order per producer", "[mpsc]") {
  constexpr unsigned kProducers = 4;
  constexpr std::uint32_t kPerProducer = 100'000;
  MpscQueue<Item> queue;
  std::vector<std::vector<Item>> items;
  for (unsigned p = 0; p < kProducers; ++p) {
    items.emplace_back(kPerProducer);
    for (std::uint32_t i = 0; i < kPerProducer; ++i) {
      items[p][i].producer = p;
      items[p][i].sequence = i;
    }
  }

  std::vector<std::thread> producers;
  for (unsigned p = 0; p < kProducers; ++p) {
    producers.emplace_back([&queue, &items, p] {
      for (Item& item : items[p]) queue.push(&item);
    });
  }

  // The consumer: next expected sequence per producer; any duplicate, loss or reordering
  // shows up as a mismatch. Bounded in time so a lost item fails instead of hanging.
  std::vector<std::uint32_t> next(kProducers, 0);
  std::uint64_t received = 0;
  bool in_order = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (received < std::uint64_t{kProducers} * kPerProducer &&
         std::chrono::steady_clock::now() < deadline) {
    Item* item = queue.pop();
    if (item == nullptr) {
      std::this_thread::yield();
      continue;
    }
    if (item->sequence != next[item->producer]) in_order = false;
    next[item->producer] = item->sequence + 1;
    ++received;
  }
  for (auto& t : producers) t.join();

  CHECK(in_order);
  CHECK(received == std::uint64_t{kProducers} * kPerProducer);
  for (unsigned p = 0; p < kProducers; ++p) CHECK(next[p] == kPerProducer);
  CHECK(queue.pop() == nullptr);
  CHECK(queue.empty());
}

}  // namespace
}  // namespace sluice::server
