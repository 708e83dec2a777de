// Reads a whole (small) file: the rules library's only file input, shared by RuleSet::load and
// RuleSource so both see the same bytes and the same errors.
#pragma once

#include <filesystem>
#include <string>

#include "core/expected.h"

namespace sluice::rules {

// The file's bytes, or why not ("No such file or directory", "is a directory", ...). Refuses
// files over kMaxRulesFileBytes: a rules file is text a person writes.
inline constexpr std::size_t kMaxRulesFileBytes = 16u << 20;
Expected<std::string> read_file(const std::filesystem::path& file);

}  // namespace sluice::rules
