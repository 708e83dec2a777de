// How sluiced admits connections when it has a token (docs/PROTOCOL.md, section 6), and the
// start-up warning for a node that listens beyond loopback without one. The connection keeps
// only an `authenticated_` flag and asks these functions; the token file and the comparison
// itself are auth/token.h's.
#pragma once

#include <string>
#include <string_view>

#include "protocol/messages.h"
#include "server/server.h"

namespace sluice::server {

// The ERROR UNAUTHENTICATED messages. Neither ever carries the token or any part of it.
inline constexpr std::string_view kHelloFirstMessage =
    "authentication required: send HELLO with the token first";
inline constexpr std::string_view kWrongTokenMessage = "wrong or missing token";

// Whether a new connection must send a HELLO with the token before anything else.
bool requires_authentication(const ServerConfig& config);

// Whether `hello` admits its connection: always when the server has no token (the field is
// ignored then), else when its token is the server's (compared in constant time). A version 1
// HELLO carries no token, so it admits only where none is required.
bool hello_admits(const ServerConfig& config, const protocol::HelloRequest& hello);

// Whether `address`, an IP address as --bind takes it, is a loopback address: 127.0.0.0/8,
// ::1, or an IPv4-mapped 127.x.y.z. False for anything else: the wildcards 0.0.0.0 and ::,
// every other address, and text that is not an address.
bool is_loopback_address(std::string_view address);

// The warning sluiced prints at start-up when it listens on an address other hosts can reach
// without requiring a token; empty when it binds a loopback address or has a token.
std::string unauthenticated_bind_warning(const ServerConfig& config);

}  // namespace sluice::server
