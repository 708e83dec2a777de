// http::GrpcServer on 127.0.0.1, asked by tests/grpc/h2_client.h (nghttp2's client, every
// header and byte chosen by the test): calls, answers from other threads, deadlines, each
// refusal on its own stream, and each limit at its edge. Real gRPC clients (grpc++ and Python's
// grpcio) ask it through the gateway in tests/rls.
#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http/grpc_server.h"
#include "tests/grpc/h2_client.h"
#include "tests/http/http_test_support.h"

namespace sluice::http {
namespace {

using namespace std::chrono_literals;
using test::h2::Client;
using test::h2::framed;
using test::h2::grpc_headers;
using test::h2::kSlack;
using Clock = std::chrono::steady_clock;

constexpr const char* kEcho = "/test.Echo/Say";
constexpr const char* kHold = "/test.Echo/Hold";

// A GrpcServer with two methods: Say answers its message reversed at once; Hold keeps the call
// for the test to answer (held()). Its io_context runs on two threads.
class Fixture {
 public:
  explicit Fixture(GrpcLimits limits = {}) : server_(io_, limits) {
    server_.add_method(kEcho, [](GrpcCall call) {
      std::string reply(call.message().rbegin(), call.message().rend());
      call.answer(std::move(reply));
    });
    server_.add_method(kHold, [this](GrpcCall call) {
      std::lock_guard lock(mu_);
      held_.push_back(std::move(call));
    });
    server_.start("127.0.0.1", 0);
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { io_.run(); });
  }
  // Stops the server (a test may have already), waits for its `stopped`, then lets the io
  // threads run out of work: they return only when the server has left none behind.
  ~Fixture() {
    {
      std::lock_guard lock(mu_);
      held_.clear();  // unanswered: INTERNAL
    }
    std::promise<void> done;
    server_.stop(0ms, [&] { done.set_value(); });
    done.get_future().wait();
    guard_.reset();
    for (auto& t : threads_) t.join();
  }

  // The calls Hold has kept so far, taken by the test.
  std::vector<GrpcCall> held(std::size_t at_least) {
    const auto until = Clock::now() + 5s * kSlack;
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (held_.size() >= at_least) return std::move(held_);
      }
      REQUIRE(Clock::now() < until);
      std::this_thread::sleep_for(1ms);
    }
  }

  GrpcServer& server() { return server_; }
  std::uint16_t port() const { return server_.port(); }

 private:
  boost::asio::io_context io_;
  GrpcServer server_;
  std::mutex mu_;
  std::vector<GrpcCall> held_;  // under mu_
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_{
      io_.get_executor()};
  std::vector<std::thread> threads_;
};

TEST_CASE("grpc server: grpc-timeout values and grpc-message's percent-encoding") {
  CHECK(parse_grpc_timeout("1H") == 3600s);
  CHECK(parse_grpc_timeout("2M") == 120s);
  CHECK(parse_grpc_timeout("3S") == 3s);
  CHECK(parse_grpc_timeout("4m") == 4ms);
  CHECK(parse_grpc_timeout("5u") == 5us);
  CHECK(parse_grpc_timeout("99999999n") == 99999999ns);  // 8 digits: the most
  CHECK_FALSE(parse_grpc_timeout("123456789n"));
  CHECK_FALSE(parse_grpc_timeout("S"));
  CHECK_FALSE(parse_grpc_timeout("10"));
  CHECK_FALSE(parse_grpc_timeout("10s"));
  CHECK_FALSE(parse_grpc_timeout("-1S"));
  CHECK_FALSE(parse_grpc_timeout(""));
  CHECK(grpc_percent_encode("plain text: ok") == "plain text: ok");
  CHECK(grpc_percent_encode("d\xC3\xA9j\xC3\xA0 100%\n") == "d%C3%A9j%C3%A0 100%25%0A");
}

