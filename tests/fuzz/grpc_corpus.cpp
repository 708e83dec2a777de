// Writes grpc_fuzz's seed corpus (tests/fuzz/corpus/grpc_fuzz/): byte streams a client sends,
// made by nghttp2's own client session so that they follow HTTP/2 (preface, SETTINGS, HPACK):
// a call, several on one connection, each refusal (method, content-type, unknown path, a
// compressed, truncated, doubled or oversized message, grpc-timeout good and bad, a header list
// over the limit, a request still sending), a request reset by its client, PING, and bytes that
// are not HTTP/2. Each file is grpc_fuzz's input: one config byte (see grpc_fuzz.cpp), then the
// stream.
// Usage: grpc_corpus DIR  (rewrites DIR's seeds; tools/fuzz.sh --seeds runs it)
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/grpc/h2_request.h"

namespace {

using sluice::test::h2::Body;
using sluice::test::h2::framed;
using sluice::test::h2::Headers;
using sluice::test::h2::submit_request;

constexpr const char* kSay = "/test.Echo/Say";

Headers grpc(std::string path, Headers more = {}) {
  return sluice::test::h2::grpc_headers(std::move(path), std::move(more));
}

struct Request {
  Headers headers;
  std::optional<std::string> body;  // none: HEADERS alone, ending the stream
  bool end = true;                  // false: the body does not end the stream
  bool reset = false;               // the client resets the stream after sending it
};

// What a client's session writes for `requests` (and a PING when asked).
std::string client_bytes(const std::vector<Request>& requests, bool ping = false) {
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session* session = nullptr;
  nghttp2_session_client_new(&session, cb, nullptr);
  nghttp2_session_callbacks_del(cb);
  nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0);
  std::string out;
  const auto drain = [&] {
    for (;;) {
      const std::uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session, &data);
      if (n <= 0) return;
      out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
  };
  std::vector<std::unique_ptr<Body>> bodies;
  for (const Request& r : requests) {
    const std::int32_t id = submit_request(session, r.headers, r.body, r.end, bodies);
    if (r.reset && id > 0) {
      drain();  // the request's frames first, then the reset
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    }
  }
  if (ping) nghttp2_submit_ping(session, NGHTTP2_FLAG_NONE, nullptr);
  drain();
  nghttp2_session_del(session);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: grpc_corpus DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  struct Seed {
    std::string name;
    std::uint8_t config;
    std::string stream;
  };
  std::vector<Seed> seeds;
  const auto add = [&](std::string name, std::uint8_t config, std::string stream) {
    seeds.push_back({std::move(name), config, std::move(stream)});
  };
  const Request say{grpc(kSay), framed("hello")};
  add("call_answered", 0x00, client_bytes({say}));
  add("call_failed", 0x01, client_bytes({say}));
  add("call_held", 0x02, client_bytes({say}));
  add("call_dropped", 0x03, client_bytes({say}));
  add("call_in_bytes", 0x04, client_bytes({say}));
  add("call_in_16_byte_pieces", 0x14, client_bytes({say}));
  add("calls_then_goaway", 0x22, client_bytes({say, say, say, say}, /*ping=*/true));
  add("calls_over_max_streams", 0x02,
      client_bytes(std::vector<Request>(10, Request{grpc(kSay), framed("x")})));
  Headers get = grpc(kSay);
  get[0].second = "GET";
  Headers text = grpc(kSay);
  text[4].second = "text/plain";
  add("refusals", 0x00,
      client_bytes({{get, std::nullopt},
                    {text, framed("x")},
                    {grpc("/test.Echo/Nothing"), framed("x")},
                    {grpc(kSay), framed("x", 1)},
                    {grpc(kSay), framed("abc").substr(0, 6)},
                    {grpc(kSay), framed("a") + framed("b")},
                    {grpc(kSay), std::nullopt},
                    {grpc(kSay), framed(std::string(1025, 'm'))},
                    {grpc(kSay), framed(std::string(1024, 'm'))}}));
  add("timeouts", 0x02,
      client_bytes({{grpc(kSay, {{"grpc-timeout", "250m"}}), framed("t")},
                    {grpc(kSay, {{"grpc-timeout", "123456789S"}}), framed("t")},
                    {grpc(kSay, {{"grpc-timeout", "12x"}}), framed("t")}}));
  add("header_list_over_limit", 0x00,
      client_bytes({{grpc(kSay, {{"x-big", std::string(2100, 'h')}}), framed("x")}, say}));
  add("request_still_sending", 0x00,
      client_bytes({{grpc("/test.Echo/Nothing"), framed("x"), /*end=*/false}, say}));
  add("request_reset_by_client", 0x02,
      client_bytes({{grpc(kSay), framed("x"), /*end=*/false, /*reset=*/true}, say}));
  add("not_http2", 0x00, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  add("preface_alone", 0x00, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
  for (const Seed& seed : seeds) {
    std::ofstream file(dir / seed.name, std::ios::binary | std::ios::trunc);
    file.put(static_cast<char>(seed.config));
    file.write(seed.stream.data(), static_cast<std::streamsize>(seed.stream.size()));
  }
  std::printf("%zu seeds written to %s\n", seeds.size(), dir.c_str());
  return 0;
}
