// libFuzzer target: sluice-load's RESP parser (tools/load/resp.h) over arbitrary bytes, used the
// way sluice-load uses it: replies parsed one after another from the front of a stream, the
// stream arriving whole or in pieces, the same parser reused after every outcome. Beyond "no
// crash, no read past the input" (AddressSanitizer), it checks the parser's contracts:
//  - a complete reply consumes at least 3 bytes and never more than the input; any other outcome
//    consumes nothing; views point into the consumed bytes, in order; unused fields are zero;
//  - parse() allocates nothing; kNeedMore never leaves more bytes waiting than one reply within
//    the limits can hold;
//  - a complete reply is within the limits, and its canonical encoding (shortest numbers) parses
//    back to itself and is the consumed bytes themselves when it is as long as they are;
//  - the stream gives the same replies and the same final outcome at the same offset whether it
//    arrives at once, in the fuzzer's pieces or (when short) a byte at a time: kMalformed and
//    kTooLarge stay so when more bytes arrive;
//  - tighter limits change an outcome only into kTooLarge, and never refuse a reply that is
//    within them.
#include <sanitizer/allocator_interface.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tools/load/resp.h"

namespace {

using namespace sluice::load;
using Limits = RespParser::Limits;

void require(bool condition) {
  if (!condition) __builtin_trap();
}

// Allocations made on this thread while `counting`, seen through the sanitizer's malloc hook.
thread_local bool counting = false;
thread_local std::size_t allocations = 0;

void count_malloc(const volatile void*, std::size_t) {
  if (counting) ++allocations;
}
void ignore_free(const volatile void*) {}

// parse(), which must not allocate: its table is sized once, at construction.
RespParseResult parse(RespParser& parser, std::string_view input) {
  allocations = 0;
  counting = true;
  const RespParseResult r = parser.parse(input);
  counting = false;
  require(allocations == 0);
  return r;
}

// The largest figures in a reply, as its canonical encoding has them: `line` covers simple
// strings, errors and the decimal lines (integers, lengths, counts).
struct Measure {
  std::size_t line = 0;
  std::size_t bulk = 0;
  std::uint64_t values = 0;  // array elements, all levels together
  int depth = 0;             // array nesting; a top-level array is 1

  bool operator==(const Measure&) const = default;
};

bool within(const Measure& m, const Limits& limits) {
  return m.line <= limits.max_line && m.bulk <= limits.max_bulk && m.values <= limits.max_values &&
         m.depth <= limits.max_depth;
}

// The most bytes kNeedMore can leave waiting: a reply has at most max_values + 1 values, each
// a type byte, a line and CRLF, plus bulk data and CRLF; the partial value is no longer. A parser
// that waited for more would let a peer make sluice-load buffer without bound.
std::uint64_t max_pending(const Limits& limits) {
  return (std::uint64_t{limits.max_values} + 1) * (limits.max_line + limits.max_bulk + 5);
}

struct Reply {
  std::size_t at = 0;  // offset in the stream
  std::size_t consumed = 0;
  std::string canonical;
  Measure measure;

  bool operator==(const Reply&) const = default;
};

// How a stream parses: its complete replies, then the outcome that stopped the parsing (kNeedMore
// at the end of a well-formed stream) and its offset.
struct Outcome {
  std::vector<Reply> replies;
  RespStatus end = RespStatus::kNeedMore;
  std::size_t end_at = 0;
};

// Walks one parsed reply: checks it against the parser's contracts and writes its canonical
// encoding and measure. `consumed` is exactly the bytes the reply consumed.
struct Walk {
  Walk(const RespParser& p, std::string_view consumed)
      : parser(p),
        cursor(reinterpret_cast<std::uintptr_t>(consumed.data())),
        end(cursor + consumed.size()) {}

  // A view lies in the consumed bytes, after the previous one.
  void text(std::string_view t) {
    if (t.empty()) return;
    const auto begin = reinterpret_cast<std::uintptr_t>(t.data());
    require(begin >= cursor && begin <= end && t.size() <= end - begin);
    cursor = begin + t.size();
  }

  void decimal(std::int64_t n) {
    char digits[24];
    const auto result = std::to_chars(digits, digits + sizeof digits, n);
    const std::string_view line(digits, static_cast<std::size_t>(result.ptr - digits));
    measure.line = std::max(measure.line, line.size());
    out.append(line);
    out.append("\r\n");
  }