TEST_CASE("grpc server: a unary call is answered with its message, then grpc-status 0") {
  GrpcLimits limits;
  limits.max_streams = 7;
  limits.max_header_bytes = 3000;
  Fixture f(limits);
  Client c(f.port());
  const auto reply = c.wait(c.call(kEcho, "hello"));
  CHECK(reply.field(":status") == "200");
  CHECK(reply.field("content-type") == "application/grpc");
  CHECK(reply.message() == "olleh");
  CHECK(reply.grpc_status() == 0);
  CHECK_FALSE(reply.reset);
  // The limits, as HTTP/2 announced them.
  CHECK(c.remote_setting(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS) == 7);
  CHECK(c.remote_setting(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE) == 3000);
  // An empty message is a message.
  CHECK(c.wait(c.call(kEcho, "")).grpc_status() == 0);
  CHECK(f.server().counters().calls == 2);
  CHECK(f.server().counters().refused_calls == 0);
}

TEST_CASE("grpc server: many calls on one connection, answered out of order from another thread") {
  Fixture f;
  Client c(f.port());
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 50; ++i) ids.push_back(c.call(kHold, "call " + std::to_string(i)));
  std::vector<GrpcCall> calls = f.held(50);
  REQUIRE(calls.size() == 50);
  std::thread answerer([&] {
    for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
      it->answer("answer to " + std::string(it->message()));
    }
  });
  answerer.join();
  for (int i = 0; i < 50; ++i) {
    INFO("call " << i);
    const auto reply = c.wait(ids[static_cast<std::size_t>(i)]);
    CHECK(reply.message() == "answer to call " + std::to_string(i));
    CHECK(reply.grpc_status() == 0);
  }
}

TEST_CASE("grpc server: an answer larger than HTTP/2's frames and window arrives whole") {
  Fixture f;
  Client c(f.port());
  const auto id = c.call(kHold, "big");
  std::vector<GrpcCall> calls = f.held(1);
  std::string big(300 * 1024, 'x');
  for (std::size_t i = 0; i < big.size(); i += 997) big[i] = static_cast<char>('a' + i % 26);
  calls[0].answer(big);
  const auto reply = c.wait(id);
  CHECK(reply.grpc_status() == 0);
  CHECK(reply.message() == big);
}

TEST_CASE("grpc server: a call dropped unanswered, and a status with its message") {
  Fixture f;
  Client c(f.port());
  const auto dropped = c.call(kHold, "one");
  const auto failed = c.call(kHold, "two");
  std::vector<GrpcCall> calls = f.held(2);
  std::sort(calls.begin(), calls.end(),
            [](const GrpcCall& a, const GrpcCall& b) { return a.message() > b.message(); });
  calls[0].fail(GrpcCode::kInvalidArgument, "bad: d\xC3\xA9j\xC3\xA0 vu, 100%");  // "two"
  calls[0].answer("ignored: the call was answered");
  calls.pop_back();  // "one", destroyed unanswered
  const auto a = c.wait(dropped);
  CHECK(a.grpc_status() == 13);
  CHECK(a.field("grpc-message") == "the server did not answer the call");
  CHECK(a.data.empty());
  const auto b = c.wait(failed);
  CHECK(b.grpc_status() == 3);
  CHECK(b.field("grpc-message") == "bad: d%C3%A9j%C3%A0 vu, 100%25");
  CHECK(b.field(":status") == "200");
  CHECK(b.data.empty());
}

TEST_CASE("grpc server: grpc-timeout becomes the call's deadline, a malformed one is refused") {
  Fixture f;
  Client c(f.port());
  const auto before = Clock::now();
  c.call(kHold, "timed", {{"grpc-timeout", "250m"}});
  c.call(kHold, "untimed");
  std::vector<GrpcCall> calls = f.held(2);
  const auto after = Clock::now();
  for (GrpcCall& call : calls) {
    if (call.message() == "timed") {
      CHECK(call.deadline() >= before + 250ms);
      CHECK(call.deadline() <= after + 250ms);
    } else {
      CHECK(call.deadline() == Clock::time_point::max());
    }
    call.answer("");
  }
  for (const char* bad : {"12x", "123456789S", "S"}) {
    INFO(bad);
    const auto reply = c.wait(c.call(kEcho, "x", {{"grpc-timeout", bad}}));
    CHECK(reply.grpc_status() == 13);
    CHECK(reply.field("grpc-message") == "malformed grpc-timeout");
  }
}

