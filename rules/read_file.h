// Reads a whole (small) file: the rules library's only file input, shared by RuleSet::load and
// RuleSource so both see the same bytes and the same errors.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/expected.h"

namespace sluice::rules {

// The file's bytes, or why not ("No such file or directory", "is a directory", ...). Refuses
// files over kMaxRulesFileBytes: a rules file is text a person writes.
inline constexpr std::size_t kMaxRulesFileBytes = 16u << 20;
Expected<std::string> read_file(const std::filesystem::path& file);

// One file of a rules set: its path as given, and its bytes.
struct SourceText {
  std::string name;
  std::string bytes;
};

// What a rules path holds: a file's bytes, or, for a directory, those of every file in it
// (through symlinks, as a Kubernetes ConfigMap mounts them) whose name ends in .yaml or .yml
// and does not start with '.', in name order. An empty directory is an error.
Expected<std::vector<SourceText>> read_rules(const std::filesystem::path& path);

// The hash of a set read from `source`: hash_hex() of the bytes when it is one file named
// `source`, else of every file's name and bytes.
std::string rules_hash(std::span<const SourceText> files, std::string_view source);

}  // namespace sluice::rules
