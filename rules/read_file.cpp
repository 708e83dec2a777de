#include "rules/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sluice::rules {

Expected<std::string> read_file(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Unexpected{std::string(std::strerror(errno))};
  std::string bytes;
  std::string error;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    error = std::strerror(errno);
  } else if (S_ISDIR(st.st_mode)) {
    error = "is a directory";
  } else {
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        error = std::strerror(errno);
        break;
      }
      if (n == 0) break;
      bytes.append(buffer, static_cast<std::size_t>(n));
      if (bytes.size() > kMaxRulesFileBytes) {
        error = "larger than 16 MiB";
        break;
      }
    }
  }
  ::close(fd);
  if (!error.empty()) return Unexpected{std::move(error)};
  return bytes;
}

}  // namespace sluice::rules

namespace sluice::rules {

std::string hash_hex(std::string_view bytes);

Expected<std::vector<SourceText>> read_rules(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<SourceText> out;
  if (!fs::is_directory(path, ec)) {
    auto bytes = read_file(path);
    if (!bytes) return Unexpected{std::move(bytes).error()};
    out.push_back(SourceText{path.string(), std::move(bytes).value()});
    return out;
  }
  std::vector<fs::path> files;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with('.')) continue;
    if (!name.ends_with(".yaml") && !name.ends_with(".yml")) continue;
    std::error_code kind;
    if (!fs::is_regular_file(it->path(), kind)) continue;  // follows symlinks
    files.push_back(it->path());
  }
  if (ec) return Unexpected{ec.message()};
  if (files.empty()) return Unexpected{std::string("no .yaml or .yml file in the directory")};
  std::sort(files.begin(), files.end());
  std::size_t total = 0;
  for (const fs::path& file : files) {
    auto bytes = read_file(file);
    if (!bytes) return Unexpected{file.string() + ": " + bytes.error()};
    total += bytes->size();
    if (total > kMaxRulesFileBytes) return Unexpected{std::string("larger than 16 MiB in all")};
    out.push_back(SourceText{file.string(), std::move(bytes).value()});
  }
  return out;
}

std::string rules_hash(std::span<const SourceText> files, std::string_view source) {
  if (files.size() == 1 && files.front().name == source) return hash_hex(files.front().bytes);
  std::string all;
  for (const SourceText& file : files) {
    all.append(file.name).append(1, '\0').append(std::to_string(file.bytes.size()));
    all.append(1, '\0').append(file.bytes);
  }
  return hash_hex(all);
}

}  // namespace sluice::rules
