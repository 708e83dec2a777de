#include "server/auth.h"

#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>

#include "auth/token.h"

namespace sluice::server {

bool requires_authentication(const ServerConfig& config) { return !config.auth_token.empty(); }

bool hello_admits(const ServerConfig& config, const protocol::HelloRequest& hello) {
  return !requires_authentication(config) || auth::token_matches(config.auth_token, hello.token);
}

bool is_loopback_address(std::string_view address) {
  namespace ip = boost::asio::ip;
  boost::system::error_code ec;
  const ip::address parsed = ip::make_address(std::string(address), ec);
  if (ec) return false;
  if (parsed.is_v4()) return parsed.to_v4().is_loopback();
  const ip::address_v6 v6 = parsed.to_v6();
  if (v6.is_v4_mapped()) return ip::make_address_v4(ip::v4_mapped, v6).is_loopback();
  return v6.is_loopback();
}

std::string unauthenticated_bind_warning(const ServerConfig& config) {
  if (requires_authentication(config) || is_loopback_address(config.bind)) return "";
  return fmt::format(
      "--bind {} is not a loopback address and no --auth-token-file is set: anyone who can "
      "reach its ports can spend and reset every key's counters (docs/OPERATIONS.md, "
      "\"Authentication\")",
      config.bind);
}

}  // namespace sluice::server
