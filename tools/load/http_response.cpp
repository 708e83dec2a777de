#include "tools/load/http_response.h"

#include <boost/beast/http/error.hpp>

namespace sluice::load {

HttpResponseReader::Parser::Parser() {
  header_limit(kMaxHeaderBytes);
  body_limit(kMaxBodyBytes);
  eager(true);  // one feed() goes on from the header into the body
}

void HttpResponseReader::reset() { parser_.emplace(); }

HttpResponseReader::Step HttpResponseReader::feed(std::string_view bytes) {
  Step step;
  while (step.consumed < bytes.size()) {
    boost::beast::error_code ec;
    // One contiguous buffer: Beast parses it in place, with no copy.
    const std::size_t n = parser_->put(
        boost::asio::const_buffer(bytes.data() + step.consumed, bytes.size() - step.consumed), ec);
    step.consumed += n;
    if (ec == boost::beast::http::error::need_more) break;
    if (ec) {
      step.outcome = Outcome::kMalformed;
      error_ = ec.message();
      return step;
    }
    if (parser_->is_done()) {
      step.outcome = Outcome::kComplete;
      step.head.status = parser_->status;
      step.head.keep_alive = parser_->keep_alive();
      parser_.emplace();
      return step;
    }
    if (n == 0) break;
  }
  step.outcome = Outcome::kNeedMore;
  return step;
}

}  // namespace sluice::load
