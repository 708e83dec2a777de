#include "server/one_slot_allocator.h"

#include <array>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>

using sluice::server::HandlerSlot;
using sluice::server::OneSlotAllocator;

TEST_CASE("the first allocation takes the slot and a second one while it is taken does not") {
  HandlerSlot slot;
  OneSlotAllocator<std::uint64_t> alloc(slot);
  std::uint64_t* first = alloc.allocate(4);
  CHECK(reinterpret_cast<std::byte*>(first) == slot.bytes);
  CHECK(slot.taken);
  std::uint64_t* second = alloc.allocate(4);
  CHECK(reinterpret_cast<std::byte*>(second) != slot.bytes);
  alloc.deallocate(second, 4);
  CHECK(slot.taken);  // freeing the heap block leaves the slot taken
  alloc.deallocate(first, 4);
  CHECK_FALSE(slot.taken);
  CHECK(reinterpret_cast<std::byte*>(alloc.allocate(1)) == slot.bytes);  // free again
}

TEST_CASE("an allocation larger than the slot goes to the heap and leaves the slot free") {
  HandlerSlot slot;
  OneSlotAllocator<std::array<std::byte, sizeof(HandlerSlot::bytes) + 1>> alloc(slot);
  auto* big = alloc.allocate(1);
  CHECK(reinterpret_cast<std::byte*>(big) != slot.bytes);
  CHECK_FALSE(slot.taken);
  alloc.deallocate(big, 1);
  // Exactly the slot's size fits.
  OneSlotAllocator<std::array<std::byte, sizeof(HandlerSlot::bytes)>> fits(slot);
  CHECK(reinterpret_cast<std::byte*>(fits.allocate(1)) == slot.bytes);
}

TEST_CASE("copies rebound to another type share the slot") {
  HandlerSlot slot;
  const OneSlotAllocator<void> base(slot);
  OneSlotAllocator<int> ints(base);
  OneSlotAllocator<double> doubles(ints);
  CHECK(ints == doubles);
  int* p = ints.allocate(1);
  CHECK(slot.taken);
  double* q = doubles.allocate(1);
  CHECK(reinterpret_cast<std::byte*>(q) != slot.bytes);
  doubles.deallocate(q, 1);
  ints.deallocate(p, 1);
  CHECK_FALSE(slot.taken);
}
