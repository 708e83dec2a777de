// The log lines of sluiced and sluice-gateway (log/log.h): text, JSON and journald's form, and a
// repeating message written once per change.
#include "log/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/log_lines.h"

namespace sluice::log {
namespace {

// 2026-12-06T20:52:18.173Z
const std::chrono::system_clock::time_point kAt =
    std::chrono::system_clock::time_point(std::chrono::milliseconds(1796590338173));

TEST_CASE("a text line has the time, the level, the program and component, and the message") {
  const Options text{.program = "sluiced", .format = Format::kText, .journald = false};
  CHECK(format_line(text, Level::kInfo, "etcd", "registered n1", kAt) ==
        "2026-12-06T20:52:18.173Z info sluiced/etcd: registered n1\n");
  CHECK(format_line(text, Level::kWarning, "node", "a", kAt) ==
        "2026-12-06T20:52:18.173Z warning sluiced/node: a\n");
  // A message's own newlines do not break the one-line-per-event rule.
  CHECK(format_line(text, Level::kError, "cluster", "refused:\nline 2", kAt) ==
        "2026-12-06T20:52:18.173Z error sluiced/cluster: refused: line 2\n");
}

TEST_CASE("under the journal a line has the syslog priority and no time") {
  const Options journal{.program = "sluiced", .format = Format::kText, .journald = true};
  CHECK(format_line(journal, Level::kInfo, "node", "stopped", kAt) == "<6>sluiced/node: stopped\n");
  CHECK(format_line(journal, Level::kWarning, "etcd", "fenced", kAt) ==
        "<4>sluiced/etcd: fenced\n");
  CHECK(format_line(journal, Level::kError, "shard", "x", kAt) == "<3>sluiced/shard: x\n");
}

TEST_CASE("a JSON line is one object with every field, the message escaped") {
  const Options json{.program = "sluice-gateway", .format = Format::kJson, .journald = true};
  CHECK(format_line(json, Level::kWarning, "rules", "bad \"x\"\\\n\t\x01", kAt) ==
        R"({"time":"2026-12-06T20:52:18.173Z","level":"warning","program":"sluice-gateway",)"
        R"("component":"rules","message":"bad \"x\"\\\n\t\u0001"})"
        "\n");
}

TEST_CASE("the log format flag's values") {
  CHECK(parse_format("text") == Format::kText);
  CHECK(parse_format("json") == Format::kJson);
  CHECK_FALSE(parse_format("JSON").has_value());
  CHECK_FALSE(parse_format("").has_value());
  CHECK(level_name(Level::kError) == "error");
}

// Captures what write() sends to stderr while it lives.
class CapturedStderr {
 public:
  CapturedStderr() {
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    path_ = "/tmp/sluice-log-test-" + std::to_string(::getpid());
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  ~CapturedStderr() {
    restore();
    std::remove(path_.c_str());
  }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream out;
    out << in.rdbuf();
    return out.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }
  int saved_ = -1;
  std::string path_;
};

TEST_CASE("a repeating message is written once per change, with the count of the one before") {
  configure({.program = "test", .format = Format::kJson, .journald = false});
  CapturedStderr captured;
  Repeating said("etcd");
  CHECK(said.write(Level::kWarning, "keepalive failed: refused"));
  CHECK_FALSE(said.write(Level::kWarning, "keepalive failed: refused"));
  CHECK_FALSE(said.write(Level::kWarning, "keepalive failed: refused"));
  CHECK(said.write(Level::kInfo, "serving as primary again"));
  CHECK(said.write(Level::kWarning, "keepalive failed: refused"));
  const std::string text = captured.text();
  configure({});
  std::istringstream lines(text);
  std::vector<std::string> messages;
  for (std::string l; std::getline(lines, l);) {
    INFO(l);
    const auto parsed = test::parse_json_log_line(l);
    REQUIRE(parsed.has_value());
    CHECK(parsed->program == "test");
    CHECK(parsed->component == "etcd");
    messages.push_back(parsed->message);
  }
  CHECK(messages == std::vector<std::string>{
                        "keepalive failed: refused",
                        "serving as primary again (the message before came 3 times in all)",
                        "keepalive failed: refused"});
}

}  // namespace
}  // namespace sluice::log
