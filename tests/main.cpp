// The main of every test binary: Catch2's own, plus two guards that keep the suite honest.
//  - Every test case name must survive CTest discovery (catch_discover_tests passes each name
//    through a CMake list and back as a Catch2 test spec). A name that does not, say one with
//    '[' or ';', silently turns into entries that run nothing, so such a binary refuses to list
//    or run anything; `--check-test-names` runs only this check (the build calls it).
//  - With SLUICE_TEST_RECORD_DIR set, each process appends the name of every test case it runs
//    to DIR/<binary>.<pid>.ran, so tools/test.sh can check that ctest ran each listed test once.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <string_view>

namespace {

// Why `name` cannot be a CTest-discovered test name, or nullptr when it can. Commas are fine:
// catch_discover_tests escapes them (and '[', ']'), but not ';' (a CMake list separator) nor
// '\' and it cannot balance a lone '[' inside the CMake list it splits the names from, and a
// name is passed as a command-line argument.
const char* unsafe_reason(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.front() == ' ' || name.back() == ' ') return "starts or ends with a space";
  if (name.front() == '~' || name.front() == '#' || name.starts_with("exclude:")) {
    return "starts with a test spec operator ('~', '#' or 'exclude:')";
  }
  // Passed on the command line, such a name would be read as an option.
  if (name.front() == '-') return "starts with '-' (an option on the command line)";
  for (const char c : name) {
    switch (c) {
      case '[':
      case ']':
        return "contains '[' or ']' (a tag in a test spec, a bracket in a CMake list)";
      case ';':
        return "contains ';' (a CMake list separator)";
      case '\\':
        return "contains '\\' (an escape in test specs and CMake)";
      case '*':
        return "contains '*' (a wildcard in test specs)";
      case '"':
        return "contains '\"' (a quote in test specs)";
      default:
        if (std::iscntrl(static_cast<unsigned char>(c))) return "contains a control character";
    }
  }
  return nullptr;
}

// Test specs match names case-insensitively, so two names equal but for case run together.
bool test_names_are_safe(std::ostream& err) {
  bool safe = true;
  std::map<std::string, std::string> by_lower_name;
  for (const Catch::TestCase& test : Catch::getRegistryHub().getTestCaseRegistry().getAllTests()) {
    const std::string& name = test.getTestCaseInfo().name;
    if (const char* reason = unsafe_reason(name)) {
      err << "test name " << reason << ": \"" << name << "\" (" << test.getTestCaseInfo().lineInfo
          << ")\n";
      safe = false;
    }
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const auto [it, inserted] = by_lower_name.emplace(lower, name);
    if (!inserted) {
      err << "test names differ only in case, so a test spec runs both: \"" << it->second
          << "\" and \"" << name << "\" (" << test.getTestCaseInfo().lineInfo << ")\n";
      safe = false;
    }
  }
  if (!safe) err << "rename these tests; see tests/CMakeLists.txt\n";
  return safe;
}

// Set before the run; written with one writev per test case, so no allocation happens between
// tests (tests/client/allocation_test.cpp counts the whole process's allocations).
std::string record_path;
int record_fd = -1;

class RecordRunTests : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    if (record_path.empty()) return;
    if (record_fd < 0) {
      record_fd = ::open(record_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (record_fd < 0) {
        std::cerr << "cannot open " << record_path << "\n";
        std::abort();
      }
    }
    char newline = '\n';
    iovec parts[2] = {{const_cast<char*>(info.name.data()), info.name.size()}, {&newline, 1}};
    if (::writev(record_fd, parts, 2) != static_cast<ssize_t>(info.name.size() + 1)) {
      std::cerr << "cannot write to " << record_path << "\n";
      std::abort();
    }
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(RecordRunTests)

int main(int argc, char* argv[]) {
  Catch::Session session;
  bool check_names_only = false;
  session.cli(session.cli() | Catch::clara::Opt(check_names_only)["--check-test-names"](
                                  "only check that every test name survives CTest discovery"));
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;

  if (!test_names_are_safe(std::cerr)) return 2;
  if (check_names_only) return 0;

  if (const char* dir = std::getenv("SLUICE_TEST_RECORD_DIR"); dir != nullptr && *dir != '\0') {
    const std::string_view program = argv[0];
    const std::string_view binary = program.substr(program.find_last_of('/') + 1);
    record_path =
        std::string(dir) + "/" + std::string(binary) + "." + std::to_string(::getpid()) + ".ran";
  }
  return session.run();
}
