// Debian's nginx in front of a stub upstream with examples/nginx/sluice.conf, the
// sluice-gateway binary and a real node: a denied client sees 429 with Retry-After and the
// RateLimit fields, an allowed one 200 with them, and nginx logs no error per denial.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/client/test_support.h"
#include "tests/gateway/gateway_support.h"
#include "tests/support/child_process.h"
#include "tests/support/ports.h"

namespace sluice::gateway::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kNginx = "/usr/sbin/nginx";

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::size_t lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

// Whether 127.0.0.1:port answers `target` with any HTTP response within `limit`.
bool answers(std::uint16_t port, const std::string& target, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    try {
      test::http_support::HttpClient c(port);
      if (c.send(test::http_support::get(target)) && c.read_response(1000ms)) return true;
    } catch (const std::exception&) {
      // not listening yet
    }
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("sluice-nginx-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

TEST_CASE("nginx with sluice.conf: 5 x 200 then 429 with Retry-After and no error log line") {
  test::require_binary(kNginx);
  test::require_binary(GATEWAY_PATH);
  const fs::path examples = fs::path(SOURCE_DIR) / "examples";
  client::testing::TestServer node;
  TempDir dir;
  const std::uint16_t base = test::free_port_block(3);
  const std::uint16_t gateway_port = base;
  const std::uint16_t nginx_port = base + 1;
  const std::uint16_t upstream_port = base + 2;

  test::Child gateway(GATEWAY_PATH,
                      {"--listen", "127.0.0.1:" + std::to_string(gateway_port), "--servers",
                       node.address(), "--rules", (examples / "rules.yaml").string()},
                      (dir.path / "gateway.log").string());
  INFO("gateway log: " << read_file(dir.path / "gateway.log"));
  REQUIRE(answers(gateway_port, "/healthz", 10s));

  std::ofstream(dir.path / "nginx.conf")
      << "daemon off;\nmaster_process off;\npid " << (dir.path / "nginx.pid").string()
      << ";\nerror_log " << (dir.path / "error.log").string() << " warn;\n"
      << "events { worker_connections 64; }\n"
      << "http {\n  access_log " << (dir.path / "access.log").string() << ";\n"
      << "  client_body_temp_path " << dir.path.string() << "/body;\n"
      << "  proxy_temp_path " << dir.path.string() << "/proxy;\n"
      << "  fastcgi_temp_path " << dir.path.string() << "/fastcgi;\n"
      << "  uwsgi_temp_path " << dir.path.string() << "/uwsgi;\n"
      << "  scgi_temp_path " << dir.path.string() << "/scgi;\n"
      << "  upstream sluice_gateway { server 127.0.0.1:" << gateway_port << "; keepalive 4; }\n"
      << "  server {\n    listen 127.0.0.1:" << upstream_port << ";\n"
      << "    location / { default_type text/plain; return 200 \"hello\\n\"; }\n  }\n"
      << "  server {\n    listen 127.0.0.1:" << nginx_port << ";\n"
      << "    include " << (examples / "nginx" / "sluice.conf").string() << ";\n"
      << "    location / {\n      auth_request /sluice-check;\n"
      << "      include " << (examples / "nginx" / "sluice-headers.conf").string() << ";\n"
      << "      proxy_pass http://127.0.0.1:" << upstream_port << ";\n    }\n"
      << "    location /forbidden/ { deny all; auth_request /sluice-check; }\n"
      << "  }\n}\n";
  test::Child nginx(kNginx, {"-p", dir.path.string(), "-c", (dir.path / "nginx.conf").string()},
                    (dir.path / "nginx.stderr").string());
  INFO("nginx stderr: " << read_file(dir.path / "nginx.stderr"));
  REQUIRE(answers(nginx_port, "/healthz-of-nothing", 10s));
  const std::size_t log_lines_before = lines(read_file(dir.path / "error.log"));

  const auto ask = [&](std::string_view target, std::string_view key) {
    test::http_support::HttpClient c(nginx_port);
    REQUIRE(c.send(test::http_support::get(target, "X-API-Key: " + std::string(key) + "\r\n")));
    auto response = c.read_response();
    REQUIRE(response.has_value());
    return std::move(*response);
  };
  for (int i = 1; i <= 5; ++i) {
    INFO("request " << i);
    const auto r = ask("/v1/items", "k1");
    CHECK(r.result_int() == 200);
    CHECK(r.body() == "hello\n");
    CHECK(field(r, "RateLimit-Limit") == "5");
    CHECK(field(r, "RateLimit-Remaining") == std::to_string(5 - i));
    CHECK(field(r, "RateLimit-Policy") == R"("key_minute";q=5;w=60, "ip_second";q=20;w=1)");
    CHECK(field(r, "RateLimit").starts_with("\"key_minute\";r=" + std::to_string(5 - i) + ";t="));
    CHECK(field(r, "X-RateLimit-Limit") == "5");
    CHECK(field(r, "Retry-After") == "<absent>");
  }
  for (int i = 0; i < 3; ++i) {
    const auto denied = ask("/v1/items", "k1");
    CHECK(denied.result_int() == 429);
    CHECK(denied.body() == "Too Many Requests\n");
    const int retry = std::stoi(field(denied, "Retry-After"));
    CHECK(retry >= 1);
    CHECK(retry <= 60);
    CHECK(field(denied, "RateLimit-Limit") == "5");
    CHECK(field(denied, "RateLimit-Remaining") == "0");
    CHECK(field(denied, "RateLimit-Policy") == R"("key_minute";q=5;w=60, "ip_second";q=20;w=1)");
    CHECK(field(denied, "RateLimit").starts_with("\"key_minute\";r=0;t="));
    CHECK(field(denied, "X-RateLimit-Remaining") == "0");
  }
  // Another key is counted apart.
  CHECK(ask("/v1/items", "k2").result_int() == 200);
  // No line in the error log for any of it.
  const std::string error_log = read_file(dir.path / "error.log");
  INFO("error.log: " << error_log);
  CHECK(error_log.find("auth request unexpected status") == std::string::npos);
  CHECK(lines(error_log) == log_lines_before);
  // A 403 that is not a denial (nginx's own `deny`) stays 403.
  CHECK(ask("/forbidden/x", "k3").result_int() == 403);
  const std::string access_log = read_file(dir.path / "access.log");
  CHECK(std::count(access_log.begin(), access_log.end(), '\n') >= 10);
  CHECK(access_log.find("\" 429 ") != std::string::npos);
}

}  // namespace
}  // namespace sluice::gateway::testing
