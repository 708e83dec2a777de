// Runs the built sluicectl against an in-process daemon and checks output and exit status.
// The build makes client_tests depend on sluicectl and passes its path as SLUICECTL_PATH.
#include <sys/wait.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>

#include "tests/client/test_support.h"

namespace sluice::client {
namespace {

using testing::FakeServer;
using testing::TestServer;

#ifndef SLUICECTL_PATH
#error "SLUICECTL_PATH must be defined by the build (tests/CMakeLists.txt)"
#endif

std::filesystem::path sluicectl_path() { return SLUICECTL_PATH; }

// Fails the test (instead of skipping it) when the binary is missing.
void require_sluicectl() {
  INFO("sluicectl path: " << sluicectl_path().string());
  REQUIRE(std::filesystem::exists(sluicectl_path()));
}

struct Run {
  int status = -1;
  std::string output;  // stdout and stderr
};

Run run(const std::string& args) {
  const std::string command = "'" + sluicectl_path().string() + "' " + args + " 2>&1";
  Run result;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) {
    result.output.append(buffer.data(), n);
  }
  const int raw = ::pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return result;
}

TEST_CASE("sluicectl exits 0 when allowed, 1 when denied, 2 on errors") {
  require_sluicectl();
  TestServer server;
  const std::string s = "--servers " + server.address() + " ";

  Run ping = run(s + "ping");
  CHECK(ping.status == 0);
  CHECK_THAT(ping.output, Catch::Contains("pong from"));

  for (int i = 0; i < 2; ++i) {
    Run allowed = run(s + "acquire cli:key --limit 2 --period 60s");
    CHECK(allowed.status == 0);
    CHECK_THAT(allowed.output, Catch::StartsWith("ALLOWED"));
  }
  Run denied = run(s + "acquire cli:key --limit 2 --period 60s --json");
  CHECK(denied.status == 1);
  CHECK_THAT(denied.output, Catch::StartsWith("{\"key\":\"cli:key\",\"allowed\":false,\"limit\":2,"
                                              "\"remaining\":0,"));
  CHECK_THAT(denied.output, Catch::Contains("\"Retry-After\":\"30\""));
  CHECK(std::count(denied.output.begin(), denied.output.end(), '\n') == 1);

  Run never = run(s + "peek cli:big --algorithm gcra --limit 10 --period 1m --cost 11 --json");
  CHECK(never.status == 1);
  CHECK_THAT(never.output, Catch::Contains("\"retry_after_ms\":null"));

  Run reset = run(s + "reset cli:key");
  CHECK(reset.status == 0);
  CHECK_THAT(reset.output, Catch::Contains("existed"));

  Run stats = run(s + "stats --json");
  CHECK(stats.status == 0);
  CHECK_THAT(stats.output, Catch::StartsWith("{\"total\":{"));
  CHECK_THAT(stats.output, Catch::Contains("\"allowed\":2"));

  CHECK(run(s + "acquire --limit 2 --period 60s").status == 2);     // no key
  CHECK(run(s + "acquire k --period 60s").status == 2);             // no limit
  CHECK(run(s + "acquire k --limit 2").status == 2);                // no period
  CHECK(run(s + "acquire k --limit 2 --period soon").status == 2);  // bad period
  CHECK(run(s + "acquire k --limit 2 --period 1s --algorithm x").status == 2);
  CHECK(run(s + "explode").status == 2);
  Run invalid = run(s + "acquire '' --limit 2 --period 1s");
  CHECK(invalid.status == 2);
}

TEST_CASE("sluicectl exits 2 with the reason when the server does not answer") {
  require_sluicectl();
  FakeServer silent(FakeServer::Mode::kSilent);
  Run timeout = run("--servers " + silent.address() + " --timeout 100ms ping");
  CHECK(timeout.status == 2);
  CHECK_THAT(timeout.output, Catch::Contains("sluicectl: timeout"));
}

TEST_CASE("sluicectl pointed at something that is not Sluice says so") {
  require_sluicectl();
  FakeServer silent(FakeServer::Mode::kSilent);
  Run no_hello = run("--servers " + silent.address() + " --timeout 100ms ping");
  CHECK(no_hello.status == 2);
  CHECK(no_hello.output ==
        "sluicectl: timeout: no Sluice HELLO from " + silent.address() + " within 100 ms\n");

  FakeServer redis(FakeServer::Mode::kNotSluice);
  Run not_sluice = run("--servers " + redis.address() + " --timeout 1s ping");
  CHECK(not_sluice.status == 2);
  CHECK(not_sluice.output == "sluicectl: protocol_error: " + redis.address() +
                                 " answered something that is not Sluice (bad magic)\n");
}

}  // namespace
}  // namespace sluice::client
