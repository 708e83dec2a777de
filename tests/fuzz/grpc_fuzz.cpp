// libFuzzer target: the gRPC server's session (http/grpc_session.h) over arbitrary bytes from a
// client, as the server's connections use it: bytes fed whole or in pieces, output taken after
// each, calls handed to a handler that answers at once, fails them, holds them until the input
// ends, or drops them unanswered, and GOAWAY (the server stopping) half way when asked. Beyond
// "no crash, no leak, no undefined behaviour" (AddressSanitizer, UBSan), it checks:
//  - the server speaks first and its first frame is its SETTINGS;
//  - a call reaches the handler at most once per stream, on a client stream (odd id), with a
//    message within the limit; the session's call counter agrees with the handler;
//  - once receive() has failed nothing more is handed to the handler.
// Input: one config byte, then the client's bytes. Config: bits 0-1 how calls are answered (0 at
// once with the message reversed, 1 with a status, 2 held until the end, 3 dropped), bits 2-4 the
// piece size (0: whole; n: 2^(n-1) bytes), bit 5 GOAWAY after the first half.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "http/grpc_session.h"

namespace {

using namespace sluice::http;
using namespace sluice::http::detail;

void require(bool condition) {
  if (!condition) __builtin_trap();
}

constexpr std::size_t kMaxMessage = 1024;

// Answers go straight to the session, as a connection's strand would take them.
struct Target final : CallTarget {
  GrpcSession* session = nullptr;
  void deliver(std::int32_t stream, GrpcCode code, std::string text) override {
    session->respond(stream, code, std::move(text));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t config = data[0];
  const int mode = config & 0x03;
  const int piece_bits = (config >> 2) & 0x07;
  const bool go_away = (config & 0x20) != 0;
  const std::uint8_t* stream = data + 1;
  const std::size_t length = size - 1;

  GrpcLimits limits;
  limits.max_message_bytes = kMaxMessage;
  limits.max_streams = 8;
  limits.max_header_bytes = 2048;
  MethodTable methods;
  std::vector<GrpcCall> held;
  methods["/test.Echo/Say"] = [&](GrpcCall call) {
    switch (mode) {
      case 0:
        call.answer(std::string(call.message().rbegin(), call.message().rend()));
        break;
      case 1:
        call.fail(GrpcCode::kInvalidArgument, call.message());
        break;
      case 2:
        held.push_back(std::move(call));
        break;
      default:
        break;  // destroyed unanswered: INTERNAL
    }
  };
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> refused{0};
  auto target = std::make_shared<Target>();
  std::set<std::int32_t> seen;
  bool failed = false;
  {
    GrpcSession session(limits, methods, SessionCounters{calls, refused},
                        [&](const GrpcHandler& handler, std::int32_t id, std::string message,
                            std::chrono::steady_clock::time_point deadline) {
                          require(!failed);
                          require(id > 0 && id % 2 == 1);
                          require(seen.insert(id).second);
                          require(message.size() <= kMaxMessage);
                          handler(make_call(target, id, std::move(message), deadline));
                        });
    target->session = &session;

    std::vector<std::uint8_t> out;
    require(session.take_output(out));
    // The server's connection preface: a SETTINGS frame (type 4) on stream 0.
    require(out.size() >= 9 && out[3] == 0x04 && out[5] == 0 && out[6] == 0 && out[7] == 0 &&
            out[8] == 0);

    const std::size_t piece = piece_bits == 0 ? length : std::size_t{1} << (piece_bits - 1);
    bool gone_away = false;
    for (std::size_t at = 0; at < length && !failed; at += piece) {
      if (go_away && !gone_away && at >= length / 2) {
        session.go_away();
        gone_away = true;
      }
      const std::size_t n = std::min(piece, length - at);
      if (!session.receive(stream + at, n)) {
        failed = true;
        require(!session.error().empty());
      }
      out.clear();
      if (!session.take_output(out)) failed = true;
    }
    for (GrpcCall& call : held) call.answer("held");
    held.clear();
    out.clear();
    (void)session.take_output(out);
    require(calls.load() == seen.size());
    target->session = nullptr;
  }
  return 0;
}
