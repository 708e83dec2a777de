// The log lines of sluiced and sluice-gateway (log/log.h) as a test reads them: each line taken
// apart into its time, level, program, component and message, in the text and the JSON format,
// and the lines of a log that contain a given text counted. Used by tests/reliability/ and
// tests/failover/.
#pragma once

#include <cstddef>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::test {

struct LogLine {
  std::string time;   // RFC 3339, UTC, to the millisecond: 2026-12-06T20:52:18.173Z
  std::string level;  // info, warning or error
  std::string program;
  std::string component;
  std::string message;  // as written (in JSON, still escaped)
};

// "TIME LEVEL PROGRAM/COMPONENT: MESSAGE"; nullopt when `line` is not one.
inline std::optional<LogLine> parse_text_log_line(const std::string& line) {
  static const std::regex kLine(
      R"((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (info|warning|error) ([a-z-]+)/([a-z]+): (.+))");
  std::smatch m;
  if (!std::regex_match(line, m, kLine)) return std::nullopt;
  return LogLine{m[1], m[2], m[3], m[4], m[5]};
}

// {"time":TIME,"level":LEVEL,"program":PROGRAM,"component":COMPONENT,"message":MESSAGE}, the
// fields in that order; nullopt when `line` is not one.
inline std::optional<LogLine> parse_json_log_line(const std::string& line) {
  static const std::regex kLine(
      R"re(\{"time":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)","level":"(info|warning|error)",)re"
      R"re("program":"([a-z-]+)","component":"([a-z]+)","message":"(.+)"\})re");
  std::smatch m;
  if (!std::regex_match(line, m, kLine)) return std::nullopt;
  return LogLine{m[1], m[2], m[3], m[4], m[5]};
}

// The lines of `text`, without their newlines (a last line without one included).
inline std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    lines.emplace_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

// How many of `lines` contain `what`.
inline std::size_t count_containing(const std::vector<std::string>& lines, std::string_view what) {
  std::size_t n = 0;
  for (const std::string& line : lines) n += line.find(what) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace sluice::test
