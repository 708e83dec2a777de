// The log lines of sluiced and sluice-gateway, one per event, on stderr (docs/OPERATIONS.md,
// "Logs"). Each has a time (RFC 3339, UTC, to the millisecond), a level and a component:
//
//   text:     2026-12-06T20:52:18.173Z info sluiced/etcd: registered /sluice/c/members/n1 ...
//   json:     {"time":"2026-12-06T20:52:18.173Z","level":"info","program":"sluiced",
//              "component":"etcd","message":"registered ..."}
//   journald: <6>sluiced/etcd: registered ...   (no time: the journal adds its own; the level as
//             the syslog priority prefix the journal reads)
//
// configure() once at start-up, before any thread; write() from any thread (a line is one
// write(2) call, so lines of two threads never mix).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::log {

enum class Level : std::uint8_t { kInfo, kWarning, kError };
enum class Format : std::uint8_t { kText, kJson };

// "info", "warning", "error".
std::string_view level_name(Level level);
// "text" or "json"; nullopt otherwise.
std::optional<Format> parse_format(std::string_view text);

struct Options {
  std::string program = "sluice";
  Format format = Format::kText;
  // Under systemd's journal: no time, the level as a "<N>" prefix (text format only).
  bool journald = false;
};

// Whether stderr goes to the journal: systemd sets JOURNAL_STREAM for a service's streams.
bool journald_from_environment();

void configure(Options options);
const Options& options();

// The line (with its newline) that write() would print at `now`.
std::string format_line(const Options& options, Level level, std::string_view component,
                        std::string_view message, std::chrono::system_clock::time_point now);

void write(Level level, std::string_view component, std::string_view message);
inline void info(std::string_view component, std::string_view message) {
  write(Level::kInfo, component, message);
}
inline void warning(std::string_view component, std::string_view message) {
  write(Level::kWarning, component, message);
}
inline void error(std::string_view component, std::string_view message) {
  write(Level::kError, component, message);
}

// The messages of one component that a retry loop may give again and again: a message is
// written when it differs from the last one given here (saying how many times that one came,
// when more than once), not on each repeat.
class Repeating {
 public:
  explicit Repeating(std::string component) : component_(std::move(component)) {}
  // Whether the line was written.
  bool write(Level level, std::string message);

 private:
  std::string component_;
  std::mutex mutex_;
  std::string last_;         // under mutex_
  std::uint64_t times_ = 0;  // how many times last_ came, under mutex_
};

}  // namespace sluice::log
