#include "tools/gateway/attributes.h"

#include <catch2/catch.hpp>

namespace sluice::gateway {
namespace {

http::Request request(std::string target) {
  http::Request r{boost::beast::http::verb::get, target, 11};
  return r;
}

TEST_CASE("check attributes from nginx: the X-Original headers and X-Real-IP only") {
  http::Request r = request("/check?deny=403");
  r.set("X-Original-Method", "POST");
  r.set("X-Original-URI", "/login?next=/home");
  r.set("X-Real-IP", " 10.0.0.7 ");
  // The client's own attempts at the other proxies' headers are ignored.
  r.set("X-Forwarded-Method", "GET");
  r.set("X-Forwarded-Uri", "/free");
  r.set("X-Forwarded-For", "10.9.9.9, 10.0.0.1");
  r.set("X-API-Key", "k1");
  const rules::RequestAttributes a = check_attributes(r, "127.0.0.1", ForwardedBy::kNginx);
  CHECK(a.method == "POST");
  CHECK(a.path == "/login?next=/home");
  CHECK(a.client_ip == "10.0.0.7");
  CHECK(a.header("x-api-key") == std::optional<std::string_view>("k1"));
}

TEST_CASE("check attributes from Traefik or Caddy: the X-Forwarded headers and the last address") {
  http::Request r = request("/check");
  r.set("X-Forwarded-Method", "PUT");
  r.set("X-Forwarded-Uri", "/v1/upload/a");
  // The client wrote the first address; the proxy appended the last.
  r.set("X-Forwarded-For", "  10.9.9.9 ,10.0.0.1 ");
  r.set("X-Original-URI", "/spoofed");
  r.set("X-Real-IP", "1.2.3.4");
  const rules::RequestAttributes t = check_attributes(r, "127.0.0.1", ForwardedBy::kForwarded);
  CHECK(t.method == "PUT");
  CHECK(t.path == "/v1/upload/a");
  CHECK(t.client_ip == "10.0.0.1");
}

TEST_CASE("check attributes: absent headers give the request's own and the peer") {
  const http::Request plain = request("/v1/items");
  for (const ForwardedBy by : {ForwardedBy::kNginx, ForwardedBy::kForwarded}) {
    const rules::RequestAttributes p = check_attributes(plain, "192.0.2.1", by);
    CHECK(p.method == "GET");
    CHECK(p.path == "/v1/items");
    CHECK(p.client_ip == "192.0.2.1");
  }
  http::Request empty = request("/check");
  empty.set("X-Real-IP", " ");
  empty.set("X-Forwarded-For", "10.0.0.1, ");
  CHECK(check_attributes(empty, "192.0.2.2", ForwardedBy::kNginx).client_ip == "192.0.2.2");
  CHECK(check_attributes(empty, "192.0.2.2", ForwardedBy::kForwarded).client_ip == "192.0.2.2");
}

TEST_CASE("last forwarded address and the proxy names") {
  CHECK(last_forwarded("a, b, c") == "c");
  CHECK(last_forwarded("\t2001:db8::1 ") == "2001:db8::1");
  CHECK(last_forwarded("") == "");
  CHECK(parse_forwarded_by("nginx") == ForwardedBy::kNginx);
  CHECK(parse_forwarded_by("forwarded") == ForwardedBy::kForwarded);
  CHECK_FALSE(parse_forwarded_by("traefik").has_value());
  CHECK(forwarded_by_name(ForwardedBy::kForwarded) == "forwarded");
}

TEST_CASE("paths are normalized as a server resolves them before the rules match them") {
  CHECK(normalize_path("/login") == "/login");
  CHECK(normalize_path("/login?user=a#x") == "/login");
  CHECK(normalize_path("/%6Cogin") == "/login");
  CHECK(normalize_path("/%6cogin") == "/login");
  CHECK(normalize_path("//login") == "/login");
  CHECK(normalize_path("/./login") == "/login");
  CHECK(normalize_path("/a/b/../../login") == "/login");
  CHECK(normalize_path("/../../login") == "/login");
  CHECK(normalize_path("/v1/upload/") == "/v1/upload/");
  CHECK(normalize_path("/v1/upload/x/..") == "/v1/upload/");
  CHECK(normalize_path("/a/%2E%2E/login") == "/login");  // an encoded dot is a dot
  CHECK(normalize_path("/a%2Fb") == "/a%2Fb");           // an encoded slash is not a separator
  CHECK(normalize_path("/a%2") == "/a%2");
  CHECK(normalize_path("/%zz") == "/%zz");
  CHECK(normalize_path("") == "/");
  CHECK(normalize_path("?q") == "/");
  CHECK(normalize_path("login") == "/login");
}

}  // namespace
}  // namespace sluice::gateway
