// sluicectl's arguments for the tests: parse a command line given as words, and run a parsed
// command in this process with its output and errors captured.
#pragma once

#include <stdio.h>  // open_memstream
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tools/sluicectl/commands.h"
#include "tools/sluicectl/options.h"

namespace sluice::ctl::testing {

// Parses `args` as sluicectl's arguments (after the program name).
inline ParsedFlags parse(std::vector<std::string> args) {
  args.insert(args.begin(), "sluicectl");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return parse_flags(static_cast<int>(argv.size()), argv.data());
}

// The same, from words separated by spaces.
inline ParsedFlags parse(const std::string& line) {
  std::vector<std::string> args;
  std::istringstream words(line);
  for (std::string word; words >> word;) args.push_back(word);
  return parse(std::move(args));
}

struct Ran {
  int status = -1;
  std::string out;
  std::string err;
};

// Parses `line` (it must be a command to run) and runs it as main would, in this process.
inline Ran run(const std::string& line) {
  const ParsedFlags parsed = parse(line);
  INFO("sluicectl " << line << ": " << parsed.text);
  REQUIRE(parsed.action == ParsedFlags::Action::kRun);
  char* out_text = nullptr;
  char* err_text = nullptr;
  std::size_t out_size = 0;
  std::size_t err_size = 0;
  FILE* out = open_memstream(&out_text, &out_size);
  FILE* err = open_memstream(&err_text, &err_size);
  REQUIRE((out != nullptr && err != nullptr));
  Ran ran;
  ran.status = run_command(parsed.options, out, err);
  std::fclose(out);
  std::fclose(err);
  ran.out.assign(out_text, out_size);
  ran.err.assign(err_text, err_size);
  std::free(out_text);
  std::free(err_text);
  return ran;
}

}  // namespace sluice::ctl::testing
