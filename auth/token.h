// The shared secret that admits clients to sluiced (and, with the cluster, its nodes to each
// other): reading the token file that every binary's --auth-token-file names (cli/flags.h turns
// it into the flag), and comparing a presented token with the expected one in constant time.
//
// Why a folder of its own: sluiced and the tools both read the file and the server compares,
// but server/ and client/ are siblings (neither may serve the other), and core/ and protocol/
// do no I/O. auth/ needs protocol/ for kMaxTokenLength and is needed by server/ and tools/, so
// dependencies keep pointing one way: core <- protocol <- auth <- server, tools. The client
// library only sends the token it is given and does not link it.
#pragma once

#include <string>
#include <string_view>

namespace sluice::auth {

// What read_token_file() found. Messages name the file, never any of its content.
struct TokenFile {
  std::string token;    // when ok(): 1..protocol::kMaxTokenLength bytes
  std::string error;    // empty when ok(), else "PATH: why"
  std::string warning;  // may be set when ok(): "PATH is readable by group or others ..."
  bool ok() const { return error.empty(); }
};

// The whole file with its trailing whitespace (space, tab, CR, LF, VT, FF) stripped, so that
// `echo secret > FILE` works; leading and inner bytes are kept as they are. Fails when the file
// cannot be opened or read, or when what is left is empty or longer than kMaxTokenLength.
// Warns when the file's mode lets group or others read it. Pipes work too (`<(vault read ..)`).
TokenFile read_token_file(const std::string& path);

// True when `presented` equals `expected`, in a time that depends on expected.size() only: every
// byte of `expected` is compared whatever `presented` holds, and a difference in length is
// folded into the result instead of ending the comparison early.
bool token_matches(std::string_view expected, std::string_view presented);

}  // namespace sluice::auth
