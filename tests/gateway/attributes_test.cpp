#include "tools/gateway/attributes.h"

#include <catch2/catch.hpp>

namespace sluice::gateway {
namespace {

http::Request request(std::string target) {
  http::Request r{boost::beast::http::verb::get, target, 11};
  return r;
}

TEST_CASE("check attributes: the proxy's forwarded headers win over the check request's own") {
  http::Request r = request("/check?deny=403");
  r.set("X-Original-Method", "POST");
  r.set("X-Original-URI", "/login?next=/home");
  r.set("X-Real-IP", " 10.0.0.7 ");
  r.set("X-Forwarded-For", "10.9.9.9, 10.0.0.1");
  r.set("X-API-Key", "k1");
  const rules::RequestAttributes a = check_attributes(r, "127.0.0.1");
  CHECK(a.method == "POST");
  CHECK(a.path == "/login?next=/home");
  CHECK(a.path_only() == "/login");
  CHECK(a.client_ip == "10.0.0.7");
  CHECK(a.header("x-api-key") == std::optional<std::string_view>("k1"));
}

TEST_CASE("check attributes: Traefik's names then the request itself then the peer") {
  http::Request traefik = request("/check");
  traefik.set("X-Forwarded-Method", "PUT");
  traefik.set("X-Forwarded-Uri", "/v1/upload/a");
  traefik.set("X-Forwarded-For", "  10.9.9.9 ,10.0.0.1");
  const rules::RequestAttributes t = check_attributes(traefik, "127.0.0.1");
  CHECK(t.method == "PUT");
  CHECK(t.path == "/v1/upload/a");
  CHECK(t.client_ip == "10.9.9.9");

  const http::Request plain = request("/v1/items");
  const rules::RequestAttributes p = check_attributes(plain, "192.0.2.1");
  CHECK(p.method == "GET");
  CHECK(p.path == "/v1/items");
  CHECK(p.client_ip == "192.0.2.1");

  http::Request empty = request("/check");
  empty.set("X-Real-IP", "");
  empty.set("X-Forwarded-For", " , 10.0.0.1");
  CHECK(check_attributes(empty, "").client_ip.empty());
}

TEST_CASE("first forwarded address") {
  CHECK(first_forwarded("a, b, c") == "a");
  CHECK(first_forwarded("\t2001:db8::1 ") == "2001:db8::1");
  CHECK(first_forwarded("") == "");
}

}  // namespace
}  // namespace sluice::gateway
