// A binary of the project run as a child process by a test: its stdout on a pipe (sluiced's
// start-up line), its stderr to a file or to ours, its resident memory from /proc, and a stop
// that is bounded in time. Used by tests/client/sluicectl_test.cpp and tests/reliability/.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sluice::test {

// Fails the test (instead of skipping it) when a binary the test runs is missing.
inline void require_binary(const std::filesystem::path& path) {
  INFO("missing " << path.string() << ": build every binary (cmake --build build)");
  REQUIRE(std::filesystem::exists(path));
}

// What a shell command printed (stdout and stderr together) and its exit status (-1: killed).
struct Run {
  int status = -1;
  std::string output;
};

// Runs a shell command line with stderr joined to stdout, to its end.
inline Run run_command(const std::string& command_line) {
  const std::string command = command_line + " 2>&1";
  Run result;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (const std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) {
    result.output.append(buffer, n);
  }
  const int raw = ::pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return result;
}

// "HOST:PORT" of the public port in sluiced's start-up line (`... listening on 127.0.0.1:7420
// (public), ...`, an IPv6 host in brackets), or "" when the line does not have it.
inline std::string listen_endpoint(std::string_view line) {
  constexpr std::string_view kPrefix = "listening on ";
  const std::size_t at = line.find(kPrefix);
  if (at == std::string_view::npos) return "";
  const std::size_t begin = at + kPrefix.size();
  const std::size_t end = line.find(' ', begin);
  return std::string(line.substr(begin, end == std::string_view::npos ? end : end - begin));
}

// The public port in sluiced's start-up line; 0 when the line does not name one.
inline std::uint16_t listen_port(std::string_view line) {
  const std::string endpoint = listen_endpoint(line);
  const std::size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon + 1 == endpoint.size()) return 0;
  std::uint32_t port = 0;
  for (const char c : endpoint.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) return 0;
    port = port * 10 + static_cast<std::uint32_t>(c - '0');
  }
  return port <= 65535 ? static_cast<std::uint16_t>(port) : 0;
}

// A field of /proc/PID/status given in kB ("VmRSS", "VmHWM"), in bytes; nullopt when the
// process or the field is not there.
inline std::optional<std::uint64_t> proc_status_bytes(pid_t pid, std::string_view field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.size() <= field.size() || !line.starts_with(field) || line[field.size()] != ':') {
      continue;
    }
    std::uint64_t kib = 0;
    bool digits = false;
    for (const char c : std::string_view(line).substr(field.size() + 1)) {
      if (c >= '0' && c <= '9') {
        kib = kib * 10 + static_cast<std::uint64_t>(c - '0');
        digits = true;
      } else if (digits) {
        break;
      }
    }
    if (digits) return kib * 1024;
  }
  return std::nullopt;
}

