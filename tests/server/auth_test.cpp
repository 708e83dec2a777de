// The server's admission rules and its start-up warning (server/auth.h), without a network:
// the behaviour on connections is in tests/integration/auth_test.cpp.
#include "server/auth.h"

#include <catch2/catch.hpp>
#include <string>

namespace sluice::server {
namespace {

TEST_CASE("loopback addresses are told from every other address", "[auth]") {
  for (const char* loopback : {"127.0.0.1", "127.0.0.2", "127.255.255.254", "::1",
                               "::ffff:127.0.0.1", "0:0:0:0:0:0:0:1"}) {
    INFO(loopback);
    CHECK(is_loopback_address(loopback));
  }
  for (const char* other :
       {"0.0.0.0", "::", "10.0.0.5", "192.168.1.1", "128.0.0.1", "1.127.0.0", "::2", "fe80::1",
        "::ffff:10.0.0.5", "::ffff:0.0.0.0", "localhost", "", "127.0.0.1:7420", "nonsense"}) {
    INFO(other);
    CHECK_FALSE(is_loopback_address(other));
  }
}

TEST_CASE("sluiced warns about a non-loopback bind only when it has no token", "[auth]") {
  ServerConfig config;
  for (const char* loopback : {"127.0.0.1", "::1"}) {
    config.bind = loopback;
    CHECK(unauthenticated_bind_warning(config).empty());
  }
  for (const char* open : {"0.0.0.0", "::", "10.0.0.5"}) {
    INFO(open);
    config.bind = open;
    config.auth_token.clear();
    const std::string warning = unauthenticated_bind_warning(config);
    CHECK_THAT(warning, Catch::StartsWith(std::string("--bind ") + open +
                                          " is not a loopback address and no --auth-token-file"));
    config.auth_token = "s3cret";
    CHECK(unauthenticated_bind_warning(config).empty());
  }
}

TEST_CASE("without a token every HELLO admits, with one only a HELLO that carries it", "[auth]") {
  ServerConfig open;
  CHECK_FALSE(requires_authentication(open));
  CHECK(hello_admits(open, protocol::HelloRequest{1, "v1", ""}));
  CHECK(hello_admits(open, protocol::HelloRequest{2, "v2", ""}));
  CHECK(hello_admits(open, protocol::HelloRequest{2, "v2", "ignored"}));

  ServerConfig guarded;
  guarded.auth_token = "s3cret";
  CHECK(requires_authentication(guarded));
  CHECK(hello_admits(guarded, protocol::HelloRequest{2, "right", "s3cret"}));
  CHECK(hello_admits(guarded, protocol::HelloRequest{9, "newer", "s3cret"}));
  CHECK_FALSE(hello_admits(guarded, protocol::HelloRequest{2, "wrong", "s3creT"}));
  CHECK_FALSE(hello_admits(guarded, protocol::HelloRequest{2, "prefix", "s3cre"}));
  CHECK_FALSE(hello_admits(guarded, protocol::HelloRequest{2, "longer", "s3cret!"}));
  CHECK_FALSE(hello_admits(guarded, protocol::HelloRequest{2, "empty", ""}));
  CHECK_FALSE(hello_admits(guarded, protocol::HelloRequest{1, "v1", ""}));
}

}  // namespace
}  // namespace sluice::server
