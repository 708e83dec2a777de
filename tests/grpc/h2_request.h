// What an HTTP/2 client sends for a gRPC call, on nghttp2's client session: the framed message,
// the usual headers, and the request itself (headers alone, or headers and a body that may leave
// the stream open). Shared by the tests' client (tests/grpc/h2_client.h) and grpc_fuzz's seed
// writer (tests/fuzz/grpc_corpus.cpp); no test framework here.
#pragma once

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::test::h2 {

using Headers = std::vector<std::pair<std::string, std::string>>;

// One gRPC message on the wire: the compressed flag, the big-endian length, the bytes.
inline std::string framed(std::string_view message, std::uint8_t flag = 0) {
  const auto n = static_cast<std::uint32_t>(message.size());
  std::string out{static_cast<char>(flag), static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                  static_cast<char>(n >> 8), static_cast<char>(n)};
  out.append(message);
  return out;
}

// A gRPC request's headers for `path`, with more after them.
inline Headers grpc_headers(std::string path, Headers more = {}) {
  Headers h{{":method", "POST"},
            {":scheme", "http"},
            {":authority", "127.0.0.1"},
            {":path", std::move(path)},
            {"content-type", "application/grpc"},
            {"te", "trailers"}};
  h.insert(h.end(), more.begin(), more.end());
  return h;
}

// A request body being sent; held by the caller until the session is done with it.
struct Body {
  std::string bytes;
  std::size_t sent = 0;
  bool end = true;  // false: the stream stays open after the body
};

inline ssize_t read_body(nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t length,
                         std::uint32_t* flags, nghttp2_data_source* source, void*) {
  auto& body = *static_cast<Body*>(source->ptr);
  const std::size_t n = std::min(length, body.bytes.size() - body.sent);
  std::copy_n(body.bytes.data() + body.sent, n, buf);
  body.sent += n;
  if (body.sent == body.bytes.size()) {
    if (!body.end) {
      return n == 0 ? static_cast<ssize_t>(NGHTTP2_ERR_DEFERRED) : static_cast<ssize_t>(n);
    }
    *flags |= NGHTTP2_DATA_FLAG_EOF;
  }
  return static_cast<ssize_t>(n);
}

// Submits a request with `headers` and `body` (none: HEADERS alone, ending the stream; with
// `end` false the body leaves it open), its body kept in `bodies`. Returns the stream id (or
// nghttp2's negative error).
inline std::int32_t submit_request(nghttp2_session* session, const Headers& headers,
                                   std::optional<std::string> body, bool end,
                                   std::vector<std::unique_ptr<Body>>& bodies) {
  std::vector<nghttp2_nv> nva;
  for (const auto& [name, value] : headers) {
    nva.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                   reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
                   value.size(), NGHTTP2_NV_FLAG_NONE});
  }
  if (!body) {
    const std::uint8_t flags = end ? NGHTTP2_FLAG_END_STREAM : NGHTTP2_FLAG_NONE;
    return nghttp2_submit_headers(session, flags, -1, nullptr, nva.data(), nva.size(), nullptr);
  }
  bodies.push_back(std::make_unique<Body>(Body{std::move(*body), 0, end}));
  nghttp2_data_provider provider{};
  provider.source.ptr = bodies.back().get();
  provider.read_callback = &read_body;
  return nghttp2_submit_request(session, nullptr, nva.data(), nva.size(), &provider, nullptr);
}

}  // namespace sluice::test::h2
