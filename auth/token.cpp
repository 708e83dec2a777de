#include "auth/token.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <utility>

#include "protocol/messages.h"

namespace sluice::auth {

namespace {

// The most bytes read from a token file: a token plus any trailing whitespace an editor may
// leave. A larger file is refused as too long without being read whole (e.g. /dev/zero).
constexpr std::size_t kMaxFileBytes = 64 * 1024;

bool is_trailing_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

// Closes the descriptor on every path out of read_token_file().
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

TokenFile failure(const std::string& path, std::string_view why) {
  TokenFile result;
  result.error = fmt::format("{}: {}", path, why);
  return result;
}

}  // namespace

TokenFile read_token_file(const std::string& path) {
  const FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) return failure(path, fmt::format("cannot open: {}", std::strerror(errno)));

  TokenFile result;
  // The mode of the file actually opened, not of whatever the path names a moment later.
  struct stat info {};
  if (::fstat(file.get(), &info) == 0 && (info.st_mode & (S_IRGRP | S_IROTH)) != 0) {
    result.warning = fmt::format(
        "{} is readable by group or others (mode {:04o}); make it private: chmod 600 {}", path,
        static_cast<unsigned>(info.st_mode & 07777), path);
  }

  std::string& content = result.token;
  content.resize(kMaxFileBytes + 1);
  std::size_t size = 0;
  while (size < content.size()) {
    const ssize_t n = ::read(file.get(), content.data() + size, content.size() - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failure(path, fmt::format("cannot read: {}", std::strerror(errno)));
    if (n == 0) break;
    size += static_cast<std::size_t>(n);
  }
  const bool whole = size <= kMaxFileBytes;
  while (size > 0 && is_trailing_space(content[size - 1])) --size;
  content.resize(size);
  if (content.empty()) return failure(path, "empty (or only whitespace)");
  if (!whole || content.size() > protocol::kMaxTokenLength) {
    return failure(path, fmt::format("longer than {} bytes, the most a token may have (trailing "
                                     "whitespace aside)",
                                     protocol::kMaxTokenLength));
  }
  return result;
}

bool token_matches(std::string_view expected, std::string_view presented) {
  // Volatile, so that the compiler cannot turn the accumulation into a loop that stops at the
  // first difference. Bytes past the end of a shorter `presented` are compared with 0; its
  // length is the sender's own, so the branch that picks them tells the sender nothing new.
  volatile unsigned char differences = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto sent = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    differences = differences | (static_cast<unsigned char>(expected[i]) ^ sent);
  }
  const bool same_length = expected.size() == presented.size();
  return (differences == 0) & same_length;
}

}  // namespace sluice::auth