  void value(const RespValue& v, int depth) {
    require(resp_type_name(v.type) != "unknown");
    if (v.type != RespType::kArray) require(parser.elements(v).empty());
    switch (v.type) {
      case RespType::kSimpleString:
      case RespType::kError:
        require(v.integer == 0 && v.size == 0 && v.first == 0);
        require(v.text.find_first_of("\r\n") == std::string_view::npos);
        text(v.text);
        measure.line = std::max(measure.line, v.text.size());
        out.push_back(v.type == RespType::kSimpleString ? '+' : '-');
        out.append(v.text);
        out.append("\r\n");
        break;
      case RespType::kInteger:
        require(v.text.empty() && v.size == 0 && v.first == 0);
        out.push_back(':');
        decimal(v.integer);
        break;
      case RespType::kBulkString:
        require(v.integer == 0 && v.size == 0 && v.first == 0);
        text(v.text);
        measure.bulk = std::max(measure.bulk, v.text.size());
        out.push_back('$');
        decimal(static_cast<std::int64_t>(v.text.size()));
        out.append(v.text);
        out.append("\r\n");
        break;
      case RespType::kNullBulk:
      case RespType::kNullArray:
        require(v.integer == 0 && v.text.empty() && v.size == 0 && v.first == 0);
        out.push_back(v.type == RespType::kNullBulk ? '$' : '*');
        decimal(-1);
        break;
      case RespType::kArray: {
        require(v.integer == 0 && v.text.empty());
        const std::span<const RespValue> elements = parser.elements(v);
        require(elements.size() == v.size);
        measure.values += v.size;
        measure.depth = std::max(measure.depth, depth + 1);
        out.push_back('*');
        decimal(v.size);
        for (const RespValue& element : elements) value(element, depth + 1);
        break;
      }
    }
  }

