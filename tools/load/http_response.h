// Reads HTTP/1.1 responses one after another from a connection's byte stream, keeping only what
// sluice-load needs: the status code and whether the connection stays open. Bodies are skipped.
// Boost.Beast's parser does the parsing (chunked bodies, obsolete line folding, limits); this
// class only discards what Beast hands over, so nothing is allocated per response and nothing
// throws.
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::load {

struct HttpResponseHead {
  int status = 0;
  bool keep_alive = false;  // false: the server closes the connection after this response
};

class HttpResponseReader {
 public:
  enum class Outcome { kComplete, kNeedMore, kMalformed };
  struct Step {
    Outcome outcome = Outcome::kNeedMore;
    std::size_t consumed = 0;  // bytes of `bytes` used, whatever the outcome
    HttpResponseHead head;     // kComplete only
  };

  HttpResponseReader() { reset(); }

  // Parses from the start of `bytes`, which continues the stream after what earlier calls
  // consumed. kComplete: a whole response ended within `consumed` bytes and the next call
  // starts the next one. kNeedMore: what could be used is consumed (a header may be kept in
  // part): pass the bytes after `consumed` again with more after them. kMalformed: the stream
  // cannot be read on (`error()` says why); call reset() before reusing the reader.
  Step feed(std::string_view bytes);
  // Forgets any partial response.
  void reset();
  // Why the last kMalformed happened.
  std::string_view error() const { return error_; }

  // Limits on one response: its status line and header fields, and its body.
  static constexpr std::uint32_t kMaxHeaderBytes = 16 * 1024;
  static constexpr std::uint64_t kMaxBodyBytes = 1 << 20;

 private:
  class Parser final : public boost::beast::http::basic_parser<false> {
   public:
    Parser();
    int status = 0;

   private:
    using error_code = boost::beast::error_code;
    using string_view = boost::beast::string_view;
    void on_request_impl(boost::beast::http::verb, string_view, string_view, int,
                         error_code&) override {}
    void on_response_impl(int code, string_view, int, error_code&) override { status = code; }
    void on_field_impl(boost::beast::http::field, string_view, string_view, error_code&) override {}
    void on_header_impl(error_code&) override {}
    void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
    std::size_t on_body_impl(string_view body, error_code&) override { return body.size(); }
    void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
    std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code&) override {
      return body.size();
    }
    void on_finish_impl(error_code&) override {}
  };

  std::optional<Parser> parser_;
  std::string error_;
};

}  // namespace sluice::load
