// HttpResponseReader: status and keep-alive of responses read one after another from a stream,
// whole, in pieces, pipelined, chunked, and refused when malformed.
#include <catch2/catch.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tools/load/http_response.h"

namespace sluice::load {
namespace {

using Outcome = HttpResponseReader::Outcome;

// Feeds `stream` to a reader `piece` bytes at a time, as a connection's buffer would (unconsumed
// bytes stay and more are appended), and returns every response head read.
std::vector<HttpResponseHead> read_all(std::string_view stream, std::size_t piece) {
  HttpResponseReader reader;
  std::vector<HttpResponseHead> heads;
  std::string buffer;
  std::size_t given = 0;
  while (given < stream.size() || !buffer.empty()) {
    const std::size_t n = std::min(piece, stream.size() - given);
    buffer.append(stream.substr(given, n));
    given += n;
    for (;;) {
      const auto step = reader.feed(buffer);
      REQUIRE(step.outcome != Outcome::kMalformed);
      buffer.erase(0, step.consumed);
      if (step.outcome == Outcome::kNeedMore) break;
      heads.push_back(step.head);
    }
    if (n == 0) break;  // nothing more to give: what is left is a partial response
  }
  return heads;
}

constexpr std::string_view kThree =
    "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhello\n"
    "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 18\r\n\r\n"
    "Too Many Requests\n"
    "HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n"
    "5\r\nerror\r\n0\r\n\r\n";

TEST_CASE("pipelined responses give their statuses in order, whole or byte by byte", "[http]") {
  for (const std::size_t piece : {kThree.size(), std::size_t{1}, std::size_t{7}}) {
    INFO("pieces of " << piece);
    const auto heads = read_all(kThree, piece);
    REQUIRE(heads.size() == 3);
    CHECK(heads[0].status == 200);
    CHECK(heads[1].status == 429);
    CHECK(heads[2].status == 500);
    for (const auto& h : heads) CHECK(h.keep_alive);
  }
}

TEST_CASE("a response that closes the connection says so", "[http]") {
  const auto heads = read_all(
      "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
      "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
      1000);
  REQUIRE(heads.size() == 2);
  CHECK_FALSE(heads[0].keep_alive);
  CHECK_FALSE(heads[1].keep_alive);  // HTTP/1.0 without keep-alive
}

TEST_CASE("a partial header waits for the rest, which completes it", "[http]") {
  HttpResponseReader reader;
  const std::string_view start = "HTTP/1.1 200 OK\r\nContent-Le";
  const auto step = reader.feed(start);
  CHECK(step.outcome == Outcome::kNeedMore);
  REQUIRE(step.consumed <= start.size());
  const std::string rest = std::string(start.substr(step.consumed)) + "ngth: 2\r\n\r\nok";
  const auto done = reader.feed(rest);
  CHECK(done.outcome == Outcome::kComplete);
  CHECK(done.consumed == rest.size());
  CHECK(done.head.status == 200);
}

TEST_CASE("garbage is malformed and says why", "[http]") {
  HttpResponseReader reader;
  const auto step = reader.feed("+OK\r\n:1\r\n$5\r\nhello\r\n");  // RESP, not HTTP
  CHECK(step.outcome == Outcome::kMalformed);
  CHECK_FALSE(reader.error().empty());
  reader.reset();
  CHECK(reader.feed("HTTP/1.1 204 No Content\r\n\r\n").outcome == Outcome::kComplete);
}

}  // namespace
}  // namespace sluice::load
