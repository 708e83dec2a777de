// Asio, for every file of Sluice that uses it: include this header instead of any
// <boost/asio/...> one (a file that needs more of Asio includes it after this one).
//
// Boost 1.74's boost/asio/awaitable.hpp uses std::exchange without including <utility>, so with
// g++ 12 a file whose first Asio include comes before <utility> does not compile
// (../shared/TOOLCHAIN.md). This header includes <utility> first, once for the whole tree.
#pragma once

#include <utility>  // first: Boost 1.74's awaitable.hpp needs std::exchange

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace sluice::net {

// The completion token of a coroutine's operation that reports a failure in `ec` instead of
// throwing: expected failures are values (Boost 1.74 has no as_tuple).
inline auto redirect(boost::system::error_code& ec) {
  return boost::asio::redirect_error(boost::asio::use_awaitable, ec);
}

}  // namespace sluice::net
