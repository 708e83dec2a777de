// close() from inside a callback: while a timeout expiry or a connection failure is completing
// calls, a callback that closes the client must not pull the list being completed from under
// it. Each callback captures more than two pointers, so std::function keeps it on the heap and
// AddressSanitizer sees any use of a callback destroyed while it runs.
#include "net/asio.h"  // before any other Asio header

#include <catch2/catch.hpp>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/client/test_support.h"

namespace sluice::client {
namespace {

using namespace std::chrono_literals;
using testing::CallbackLatch;
using testing::connect_or_fail;
using testing::FakeServer;
using testing::kHang;
using testing::options_for;
using testing::per_minute;

// What each call saw: how many times it was called back, and with what. Once every call has
// been answered the guard timer is cancelled, so io.run() returns only if the client left no
// work of its own behind.
struct Outcomes {
  Outcomes(boost::asio::io_context& io, std::size_t n)
      : calls(n, 0), codes(n, ErrorCode::kOk), guard(io, kHang) {
    guard.async_wait([this, &io](const boost::system::error_code& ec) {
      if (ec) return;
      hung = true;
      io.stop();
    });
  }
  std::vector<int> calls;
  std::vector<ErrorCode> codes;
  std::optional<std::size_t> closer;  // the call whose callback called close()
  boost::asio::steady_timer guard;
  std::size_t answered = 0;
  bool hung = false;
  void record(std::size_t i, ErrorCode code) {
    ++calls[i];
    codes[i] = code;
    if (++answered == calls.size()) guard.cancel();
  }
};

ErrorCode code_of(const Result<Decision>& d) { return d.ok() ? ErrorCode::kOk : d.code(); }

// The items' common error code; kOk when any item succeeded or they disagree.
ErrorCode common_code(std::span<const Result<Decision>> results) {
  const ErrorCode first = code_of(results[0]);
  for (const auto& r : results) {
    if (code_of(r) != first) return ErrorCode::kOk;
  }
  return first;
}

// Issues `n` calls of three kinds (acquire_async, one-item batches, two-item batches); every
// callback records its outcome after calling close() (the first one to run), so a callback
// destroyed by close() is used after it was freed.
void issue_closing_calls(Client& client, Outcomes& out, std::size_t n,
                         const std::vector<AcquireRequest>& one,
                         const std::vector<AcquireRequest>& two) {
  for (std::size_t i = 0; i < n; ++i) {
    switch (i % 3) {
      case 0:
        client.acquire_async(one[0], [&client, &out, i](Result<Decision> d) {
          if (!out.closer) {
            out.closer = i;
            client.close();
          }
          out.record(i, code_of(d));
        });
        break;
      case 1:
        client.acquire_batch_async(one, [&client, &out, i](std::span<const Result<Decision>> r) {
          if (!out.closer) {
            out.closer = i;
            client.close();
          }
          out.record(i, common_code(r));
        });
        break;
      default:
        client.acquire_batch_async(two, [&client, &out, i](std::span<const Result<Decision>> r) {
          if (!out.closer) {
            out.closer = i;
            client.close();
          }
          out.record(i, common_code(r));
        });
    }
  }
}

TEST_CASE("close() from a callback during a timeout expiry completes every call once") {
  FakeServer node(FakeServer::Mode::kHold);
  boost::asio::io_context io(1);
  ClientOptions options = options_for(node.address(), /*shard_aware=*/false);
  options.timeout = 50ms;  // every call times out: the node holds its replies
  auto connected = Client::connect(options, io);
  REQUIRE(connected.ok());
  Client& client = **connected;

  const std::vector<AcquireRequest> one = {{"close:expire", per_minute(5), 1}};
  const std::vector<AcquireRequest> two = {{"close:expire:a", per_minute(5), 1},
                                           {"close:expire:b", per_minute(5), 1}};
  constexpr std::size_t kCalls = 30;
  Outcomes out(io, kCalls);
  issue_closing_calls(client, out, kCalls, one, two);
  io.run();
  CHECK_FALSE(out.hung);
  REQUIRE(out.closer.has_value());
  CHECK(out.codes[*out.closer] == ErrorCode::kTimeout);
  for (std::size_t i = 0; i < kCalls; ++i) {
    INFO("call " << i);
    CHECK(out.calls[i] == 1);
    // Calls that expired in the closer's tick time out; the rest are closed.
    CHECK((out.codes[i] == ErrorCode::kTimeout || out.codes[i] == ErrorCode::kClosed));
  }
}

TEST_CASE("close() from a callback during a connection failure completes every call once") {
  FakeServer node(FakeServer::Mode::kHold);
  boost::asio::io_context io(1);
  ClientOptions options = options_for(node.address(), /*shard_aware=*/false);
  options.timeout = 60s;  // the lost connection, not the timeout, ends these calls
  auto connected = Client::connect(options, io);
  REQUIRE(connected.ok());
  Client& client = **connected;

  const std::vector<AcquireRequest> one = {{"close:drop", per_minute(5), 1}};
  const std::vector<AcquireRequest> two = {{"close:drop:a", per_minute(5), 1},
                                           {"close:drop:b", per_minute(5), 1}};
  constexpr std::size_t kCalls = 30;  // one frame each
  Outcomes out(io, kCalls);
  issue_closing_calls(client, out, kCalls, one, two);
  // Once the node holds every frame, cut the connection.
  boost::asio::steady_timer poll(io);
  std::function<void()> drop_when_held = [&] {
    poll.expires_after(1ms);
    poll.async_wait([&](const boost::system::error_code& ec) {
      if (ec || out.hung) return;
      if (node.acquires() < static_cast<int>(kCalls)) return drop_when_held();
      node.drop_connections();
    });
  };
  drop_when_held();
  io.run();
  CHECK_FALSE(out.hung);
  REQUIRE(out.closer.has_value());
  for (std::size_t i = 0; i < kCalls; ++i) {
    INFO("call " << i);
    CHECK(out.calls[i] == 1);
    CHECK(out.codes[i] == ErrorCode::kConnectionFailed);  // all were failed before close()
  }
}

TEST_CASE("a batch callback that calls close() keeps its results while close() ends others") {
  FakeServer node(FakeServer::Mode::kHold);
  boost::asio::io_context io(1);
  ClientOptions options = options_for(node.address(), /*shard_aware=*/false);
  options.timeout = 50ms;
  options.connections_per_shard = 2;  // the two batches go to different connections
  auto connected = Client::connect(options, io);
  REQUIRE(connected.ok());
  Client& client = **connected;

  const std::vector<AcquireRequest> two = {{"nested:a", per_minute(5), 1},
                                           {"nested:b", per_minute(5), 1}};
  std::vector<std::string> keys;
  for (int i = 0; i < 64; ++i) keys.push_back("nested:big:" + std::to_string(i));
  std::vector<AcquireRequest> big;
  for (const std::string& k : keys) big.push_back({k, per_minute(5), 1});

  Outcomes out(io, 3);
  // The first batch times out first; its callback closes the client, which fails the second
  // batch inside close(); that one's callback submits a bigger batch, refused. The first
  // callback then reads its own results, which must still be its own.
  client.acquire_batch_async(two, [&client, &out](std::span<const Result<Decision>> r) {
    out.closer = 0;
    client.close();
    out.record(0, common_code(r));
  });
  client.acquire_batch_async(two, [&client, &out, &big](std::span<const Result<Decision>> r) {
    client.acquire_batch_async(big, [&out](std::span<const Result<Decision>> refused) {
      out.record(2, common_code(refused));
    });
    out.record(1, common_code(r));
  });
  io.run();
  CHECK_FALSE(out.hung);
  CHECK(out.calls == std::vector<int>{1, 1, 1});
  CHECK(out.codes[0] == ErrorCode::kTimeout);
  CHECK(out.codes[1] == ErrorCode::kClosed);
  CHECK(out.codes[2] == ErrorCode::kClosed);
}

// The same with a client on its own I/O thread: close() from a callback, during a timeout
// expiry and during a connection failure.
struct ThreadedOutcomes {
  explicit ThreadedOutcomes(std::size_t n) : calls(n, 0), codes(n, ErrorCode::kOk) {}
  std::vector<int> calls;  // I/O thread; read after the latch
  std::vector<ErrorCode> codes;
  std::optional<std::size_t> closer;
  CallbackLatch latch;
  void record(std::size_t i, ErrorCode code) {
    ++calls[i];
    codes[i] = code;
    latch.count_down();
  }
};

void issue_closing_calls(Client& client, ThreadedOutcomes& out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    client.acquire_async("threaded:close", per_minute(5), 1,
                         [&client, &out, i](Result<Decision> d) {
                           if (!out.closer) {
                             out.closer = i;
                             client.close();
                           }
                           out.record(i, code_of(d));
                         });
  }
}

TEST_CASE("close() from a callback on the client's own I/O thread completes every call once") {
  FakeServer node(FakeServer::Mode::kHold);
  constexpr std::size_t kCalls = 20;

  SECTION("during a timeout expiry") {
    ClientOptions options = options_for(node.address(), /*shard_aware=*/false);
    options.timeout = 50ms;
    auto client = connect_or_fail(options);
    ThreadedOutcomes out(kCalls);
    issue_closing_calls(*client, out, kCalls);
    REQUIRE(out.latch.wait_for(kCalls, kHang));
    REQUIRE(out.closer.has_value());
    CHECK(out.codes[*out.closer] == ErrorCode::kTimeout);
    for (std::size_t i = 0; i < kCalls; ++i) {
      INFO("call " << i);
      CHECK(out.calls[i] == 1);
      CHECK((out.codes[i] == ErrorCode::kTimeout || out.codes[i] == ErrorCode::kClosed));
    }
    CHECK(client->acquire("threaded:after", per_minute(5)).code() == ErrorCode::kClosed);
    CHECK(out.latch.done() == kCalls);  // nothing called back twice meanwhile
  }

  SECTION("during a connection failure") {
    ClientOptions options = options_for(node.address(), /*shard_aware=*/false);
    options.timeout = 60s;
    auto client = connect_or_fail(options);
    ThreadedOutcomes out(kCalls);
    issue_closing_calls(*client, out, kCalls);
    REQUIRE(node.wait_acquires(static_cast<int>(kCalls), kHang));
    node.drop_connections();
    REQUIRE(out.latch.wait_for(kCalls, kHang));
    for (std::size_t i = 0; i < kCalls; ++i) {
      INFO("call " << i);
      CHECK(out.calls[i] == 1);
      CHECK(out.codes[i] == ErrorCode::kConnectionFailed);
    }
    CHECK(client->acquire("threaded:after", per_minute(5)).code() == ErrorCode::kClosed);
    CHECK(out.latch.done() == kCalls);
  }
}

TEST_CASE("a call made after close() returns is never sent while a write waits to start") {
  FakeServer node(FakeServer::Mode::kAnswer);
  auto client = connect_or_fail(options_for(node.address(), /*shard_aware=*/false));
  // Declared after the client, so it opens (and frees the I/O thread) before the client's
  // destructor joins that thread, whatever fails below.
  struct Gate {
    std::promise<void> promise;
    std::shared_future<void> future = promise.get_future().share();
    bool opened = false;
    void open() {
      if (!opened) promise.set_value();
      opened = true;
    }
    ~Gate() { open(); }
  } gate;

  // Hold the client's I/O thread inside a callback: the write of the next call is posted but
  // cannot start until the gate opens.
  CallbackLatch entered;
  client->acquire_async("close:holder", per_minute(5), 1, [&](Result<Decision>) {
    entered.count_down();
    gate.future.wait();
  });
  REQUIRE(entered.wait_for(1, kHang));

  CallbackLatch done;
  ErrorCode queued_code = ErrorCode::kOk;
  ErrorCode after_code = ErrorCode::kOk;
  client->acquire_async("close:queued", per_minute(5), 1, [&](Result<Decision> r) {
    queued_code = r.code();
    done.count_down();
  });
  client->close();
  client->acquire_async("close:after", per_minute(5), 1, [&](Result<Decision> r) {
    after_code = r.code();
    done.count_down();
  });
  gate.open();
  REQUIRE(done.wait_for(2, kHang));
  CHECK(queued_code == ErrorCode::kClosed);
  CHECK(after_code == ErrorCode::kClosed);
  // Only the holder's ACQUIRE reached the node. (Sent bytes arrive within milliseconds on
  // loopback; the wait only bounds the check.)
  CHECK_FALSE(node.wait_acquires(2, 500ms));
  CHECK(node.acquires() == 1);
}

}  // namespace
}  // namespace sluice::client