TEST_CASE("grpc server: each refusal on its own stream, and the connection carries on") {
  GrpcLimits limits;
  limits.max_message_bytes = 100;
  Fixture f(limits);
  Client c(f.port());
  const auto refusal = [&](std::int32_t id) { return c.wait(id); };

  auto get = grpc_headers(kEcho);
  get[0].second = "GET";
  CHECK(refusal(c.start(get)).field(":status") == "405");
  auto text = grpc_headers(kEcho);
  text[4].second = "text/plain";
  CHECK(refusal(c.start(text, framed("x"))).field(":status") == "415");
  auto proto = grpc_headers(kEcho);
  proto[4].second = "application/grpc+proto";
  CHECK(refusal(c.start(proto, framed("ab"))).message() == "ba");

  const auto unknown = refusal(c.call("/test.Echo/Nothing", "x"));
  CHECK(unknown.grpc_status() == 12);
  CHECK(unknown.field("grpc-message") == "unknown method /test.Echo/Nothing");
  const auto compressed = refusal(c.start(grpc_headers(kEcho), framed("x", 1)));
  CHECK(compressed.grpc_status() == 12);
  for (const std::string& body :
       {std::string(), std::string("\0\0\0", 3), framed("abc").substr(0, 6),
        framed("a") + framed("b"), framed("x", 2)}) {
    INFO("body of " << body.size() << " bytes");
    const auto r = refusal(c.start(grpc_headers(kEcho), body));
    CHECK(r.grpc_status() == 13);
    CHECK(r.data.empty());
  }
  const auto none = refusal(c.start(grpc_headers(kEcho)));  // HEADERS alone, no message
  CHECK(none.grpc_status() == 13);
  // The message limit, at its edge.
  CHECK(refusal(c.call(kEcho, std::string(100, 'm'))).message() == std::string(100, 'm'));
  const auto big = refusal(c.call(kEcho, std::string(101, 'm')));
  CHECK(big.grpc_status() == 8);
  CHECK(big.field("grpc-message") == "request message larger than 100 bytes");

  CHECK(c.wait(c.call(kEcho, "still here")).message() == "ereh llits");
  CHECK(f.server().counters().refused_calls == 11);
  CHECK(f.server().counters().calls == 3);
  CHECK(f.server().counters().protocol_errors == 0);
}

TEST_CASE("grpc server: a refusal of a request still sending ends its stream") {
  Fixture f;
  Client c(f.port());
  const auto id = c.start(grpc_headers("/test.Echo/Nothing"), framed("x"), /*end=*/false);
  const auto reply = c.wait(id);
  CHECK(reply.grpc_status() == 12);
  REQUIRE(reply.reset);
  CHECK(*reply.reset == NGHTTP2_NO_ERROR);
  CHECK(c.wait(c.call(kEcho, "ab")).message() == "ba");
}

TEST_CASE("grpc server: a header list over max_header_bytes resets its stream only") {
  GrpcLimits limits;
  limits.max_header_bytes = 1000;
  Fixture f(limits);
  Client c(f.port());
  const auto id = c.call(kEcho, "x", {{"x-big", std::string(1200, 'h')}});
  const auto reply = c.wait(id);
  CHECK(reply.grpc_status() == -1);
  REQUIRE(reply.reset);
  CHECK(*reply.reset != NGHTTP2_NO_ERROR);
  CHECK(c.wait(c.call(kEcho, "ab", {{"x-small", std::string(500, 'h')}})).message() == "ba");
}

TEST_CASE("grpc server: max_streams, a stream over it refused, the connection carries on") {
  GrpcLimits limits;
  limits.max_streams = 2;
  Fixture f(limits);
  Client c(f.port());
  // All three go before the client has read the server's SETTINGS, so it does not hold the third
  // back as it would once it knows the limit: the server itself refuses it.
  const auto first = c.call(kHold, "1");
  const auto second = c.call(kHold, "2");
  const auto third = c.call(kHold, "3");
  const auto refused = c.wait(third);
  REQUIRE(refused.reset);
  CHECK(*refused.reset == NGHTTP2_REFUSED_STREAM);
  CHECK(refused.grpc_status() == -1);
  CHECK(c.remote_setting(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS) == 2);
  std::vector<GrpcCall> calls = f.held(2);
  REQUIRE(calls.size() == 2);
  for (GrpcCall& call : calls) call.answer("answer to " + std::string(call.message()));
  CHECK(c.wait(first).message() == "answer to 1");
  CHECK(c.wait(second).message() == "answer to 2");
  // The same connection takes calls again, up to the limit at once.
  const auto again = c.call(kHold, "4");
  const auto echo = c.call(kEcho, "5");
  CHECK(c.wait(echo).message() == "5");
  std::vector<GrpcCall> later = f.held(1);
  REQUIRE(later.size() == 1);
  later[0].answer("answer to 4");
  CHECK(c.wait(again).message() == "answer to 4");
  CHECK(f.server().counters().calls == 4);  // the refused stream never became a call
  CHECK_FALSE(c.goaway());
}