  const RespParser& parser;
  std::uintptr_t cursor;  // where the next view may start
  std::uintptr_t end;
  std::string out;  // the canonical encoding
  Measure measure;
};

// Checks a complete reply parsed from `input` (`at` is its offset in the stream) and returns it.
// Parses its canonical encoding again with the same parser, so `r`'s elements are gone after.
Reply check_complete(RespParser& parser, const Limits& limits, std::string_view input,
                     const RespParseResult& r, std::size_t at) {
  require(r.consumed >= 3 && r.consumed <= input.size());
  Reply reply;
  reply.at = at;
  reply.consumed = r.consumed;
  Walk walk(parser, input.substr(0, r.consumed));
  walk.value(r.value, 0);
  require(within(walk.measure, limits));
  // Only a number can be written longer than its canonical form (leading zeros, "-0").
  require(walk.out.size() <= r.consumed);
  if (walk.out.size() == r.consumed) require(input.substr(0, r.consumed) == walk.out);
  reply.canonical = std::move(walk.out);
  reply.measure = walk.measure;

  const RespParseResult again = parse(parser, reply.canonical);
  require(again.status == RespStatus::kComplete && again.consumed == reply.canonical.size());
  Walk rewalk(parser, reply.canonical);
  rewalk.value(again.value, 0);
  require(rewalk.out == reply.canonical && rewalk.measure == reply.measure);
  return reply;
}

// Parses replies from the front of `stream` until one is not complete.
Outcome parse_whole(RespParser& parser, const Limits& limits, std::string_view stream) {
  Outcome outcome;
  std::size_t at = 0;
  for (;;) {
    const RespParseResult r = parse(parser, stream.substr(at));
    if (r.status != RespStatus::kComplete) {
      require(r.consumed == 0);
      if (r.status == RespStatus::kNeedMore) require(stream.size() - at <= max_pending(limits));
      outcome.end = r.status;
      outcome.end_at = at;
      return outcome;
    }
    outcome.replies.push_back(check_complete(parser, limits, stream.substr(at), r, at));
    at += r.consumed;
  }
}

// Feeds `stream` as sluice-load's read loop does: after each arrival, replies are parsed from the
// first unconsumed byte until one is not complete; a partial reply is parsed again from its start
// after the next arrival; kMalformed or kTooLarge drops the connection. The unconsumed bytes are
// copied to a buffer of exactly their size, so that a read past them is caught. The pieces have
// the sizes in `sizes` (clamped to the stream), then the rest of the stream is the last one.
void check_pieces(RespParser& parser, const Limits& limits, std::string_view stream,
                  std::span<const std::size_t> sizes, const Outcome& whole) {
  std::size_t begin = 0;    // the first unconsumed byte
  std::size_t arrived = 0;  // bytes received so far
  std::size_t next = 0;     // the index of the next reply in `whole`
  for (std::size_t piece = 0; piece <= sizes.size(); ++piece) {
    const bool last = piece == sizes.size();
    arrived = last ? stream.size() : std::min(stream.size(), arrived + sizes[piece]);
    const std::size_t pending = arrived - begin;
    const std::unique_ptr<char[]> buffer(new char[pending]);
    std::memcpy(buffer.get(), stream.data() + begin, pending);
    const std::string_view view(buffer.get(), pending);
    std::size_t offset = 0;
    for (;;) {
      const RespParseResult r = parse(parser, view.substr(offset));
      if (r.status == RespStatus::kComplete) {
        const Reply reply = check_complete(parser, limits, view.substr(offset), r, begin + offset);
        require(next < whole.replies.size() && reply == whole.replies[next]);
        ++next;
        offset += r.consumed;
        continue;
      }
      require(r.consumed == 0);
      if (r.status == RespStatus::kNeedMore) require(pending - offset <= max_pending(limits));
      const bool final = last || r.status != RespStatus::kNeedMore;
      if (final) {
        require(r.status == whole.end && begin + offset == whole.end_at &&
                next == whole.replies.size());
      }
      if (r.status != RespStatus::kNeedMore) return;
      break;
    }
    begin += offset;
  }
}

// Limits `narrow` at most `wide` in every field: the narrow outcome is the wide one, or kTooLarge
// where the wide one goes on; and a refused reply must be over one of the narrow limits.
void check_limits(const Outcome& narrow, const Limits& narrow_limits, const Outcome& wide) {
  const std::size_t n = narrow.replies.size();
  require(n <= wide.replies.size());
  for (std::size_t i = 0; i < n; ++i) require(narrow.replies[i] == wide.replies[i]);
  if (n < wide.replies.size()) {
    const Reply& refused = wide.replies[n];
    require(narrow.end == RespStatus::kTooLarge && narrow.end_at == refused.at);
    // A reply in canonical form has exactly its measure's figures, so one within the limits
    // must not be refused.
    if (refused.canonical.size() == refused.consumed) {
      require(!within(refused.measure, narrow_limits));
    }
    return;
  }
  require(narrow.end_at == wide.end_at);
  require(narrow.end == wide.end || narrow.end == RespStatus::kTooLarge);
}

// Limits from two config bytes; 0 in a nibble keeps the default. Small values put every edge in
// reach of short inputs.
Limits limits_from(std::uint8_t a, std::uint8_t b) {
  Limits limits;
  if ((a & 0x0F) != 0) limits.max_line = 4u * (a & 0x0F);    // 4..60
  if ((a >> 4) != 0) limits.max_bulk = 4u * ((a >> 4) - 1);  // 0..56
  if ((b & 0x0F) != 0) limits.max_values = (b & 0x0F) - 1u;  // 0..14
  if ((b >> 4) != 0) limits.max_depth = (b >> 4) - 1;        // 0..14
  return limits;
}

// One parser per limit setting, kept across inputs, as each sluice-load worker thread keeps one
// for all its connections.
RespParser& parser_for(std::uint16_t config, const Limits& limits) {
  static std::map<std::uint16_t, std::unique_ptr<RespParser>> parsers;
  std::unique_ptr<RespParser>& parser = parsers[config];
  if (!parser) parser = std::make_unique<RespParser>(limits);
  return *parser;
}

constexpr std::size_t kBytewiseMax = 128;  // streams up to this size also arrive byte by byte

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  require(__sanitizer_install_malloc_and_free_hooks(count_malloc, ignore_free) != 0);
  return 0;
}

// Input layout: two config bytes (the limits, see limits_from), a byte whose low nibble k is the
// number of sized pieces, k bytes giving those pieces' sizes (0..255), then the stream.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const Limits limits = limits_from(data[0], data[1]);
  RespParser& parser = parser_for(static_cast<std::uint16_t>(data[0] << 8 | data[1]), limits);
  const std::size_t pieces = data[2] & 0x0F;
  if (size < 3 + pieces) return 0;
  std::vector<std::size_t> sizes(data + 3, data + 3 + pieces);
  const std::string_view stream(reinterpret_cast<const char*>(data) + 3 + pieces,
                                size - 3 - pieces);

  const Outcome whole = parse_whole(parser, limits, stream);
  check_pieces(parser, limits, stream, sizes, whole);
  if (stream.size() <= kBytewiseMax) {
    sizes.assign(stream.size(), 1);
    check_pieces(parser, limits, stream, sizes, whole);
  }

  // The defaults with a deeper nesting allowed: at least as wide as any config's limits.
  static const Limits wide_limits = [] {
    Limits wide;
    wide.max_depth = 16;
    return wide;
  }();
  static RespParser wide_parser(wide_limits);
  check_limits(whole, limits, parse_whole(wide_parser, wide_limits, stream));
  return 0;
}
