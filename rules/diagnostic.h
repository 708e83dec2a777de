// One mistake found in a rules file, where it is and what is wrong.
#pragma once

#include <string>

namespace sluice::rules {

struct Diagnostic {
  std::string file;
  int line = 0;         // 1-based; 0 when the mistake has no place in the file (it cannot be read)
  int column = 0;       // 1-based
  std::string message;  // "FIELD: what is wrong", the field as its path in the file

  // "FILE:LINE:COLUMN: message", or "FILE: message" without a place.
  std::string to_string() const;

  friend bool operator==(const Diagnostic&, const Diagnostic&) = default;
};

}  // namespace sluice::rules