TEST_CASE("grpc server: bytes that are not HTTP/2 end their connection, others carry on") {
  Fixture f;
  Client good(f.port());
  CHECK(good.wait(good.call(kEcho, "1")).message() == "1");
  test::http_support::HttpClient http1(f.port());
  REQUIRE(http1.send(test::http_support::get("/")));
  CHECK(http1.wait_closed());  // the server closes it (after whatever it wrote)
  CHECK(f.server().counters().protocol_errors == 1);
  CHECK(good.wait(good.call(kEcho, "23")).message() == "32");
}

TEST_CASE("grpc server: max_connections, the next connection closed at accept") {
  GrpcLimits limits;
  limits.max_connections = 2;
  Fixture f(limits);
  Client a(f.port());
  Client b(f.port());
  CHECK(a.wait(a.call(kEcho, "a")).message() == "a");
  CHECK(b.wait(b.call(kEcho, "b")).message() == "b");
  Client third(f.port());
  CHECK(third.wait_closed(5s * kSlack));
  CHECK(f.server().counters().connections_refused == 1);
  CHECK(f.server().counters().connections_open == 2);
  CHECK(a.wait(a.call(kEcho, "a2")).message() == "2a");
}

TEST_CASE(
    "grpc server: an idle connection gets GOAWAY and is closed, one with a call open is not") {
  GrpcLimits limits;
  limits.idle_timeout = 300ms;
  Fixture f(limits);
  Client idle(f.port());
  Client busy(f.port());
  const auto held = busy.call(kHold, "waiting");
  std::vector<GrpcCall> calls = f.held(1);
  const auto started = Clock::now();
  CHECK(idle.wait_closed(5s * kSlack));
  CHECK(Clock::now() - started >= 250ms);
  CHECK(idle.goaway());
  CHECK(f.server().counters().idle_timeouts == 1);
  busy.idle(400ms);  // past the idle timeout, its call still open
  calls[0].answer("done");
  CHECK(busy.wait(held).message() == "done");
  CHECK_FALSE(busy.goaway());
}

TEST_CASE("grpc server: stop sends GOAWAY, answers what is in flight, then says it stopped") {
  Fixture f;
  Client c(f.port());
  const auto id = c.call(kHold, "in flight");
  std::vector<GrpcCall> calls = f.held(1);
  std::promise<void> stopped;
  f.server().stop(10s, [&] { stopped.set_value(); });
  c.idle(100ms);
  CHECK(c.goaway());
  auto done = stopped.get_future();
  CHECK(done.wait_for(0ms) == std::future_status::timeout);  // a call is still open
  calls[0].answer("answered after GOAWAY");
  CHECK(c.wait(id).message() == "answered after GOAWAY");
  CHECK(c.wait_closed(5s * kSlack));
  CHECK(done.wait_for(5s * kSlack) == std::future_status::ready);
  // No new connection is taken: the port no longer listens.
  CHECK_THROWS(Client(f.port()));
}

TEST_CASE("grpc server: a call not answered within stop's grace is cut with its connection") {
  Fixture f;
  Client c(f.port());
  c.call(kHold, "never answered");
  std::vector<GrpcCall> calls = f.held(1);
  std::promise<void> stopped;
  const auto started = Clock::now();
  f.server().stop(200ms, [&] { stopped.set_value(); });
  CHECK(c.wait_closed(5s * kSlack));
  CHECK(Clock::now() - started >= 150ms);
  CHECK(stopped.get_future().wait_for(5s * kSlack) == std::future_status::ready);
  calls[0].answer("too late");  // dropped: the connection has gone
}

}  // namespace
}  // namespace sluice::http
