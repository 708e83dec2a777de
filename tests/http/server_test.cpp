// http::Server over real sockets on 127.0.0.1: keep-alive, pipelining, answers from other
// threads, each limit at its edge, malformed input, timeouts and stop.
#include "http/server.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "tests/http/http_test_support.h"

namespace sluice::test {
namespace {

using namespace http_support;

using http::Request;
using http::Responder;
using http::Status;

// Answers 200 with "METHOD TARGET BODYSIZE".
void echo(const Request& request, Responder responder) {
  responder.send(http::text_response(Status::ok, std::string(request.method_string()) + " " +
                                                     std::string(request.target()) + " " +
                                                     std::to_string(request.body().size())));
}

http::ServerLimits test_limits() {
  http::ServerLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_body_bytes = 2048;
  limits.max_connections = 8;
  limits.idle_timeout = 10'000ms;
  limits.read_timeout = 10'000ms;
  return limits;
}

// A request whose request line, headers and blank line are exactly `size` bytes.
std::string request_of_header_size(std::size_t size) {
  const std::string head = "GET /h HTTP/1.1\r\nHost: test\r\nX-Pad: ";
  const std::string tail = "\r\n\r\n";
  REQUIRE(size >= head.size() + tail.size());
  return head + std::string(size - head.size() - tail.size(), 'p') + tail;
}

std::string post_of_body_size(std::size_t size) {
  return "POST /b HTTP/1.1\r\nHost: test\r\nContent-Length: " + std::to_string(size) + "\r\n\r\n" +
         std::string(size, 'b');
}

TEST_CASE("http: one keep-alive connection carries several requests", "[http]") {
  HttpFixture fixture(test_limits(), echo);
  HttpClient client(fixture.port());
  for (int i = 0; i < 3; ++i) {
    REQUIRE(client.send(get("/r" + std::to_string(i))));
    const auto response = client.read_response();
    REQUIRE(response);
    CHECK(response->result() == Status::ok);
    CHECK(response->body() == "GET /r" + std::to_string(i) + " 0");
    CHECK(response->keep_alive());
  }
  const http::ServerCounters counters = fixture.server().counters();
  CHECK(counters.requests == 3);
  CHECK(counters.connections_total == 1);
  CHECK(counters.connections_open == 1);
}

TEST_CASE("http: pipelined requests are answered in order, the slow first one included", "[http]") {
  // The first request is answered last in time, from another thread: its answer must still
  // come first on the wire.
  std::mutex mutex;
  std::condition_variable arrived;
  std::optional<Responder> held;
  HttpFixture fixture(test_limits(), [&](const Request& request, Responder responder) {
    if (request.target() == "/slow") {
      std::lock_guard<std::mutex> lock(mutex);
      held.emplace(std::move(responder));
      arrived.notify_all();
      return;
    }
    echo(request, std::move(responder));
  });
  HttpClient client(fixture.port());
  REQUIRE(client.send(get("/slow") + get("/two") + get("/three")));
  {
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(arrived.wait_for(lock, 5s * kSlack, [&] { return held.has_value(); }));
  }
  // Nothing is answered while the first request waits: the next is not even handled.
  CHECK_FALSE(client.read_response(100ms));
  CHECK(fixture.server().counters().requests == 1);
  std::thread answerer([&] {
    std::lock_guard<std::mutex> lock(mutex);
    held->send(http::text_response(Status::ok, "slow"));
  });
  answerer.join();
  const auto first = client.read_response();
  const auto second = client.read_response();
  const auto third = client.read_response();
  REQUIRE(first);
  REQUIRE(second);
  REQUIRE(third);
  CHECK(first->body() == "slow");
  CHECK(second->body() == "GET /two 0");
  CHECK(third->body() == "GET /three 0");
}

TEST_CASE("http: a handler answers later from another thread", "[http]") {
  std::mutex mutex;
  std::condition_variable queued;
  std::deque<Responder> waiting;
  bool done = false;
  HttpFixture fixture(test_limits(), [&](const Request&, Responder responder) {
    std::lock_guard<std::mutex> lock(mutex);
    waiting.push_back(std::move(responder));
    queued.notify_all();
  });
  std::thread worker([&] {
    std::unique_lock<std::mutex> lock(mutex);
    for (int answered = 0; answered < 4;) {
      queued.wait(lock, [&] { return !waiting.empty() || done; });
      if (done) return;
      Responder responder = std::move(waiting.front());
      waiting.pop_front();
      lock.unlock();
      responder.send(http::text_response(Status::accepted, "from the worker"));
      responder.send(http::text_response(Status::ok, "a second send is ignored"));
      lock.lock();
      ++answered;
    }
  });
  HttpClient a(fixture.port());
  HttpClient b(fixture.port());
  for (int i = 0; i < 2; ++i) {
    REQUIRE(a.send(get("/a")));
    REQUIRE(b.send(get("/b")));
    for (HttpClient* client : {&a, &b}) {
      const auto response = client->read_response();
      REQUIRE(response);
      CHECK(response->result() == Status::accepted);
      CHECK(response->body() == "from the worker");
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
    queued.notify_all();
  }
  worker.join();
}

TEST_CASE("http: a responder dropped unused answers 500 and the connection carries on", "[http]") {
  HttpFixture fixture(test_limits(), [](const Request& request, Responder responder) {
    if (request.target() == "/drop") return;  // responder destroyed here
    echo(request, std::move(responder));
  });
  HttpClient client(fixture.port());
  REQUIRE(client.send(get("/drop")));
  const auto dropped = client.read_response();
  REQUIRE(dropped);
  CHECK(dropped->result() == Status::internal_server_error);
  REQUIRE(client.send(get("/next")));
  const auto next = client.read_response();
  REQUIRE(next);
  CHECK(next->body() == "GET /next 0");
}

TEST_CASE("http: headers of exactly max_header_bytes pass, one byte more gets 431 and a close",
          "[http]") {
  HttpFixture fixture(test_limits(), echo);
  HttpClient at_limit(fixture.port());
  REQUIRE(at_limit.send(request_of_header_size(1024)));
  const auto ok = at_limit.read_response();
  REQUIRE(ok);
  CHECK(ok->result() == Status::ok);

  HttpClient over(fixture.port());
  REQUIRE(over.send(request_of_header_size(1025)));
  const auto refused = over.read_response();
  REQUIRE(refused);
  CHECK(refused->result() == Status::request_header_fields_too_large);
  CHECK_FALSE(refused->keep_alive());
  CHECK(over.wait_closed());
  CHECK(fixture.server().counters().bad_requests == 1);
}

TEST_CASE("http: a body of exactly max_body_bytes passes, one byte more gets 413 and a close",
          "[http]") {
  HttpFixture fixture(test_limits(), echo);
  HttpClient client(fixture.port());
  REQUIRE(client.send(post_of_body_size(2048)));
  const auto ok = client.read_response();
  REQUIRE(ok);
  CHECK(ok->body() == "POST /b 2048");

  REQUIRE(client.send(post_of_body_size(2049)));
  const auto refused = client.read_response();
  REQUIRE(refused);
  CHECK(refused->result() == Status::payload_too_large);
  CHECK(client.wait_closed());

  // A chunked body is held to the same bound as it arrives.
  HttpClient chunked(fixture.port());
  REQUIRE(
      chunked.send("POST /c HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" +
                   std::string(2048, 'c') + "\r\n1\r\nc\r\n0\r\n\r\n"));
  const auto chunked_refused = chunked.read_response();
  REQUIRE(chunked_refused);
  CHECK(chunked_refused->result() == Status::payload_too_large);
  CHECK(chunked.wait_closed());
  CHECK(fixture.server().counters().bad_requests == 2);
}

TEST_CASE("http: max_connections are served and the next one is closed at accept", "[http]") {
  http::ServerLimits limits = test_limits();
  limits.max_connections = 2;
  HttpFixture fixture(limits, echo);
  auto first = std::make_unique<HttpClient>(fixture.port());
  HttpClient second(fixture.port());
  for (HttpClient* client : {first.get(), &second}) {
    REQUIRE(client->send(get("/")));
    REQUIRE(client->read_response());
  }
  HttpClient third(fixture.port());
  third.send(get("/"));
  CHECK_FALSE(third.read_response());
  CHECK(third.closed());
  CHECK(fixture.server().counters().connections_refused == 1);

  // Once one closes, a newcomer is served.
  first.reset();
  REQUIRE(eventually([&] { return fixture.server().counters().connections_open == 1; }));
  HttpClient fourth(fixture.port());
  REQUIRE(fourth.send(get("/")));
  REQUIRE(fourth.read_response());
  CHECK(fixture.server().counters().connections_refused == 1);
  CHECK(fixture.server().counters().connections_total == 3);
}

TEST_CASE("http: a malformed request gets 400 and a close while another connection carries on",
          "[http]") {
  HttpFixture fixture(test_limits(), echo);
  HttpClient healthy(fixture.port());
  REQUIRE(healthy.send(get("/before")));
  REQUIRE(healthy.read_response());

  const std::vector<std::string> malformed = {
      "GARBAGE\r\n\r\n",
      "GET / HTTP/9.9\r\nHost: test\r\n\r\n",
      "GET / HTTP/1.1\r\nBad Header Line\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: twelve\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      std::string("\x00\x01\x02\xff\r\n\r\n", 8),
  };
  for (const std::string& bytes : malformed) {
    INFO(bytes);
    HttpClient bad(fixture.port());
    REQUIRE(bad.send(bytes));
    const auto response = bad.read_response();
    REQUIRE(response);
    CHECK(response->result() == Status::bad_request);
    CHECK(bad.wait_closed());
  }
  CHECK(fixture.server().counters().bad_requests == malformed.size());

  REQUIRE(healthy.send(get("/after")));
  const auto after = healthy.read_response();
  REQUIRE(after);
  CHECK(after->body() == "GET /after 0");
}

TEST_CASE("http: an HTTP/1.0 request without keep-alive is answered, then the connection closes",
          "[http]") {
  HttpFixture fixture(test_limits(), echo);
  HttpClient client(fixture.port());
  REQUIRE(client.send("GET /old HTTP/1.0\r\n\r\n"));
  const auto response = client.read_response();
  REQUIRE(response);
  CHECK(response->version() == 10);
  CHECK(response->body() == "GET /old 0");
  CHECK(client.wait_closed());
}

TEST_CASE("http: a keep-alive connection idle past idle_timeout is closed, not before", "[http]") {
  http::ServerLimits limits = test_limits();
  limits.idle_timeout = 300ms;
  HttpFixture fixture(limits, echo);
  HttpClient client(fixture.port());
  // Requests 150 ms apart keep it open for well over the timeout.
  for (int i = 0; i < 4; ++i) {
    REQUIRE(client.send(get("/")));
    REQUIRE(client.read_response());
    if (i < 3) std::this_thread::sleep_for(150ms);
  }
  const auto idle_from = std::chrono::steady_clock::now();
  CHECK(client.wait_closed());
  CHECK(std::chrono::steady_clock::now() - idle_from >= 290ms);
  CHECK(fixture.server().counters().idle_timeouts == 1);
  CHECK(fixture.server().counters().read_timeouts == 0);
}

TEST_CASE("http: a request sent too slowly (slowloris) is closed after read_timeout", "[http]") {
  http::ServerLimits limits = test_limits();
  limits.read_timeout = 300ms;
  HttpFixture fixture(limits, echo);
  HttpClient client(fixture.port());
  const auto from = std::chrono::steady_clock::now();
  REQUIRE(client.send("GET / HTTP/1.1\r\nHost: te"));
  CHECK(client.wait_closed());
  CHECK(std::chrono::steady_clock::now() - from >= 290ms);
  CHECK(fixture.server().counters().read_timeouts == 1);
  CHECK(fixture.server().counters().idle_timeouts == 0);
  CHECK(fixture.server().counters().requests == 0);
}

TEST_CASE("http: stop() closes every connection and the io threads run out of work", "[http]") {
  HttpFixture fixture(test_limits(), echo);
  HttpClient idle(fixture.port());
  HttpClient served(fixture.port());
  REQUIRE(served.send(get("/")));
  REQUIRE(served.read_response());
  fixture.stop();  // returns once both io threads have returned from run()
  CHECK(idle.wait_closed());
  CHECK(served.wait_closed());
}

}  // namespace
}  // namespace sluice::test
