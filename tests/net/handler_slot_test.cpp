#include "net/handler_slot.h"

#include <array>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>

using sluice::net::HandlerSlot;
using sluice::net::SlotAllocator;

TEST_CASE("the first allocation takes the slot and a second one while it is taken does not") {
  HandlerSlot slot;
  SlotAllocator<std::uint64_t> alloc(slot);
  std::uint64_t* first = alloc.allocate(4);
  CHECK(slot.owns(first));
  CHECK(slot.in_use());
  std::uint64_t* second = alloc.allocate(4);
  CHECK_FALSE(slot.owns(second));
  alloc.deallocate(second, 4);
  CHECK(slot.in_use());  // freeing the heap block leaves the slot taken
  alloc.deallocate(first, 4);
  CHECK_FALSE(slot.in_use());
  std::uint64_t* again = alloc.allocate(1);
  CHECK(slot.owns(again));  // free again
  alloc.deallocate(again, 1);
}

TEST_CASE("an allocation larger than the slot goes to the heap and leaves the slot free") {
  HandlerSlot slot;
  SlotAllocator<std::array<std::byte, HandlerSlot::kBytes + 1>> alloc(slot);
  auto* big = alloc.allocate(1);
  CHECK_FALSE(slot.owns(big));
  CHECK_FALSE(slot.in_use());
  alloc.deallocate(big, 1);
  // Exactly the slot's size fits.
  SlotAllocator<std::array<std::byte, HandlerSlot::kBytes>> fits(slot);
  auto* exact = fits.allocate(1);
  CHECK(slot.owns(exact));
  fits.deallocate(exact, 1);
}

TEST_CASE("copies rebound to another type share the slot") {
  HandlerSlot slot;
  const SlotAllocator<void> base(slot);
  SlotAllocator<int> ints(base);
  SlotAllocator<double> doubles(ints);
  CHECK(ints == doubles);
  int* p = ints.allocate(1);
  CHECK(slot.in_use());
  double* q = doubles.allocate(1);
  CHECK_FALSE(slot.owns(q));
  doubles.deallocate(q, 1);
  ints.deallocate(p, 1);
  CHECK_FALSE(slot.in_use());
}

TEST_CASE("a handler wrapped by in_slot runs unchanged and reports the slot's allocator") {
  HandlerSlot slot;
  int called = 0;
  auto handler = sluice::net::in_slot(slot, [&called](int n) { called += n; });
  CHECK(handler.get_allocator().slot() == &slot);
  handler(3);
  handler(4);
  CHECK(called == 7);
}
