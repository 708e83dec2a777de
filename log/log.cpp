#include "log/log.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "core/json_text.h"
#include "core/utc_time.h"

namespace sluice::log {
namespace {

Options& current() {
  static Options o;
  return o;
}

// The syslog priority of a level, for journald's "<N>" prefix.
int priority(Level level) {
  switch (level) {
    case Level::kInfo:
      return 6;
    case Level::kWarning:
      return 4;
    case Level::kError:
      return 3;
  }
  return 6;
}

}  // namespace

std::string_view level_name(Level level) {
  switch (level) {
    case Level::kInfo:
      return "info";
    case Level::kWarning:
      return "warning";
    case Level::kError:
      return "error";
  }
  return "info";
}

std::optional<Format> parse_format(std::string_view text) {
  if (text == "text") return Format::kText;
  if (text == "json") return Format::kJson;
  return std::nullopt;
}

bool journald_from_environment() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  return stream != nullptr && *stream != '\0';
}

void configure(Options options) { current() = std::move(options); }
const Options& options() { return current(); }

std::string format_line(const Options& o, Level level, std::string_view component,
                        std::string_view message, std::chrono::system_clock::time_point now) {
  std::string line;
  if (o.format == Format::kJson) {
    line = "{\"time\":\"" + format_utc_ms(now) + "\",\"level\":\"" +
           std::string(level_name(level)) + "\",\"program\":";
    append_json_string(line, o.program);
    line += ",\"component\":";
    append_json_string(line, component);
    line += ",\"message\":";
    append_json_string(line, message);
    line += "}\n";
    return line;
  }
  // One line per event: a message's own newlines are shown, not obeyed.
  std::string flat(message);
  for (char& c : flat) {
    if (c == '\n') c = ' ';
  }
  if (o.journald) {
    return fmt::format("<{}>{}/{}: {}\n", priority(level), o.program, component, flat);
  }
  return fmt::format("{} {} {}/{}: {}\n", format_utc_ms(now), level_name(level), o.program,
                     component, flat);
}

void write(Level level, std::string_view component, std::string_view message) {
  const std::string line =
      format_line(current(), level, component, message, std::chrono::system_clock::now());
  // One write(2): lines from several threads do not interleave.
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

bool Repeating::write(Level level, std::string message) {
  std::string line;
  {
    std::lock_guard lock(mutex_);
    if (message == last_) {
      ++times_;
      return false;
    }
    line = times_ > 1 ? fmt::format("{} (the message before came {} times in all)", message, times_)
                      : message;
    last_ = std::move(message);
    times_ = 1;
  }
  log::write(level, component_, line);
  return true;
}

}  // namespace sluice::log
