// JSON text: a string as a JSON string literal. Shared by the tools' --json writer
// (cli/json_writer.h) and the JSON log lines (log/log.h).
#pragma once

#include <string>
#include <string_view>

namespace sluice {

// `text` as a JSON string literal, quotes included, appended to `out`: `"` and `\` escaped,
// the control characters as \b \f \n \r \t or \u00XX, UTF-8 passed through unchanged.
void append_json_string(std::string& out, std::string_view text);

}  // namespace sluice