// Starts a binary with its stdout on a pipe; stop() (or the destructor) sends SIGTERM and
// reaps it, with SIGKILL if it has not exited 10 s later. The child is killed too when the
// thread that started it dies (PR_SET_PDEATHSIG), so a test killed by a timeout or a crash
// leaves no daemon behind; start it from the test's main thread.
class Child {
 public:
  // `stderr_path`, when not empty, receives the child's stderr (else it shares ours).
  Child(const std::filesystem::path& path, const std::vector<std::string>& args,
        const std::string& stderr_path = "") {
    require_binary(path);
    std::vector<std::string> words{path.string()};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    int out[2];
    int exec_failed[2];  // the child writes its errno here when exec fails; closed by exec
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(exec_failed, O_CLOEXEC) == 0);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls from here to exec: the test may have other threads.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent died before the line above
      ::dup2(out[1], STDOUT_FILENO);            // dup2 clears O_CLOEXEC on the copy
      if (!stderr_path.empty()) {
        const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (err >= 0) ::dup2(err, STDERR_FILENO);
      }
      ::execv(argv[0], argv.data());
      const int error = errno;
      (void)!::write(exec_failed[1], &error, sizeof error);
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(exec_failed[1]);
    out_ = out[0];
    int error = 0;
    const ssize_t n = pid_ > 0 ? ::read(exec_failed[0], &error, sizeof error) : -1;
    ::close(exec_failed[0]);
    INFO("starting " << path.string() << ": " << std::strerror(pid_ > 0 ? error : errno));
    if (pid_ > 0 && n > 0) {
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    REQUIRE(pid_ > 0);
  }
  ~Child() { stop(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // The first line the child prints, waiting at most `limit` for it; "" when none came.
  std::string first_line(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::string text;
    while (text.find('\n') == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{out_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char buffer[512];
      const ssize_t n = ::read(out_, buffer, sizeof buffer);
      if (n <= 0) return "";
      text.append(buffer, static_cast<std::size_t>(n));
    }
    return text.substr(0, text.find('\n'));
  }

  // Resident memory now (VmRSS), in bytes; 0 once the child has exited.
  std::uint64_t rss_bytes() const {
    return pid_ > 0 ? proc_status_bytes(pid_, "VmRSS").value_or(0) : 0;
  }
  // The most resident memory since start, or since the last reset_peak_rss() (VmHWM).
  std::uint64_t peak_rss_bytes() const {
    return pid_ > 0 ? proc_status_bytes(pid_, "VmHWM").value_or(0) : 0;
  }
  // Sets the peak (VmHWM) back to the memory resident now; false when the kernel does not
  // allow it (it needs /proc/PID/clear_refs), and the peak then still counts from start-up.
  bool reset_peak_rss() const {
    if (pid_ <= 0) return false;
    std::ofstream clear("/proc/" + std::to_string(pid_) + "/clear_refs");
    clear << "5\n";
    clear.flush();
    return clear.good();
  }

  void send_signal(int signal) const {
    if (pid_ > 0) ::kill(pid_, signal);
  }

  // SIGSTOP, then waits (at most `limit`) until every thread of the child is stopped: kill()
  // returns once the signal is queued, and a thread still running meanwhile would answer a
  // request sent right after it. False if a thread still runs at the limit.
  bool freeze(std::chrono::milliseconds limit) const {
    if (pid_ <= 0) return false;
    ::kill(pid_, SIGSTOP);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    const std::filesystem::path tasks = "/proc/" + std::to_string(pid_) + "/task";
    for (;;) {
      bool all_stopped = true;
      std::error_code ec;
      for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
        // /proc/PID/task/TID/stat: "TID (comm) STATE ...", comm may hold spaces and brackets.
        std::ifstream in(task.path() / "stat");
        const std::string stat((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
        const std::size_t close = stat.rfind(')');
        if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'T') {
          all_stopped = false;
        }
      }
      if (!ec && all_stopped) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Waits at most `limit` for the child to exit: its exit status (-1 when it did not exit
  // normally, e.g. killed by a signal), or nullopt when it is still running.
  std::optional<int> wait_exit(std::chrono::milliseconds limit) {
    if (pid_ <= 0) return exit_status_;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      int raw = 0;
      const pid_t reaped = ::waitpid(pid_, &raw, WNOHANG);
      if (reaped == pid_ || reaped < 0) {
        exit_status_ = reaped == pid_ && WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
        pid_ = -1;
        ::close(out_);
        out_ = -1;
        return exit_status_;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // SIGTERM, then its exit status (-1 when it did not exit normally, or needed SIGKILL after
  // 10 s).
  int stop() {
    if (pid_ <= 0) return exit_status_.value_or(-1);
    send_signal(SIGTERM);
    if (const auto status = wait_exit(std::chrono::seconds(10))) return *status;
    send_signal(SIGKILL);
    (void)wait_exit(std::chrono::seconds(10));
    exit_status_ = -1;
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::optional<int> exit_status_;
};

}  // namespace sluice::test
