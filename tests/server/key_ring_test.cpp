#include "server/key_ring.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>

namespace sluice::server {
namespace {

KeyHash key(std::uint64_t i) { return KeyHash{i, ~i}; }

TEST_CASE("a key ring keeps keys in the order they came and pops the oldest first", "[key_ring]") {
  KeyRing ring(100);
  CHECK(ring.empty());
  for (std::uint64_t i = 0; i < 40; ++i) CHECK_FALSE(ring.push_back(key(i)));
  REQUIRE(ring.size() == 40);
  for (std::uint64_t i = 0; i < 40; ++i) CHECK(ring[i] == key(i));
  for (std::uint64_t i = 0; i < 25; ++i) {
    CHECK(ring.front() == key(i));
    ring.pop_front();
  }
  // Wrapped around the buffer's end: still in order.
  for (std::uint64_t i = 40; i < 60; ++i) CHECK_FALSE(ring.push_back(key(i)));
  REQUIRE(ring.size() == 35);
  for (std::uint64_t i = 0; i < 35; ++i) CHECK(ring[i] == key(25 + i));
  ring.clear();
  CHECK(ring.empty());
}

TEST_CASE("a key ring at its bound drops exactly the oldest key for each one pushed",
          "[key_ring]") {
  KeyRing ring(5);
  for (std::uint64_t i = 0; i < 5; ++i) CHECK_FALSE(ring.push_back(key(i)));
  CHECK(ring.push_back(key(5)));
  CHECK(ring.push_back(key(6)));
  REQUIRE(ring.size() == 5);
  for (std::uint64_t i = 0; i < 5; ++i) CHECK(ring[i] == key(2 + i));
  // One below the bound: no drop.
  ring.pop_front();
  CHECK_FALSE(ring.push_back(key(7)));
  CHECK(ring.front() == key(3));
}

TEST_CASE("a key ring grows up to its bound and then never allocates again", "[key_ring]") {
  KeyRing ring(1000);
  for (std::uint64_t i = 0; i < 1000; ++i) ring.push_back(key(i));
  const std::size_t grown = ring.capacity();
  CHECK(grown >= 1000);
  CHECK(grown == 1024);  // the next power of two, no more
  for (std::uint64_t i = 0; i < 100'000; ++i) {
    if (i % 3 == 0) ring.pop_front();
    ring.push_back(key(1000 + i));
  }
  CHECK(ring.capacity() == grown);
  CHECK(ring.size() == 1000);
}

TEST_CASE("a full key ring of 65536 keys takes two million more in constant time each",
          "[key_ring]") {
  // Dropping the front of a vector moves every key: 2M drops at 65,536 keys would move about
  // 2 TB. The ring moves none, so this takes milliseconds; the bound is loose on purpose.
  KeyRing ring(1u << 16);
  for (std::uint64_t i = 0; i < (1u << 16); ++i) ring.push_back(key(i));
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t dropped = 0;
  for (std::uint64_t i = 0; i < 2'000'000; ++i) dropped += ring.push_back(key((1u << 16) + i));
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(dropped == 2'000'000);
  CHECK(ring.front() == key(2'000'000));
  CHECK(ring[ring.size() - 1] == key((1u << 16) + 1'999'999));
  CHECK(took < std::chrono::seconds(2));
}

}  // namespace
}  // namespace sluice::server
