// The token file reader and the constant-time comparison (auth/token.h).
#include "auth/token.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "protocol/messages.h"

namespace sluice::auth {
namespace {

using namespace std::string_literals;

// A file in the temporary directory, removed by the destructor.
class TempFile {
 public:
  TempFile(std::string_view content, ::mode_t mode = 0600) {
    static int counter = 0;
    path_ = (std::filesystem::temp_directory_path() /
             ("sluice-token-" + std::to_string(::getpid()) + "-" + std::to_string(++counter)))
                .string();
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    REQUIRE(::chmod(path_.c_str(), mode) == 0);
  }
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---- token_matches ------------------------------------------------------------------------

TEST_CASE("token_matches accepts the same token and refuses one that differs anywhere") {
  const std::string expected = "0123456789abcdef";
  CHECK(token_matches(expected, "0123456789abcdef"));
  CHECK_FALSE(token_matches(expected, "x123456789abcdef"));  // first byte
  CHECK_FALSE(token_matches(expected, "0123456x89abcdef"));  // a middle byte
  CHECK_FALSE(token_matches(expected, "0123456789abcdex"));  // last byte
  CHECK_FALSE(token_matches(expected, "0123456789ABCDEF"));  // case matters
}

TEST_CASE("token_matches refuses a prefix, a longer token and an empty one") {
  const std::string expected = "s3cret-token";
  CHECK_FALSE(token_matches(expected, "s3cret"));                 // a prefix
  CHECK_FALSE(token_matches(expected, "s3cret-token-and-more"));  // expected is its prefix
  CHECK_FALSE(token_matches(expected, "s3cret-token\n"));
  CHECK_FALSE(token_matches(expected, ""));
  CHECK_FALSE(token_matches("", "anything"));
  CHECK(token_matches("", ""));
}

TEST_CASE("token_matches compares raw bytes, zero bytes included") {
  const std::string expected = "a\0b"s;
  CHECK(token_matches(expected, "a\0b"s));
  CHECK_FALSE(token_matches(expected, "a"));
  CHECK_FALSE(token_matches(expected, "a\0"s));
  // Padded with zero bytes these would match: only the length tells them apart.
  CHECK_FALSE(token_matches("a\0"s, "a"));
  CHECK_FALSE(token_matches("a", "a\0"s));
  CHECK_FALSE(token_matches(expected, "a\0b\0"s));
  const std::string high = "\xff\x80\x01";
  CHECK(token_matches(high, "\xff\x80\x01"));
  CHECK_FALSE(token_matches(high, "\x7f\x80\x01"));
}

TEST_CASE("token_matches works on the longest token") {
  const std::string expected(protocol::kMaxTokenLength, 'k');
  std::string presented = expected;
  CHECK(token_matches(expected, presented));
  presented.back() = 'j';
  CHECK_FALSE(token_matches(expected, presented));
}

// ---- read_token_file -----------------------------------------------------------------------

TEST_CASE("a token file loses its trailing whitespace and keeps everything else") {
  const auto [content, token] = GENERATE(table<std::string, std::string>({
      {"s3cret", "s3cret"},
      {"s3cret\n", "s3cret"},
      {"s3cret\r\n", "s3cret"},
      {"s3cret \t\n\n\v\f", "s3cret"},
      {"  s3cret\n", "  s3cret"},    // leading whitespace is part of the token
      {"two words\n", "two words"},  // so is inner whitespace
      {"line one\nline two\n", "line one\nline two"},
  }));
  CAPTURE(content);
  const TempFile file(content);
  const TokenFile read = read_token_file(file.path());
  REQUIRE(read.ok());
  CHECK(read.token == token);
  CHECK(read.warning.empty());  // mode 0600
}

TEST_CASE("a token file of exactly kMaxTokenLength bytes is read, plus its newline") {
  const std::string token(protocol::kMaxTokenLength, 'k');
  const TempFile file(token + "\n");
  const TokenFile read = read_token_file(file.path());
  REQUIRE(read.ok());
  CHECK(read.token == token);
}

TEST_CASE("an empty, blank, missing, unreadable or too long token file is an error naming it") {
  const std::string secret = "do-not-print-me";
  SECTION("empty") {
    const TempFile file("");
    const TokenFile read = read_token_file(file.path());
    CHECK_FALSE(read.ok());
    CHECK(read.error == file.path() + ": empty (or only whitespace)");
  }
  SECTION("only whitespace") {
    const TempFile file(" \n\t\n");
    CHECK(read_token_file(file.path()).error == file.path() + ": empty (or only whitespace)");
  }
  SECTION("missing") {
    const std::string path =
        (std::filesystem::temp_directory_path() / "sluice-no-such-token-file").string();
    const TokenFile read = read_token_file(path);
    CHECK_FALSE(read.ok());
    CHECK(read.error == path + ": cannot open: No such file or directory");
  }
  SECTION("a directory") {
    const std::string path = std::filesystem::temp_directory_path().string();
    const TokenFile read = read_token_file(path);
    CHECK_FALSE(read.ok());
    CHECK(read.error == path + ": cannot read: Is a directory");
  }
  SECTION("one byte too long") {
    const TempFile file(secret + std::string(protocol::kMaxTokenLength + 1 - secret.size(), 'x'));
    const TokenFile read = read_token_file(file.path());
    CHECK_FALSE(read.ok());
    CHECK(read.error == file.path() +
                            ": longer than 1024 bytes, the most a token may have (trailing "
                            "whitespace aside)");
    CHECK(read.token.empty());
  }
  SECTION("far too long, with a token-sized start and whitespace up to the read limit") {
    // Only the first 64 KiB are read: what follows must not be taken for trailing space.
    const TempFile file(secret + std::string(64 * 1024, ' ') + "more");
    const TokenFile read = read_token_file(file.path());
    CHECK_FALSE(read.ok());
    CHECK_THAT(read.error, Catch::StartsWith(file.path() + ": longer than 1024 bytes"));
  }
  SECTION("unreadable for want of permission") {
    if (::geteuid() == 0) return;  // root reads a mode-000 file anyway
    const TempFile file(secret, 0000);
    CHECK_THAT(read_token_file(file.path()).error,
               Catch::Equals(file.path() + ": cannot open: Permission denied"));
  }
}

TEST_CASE("a token file readable by group or others is read with a warning that names it") {
  const ::mode_t mode = GENERATE(::mode_t{0640}, ::mode_t{0604}, ::mode_t{0644});
  CAPTURE(mode);
  const TempFile file("s3cret\n", mode);
  const TokenFile read = read_token_file(file.path());
  REQUIRE(read.ok());
  CHECK(read.token == "s3cret");
  CHECK_THAT(read.warning, Catch::StartsWith(file.path() + " is readable by group or others"));
  CHECK_THAT(read.warning, Catch::Contains("chmod 600 " + file.path()));
  CHECK_THAT(read.warning, !Catch::Contains("s3cret"));
}

TEST_CASE("a token file writable but not readable by others draws no warning") {
  const TempFile file("s3cret", 0602);
  const TokenFile read = read_token_file(file.path());
  REQUIRE(read.ok());
  CHECK(read.warning.empty());
}

}  // namespace
}  // namespace sluice::auth
