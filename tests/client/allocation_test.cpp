// The hot path allocates nothing once buffers have grown: counted per thread (the caller's
// and the client's I/O thread) with a replaced global operator new. Skipped under
// AddressSanitizer, which owns operator new there.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // the replaced new/delete pair up
#include <catch2/catch.hpp>
#include <cstdlib>
#include <new>

#include "client/client.h"
#include "tests/client/test_support.h"

#if defined(__SANITIZE_ADDRESS__)
#define SLUICE_COUNT_ALLOCATIONS 0
#else
#define SLUICE_COUNT_ALLOCATIONS 1
#endif

#if SLUICE_COUNT_ALLOCATIONS
namespace {
thread_local std::uint64_t tl_allocations = 0;
}

void* operator new(std::size_t n) {
  ++tl_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace sluice::client {
namespace {

using namespace std::chrono_literals;
using testing::CallbackLatch;
using testing::connect_or_fail;
using testing::options_for;
using testing::TestServer;

Rule generous_rule() {
  Rule r;
  r.limit = 1'000'000;
  r.period_ms = 60'000;
  return r;
}

// The I/O thread's allocation count, read on that thread.
std::uint64_t io_thread_allocations(Client& client) {
  std::uint64_t count = 0;
  CallbackLatch latch;
  client.acquire_async("alloc:probe", generous_rule(), 1, [&count, &latch](Result<Decision>) {
    count = tl_allocations;
    latch.count_down();
  });
  latch.wait_for(1, 5s);
  return count;
}

const char* const kKeys[] = {"alloc:a", "alloc:b", "alloc:c", "alloc:d"};

TEST_CASE("sync acquires allocate nothing once warmed up") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  const Rule rule = generous_rule();
  for (int i = 0; i < 2000; ++i) (void)client->acquire(kKeys[i % 4], rule);

  const std::uint64_t io_before = io_thread_allocations(*client);
  const std::uint64_t caller_before = tl_allocations;
  int failures = 0;
  for (int i = 0; i < 1000; ++i) {
    if (!client->acquire(kKeys[i % 4], rule).ok()) ++failures;
  }
  const std::uint64_t caller_after = tl_allocations;
  const std::uint64_t io_after = io_thread_allocations(*client);
  CHECK(failures == 0);
  CHECK(caller_after - caller_before == 0);
  CHECK(io_after - io_before == 0);
}

TEST_CASE("async acquires in flight allocate nothing once warmed up") {
  TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  const Rule rule = generous_rule();
  auto burst = [&](std::size_t n, std::uint64_t* caller_allocations) {
    CallbackLatch latch;
    const std::uint64_t before = tl_allocations;
    for (std::size_t i = 0; i < n; ++i) {
      client->acquire_async(kKeys[i % 4], rule, 1,
                            [&latch](Result<Decision>) { latch.count_down(); });
    }
    if (caller_allocations != nullptr) *caller_allocations = tl_allocations - before;
    return latch.wait_for(n, 10s);
  };
  // Warm up with bigger bursts than the measured one, so the pending ring has grown.
  REQUIRE(burst(2000, nullptr));
  REQUIRE(burst(2000, nullptr));

  const std::uint64_t io_before = io_thread_allocations(*client);
  std::uint64_t caller = 0;
  REQUIRE(burst(1000, &caller));
  const std::uint64_t io_after = io_thread_allocations(*client);
  CHECK(caller == 0);
  CHECK(io_after - io_before == 0);
}

}  // namespace
}  // namespace sluice::client
#endif  // SLUICE_COUNT_ALLOCATIONS
