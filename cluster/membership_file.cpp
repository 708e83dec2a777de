#include "cluster/membership_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "cluster/ring.h"

namespace sluice::cluster {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// The fields of one line, its comment and a final CR left out.
std::vector<std::string_view> fields_of(std::string_view line) {
  if (line.ends_with('\r')) line.remove_suffix(1);
  if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
    line = line.substr(0, hash);
  }
  std::vector<std::string_view> fields;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_blank(line[i])) ++i;
    const std::size_t start = i;
    while (i < line.size() && !is_blank(line[i])) ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

class Parser {
 public:
  explicit Parser(std::string_view file_name) : file_name_(file_name) {}

  // False once there are too many errors to go on.
  bool parse_line(std::string_view line, std::size_t number) {
    const std::vector<std::string_view> fields = fields_of(line);
    if (fields.empty()) return true;
    // `epoch N`: a number never contains the ':' that every address has, so this line cannot be
    // a node named "epoch".
    if (fields[0] == "epoch" &&
        (fields.size() != 2 || fields[1].find(':') == std::string_view::npos)) {
      return parse_epoch(fields, number);
    }
    ++node_lines_;
    if (node_lines_ > kMaxRingNodes) {
      error(number, fmt::format("more than {} nodes", kMaxRingNodes));
      return false;
    }
    if (fields.size() == 1) {
      const bool address = fields[0].find(':') != std::string_view::npos;
      return error(number, address ? fmt::format("missing node id before the address {}",
                                                 quote_for_message(fields[0]))
                                   : fmt::format("node {} has no address: expected ID HOST:PORT",
                                                 quote_for_message(fields[0])));
    }
    if (fields.size() > 2) {
      return error(number, fmt::format("unexpected {} after the address: expected ID HOST:PORT",
                                       quote_for_message(fields[2])));
    }
    bool ok = true;
    if (std::string why = check_node_id(fields[0]); !why.empty()) {
      if (!error(number, why)) return false;
      ok = false;
    }
    Expected<NodeAddress> address = parse_node_address(fields[1]);
    if (!address) {
      if (!error(number, address.error())) return false;
      ok = false;
    }
    if (!ok) return true;
    StaticMember member{std::string(fields[0]), std::move(address).value(), number};
    if (const auto [it, fresh] = line_of_id_.emplace(member.id, number); !fresh) {
      return error(number, fmt::format("node id {} is already on line {}",
                                       quote_for_message(member.id), it->second));
    }
    if (const auto [it, fresh] =
            member_of_address_.emplace(member.address.identity(), members_.size());
        !fresh) {
      const StaticMember& first = members_[it->second];
      return error(number,
                   fmt::format("address {} is already that of node {} on line {}",
                               member.address.text(), quote_for_message(first.id), first.line));
    }
    members_.push_back(std::move(member));
    return true;
  }

  Expected<StaticCluster, MembershipErrors> finish(std::size_t last_line) {
    if (node_lines_ == 0) error(last_line, "no nodes: expected a line ID HOST:PORT per node");
    if (!errors_.empty()) return Unexpected{std::move(errors_)};
    return StaticCluster{epoch_, std::move(members_)};
  }

 private:
  bool parse_epoch(const std::vector<std::string_view>& fields, std::size_t number) {
    if (epoch_line_ != 0) {
      return error(number, fmt::format("a second epoch line (the first is line {})", epoch_line_));
    }
    epoch_line_ = number;
    std::uint64_t value = 0;
    const bool digits = fields.size() == 2 && !fields[1].empty() && fields[1].size() <= 19 &&
                        fields[1].find_first_not_of("0123456789") == std::string_view::npos;
    if (digits) {
      for (const char c : fields[1]) value = value * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (!digits || value == 0) {
      return error(number, "expected `epoch N` with N a whole number from 1 to 999999999999999999");
    }
    epoch_ = value;
    return true;
  }

  // Records an error at `line`; false when that was one too many.
  bool error(std::size_t line, std::string_view message) {
    if (errors_.size() == kMaxMembershipErrors) {
      errors_.push_back(fmt::format("{}:{}: too many errors, stopping", file_name_, line));
      return false;
    }
    errors_.push_back(fmt::format("{}:{}: {}", file_name_, line, message));
    return true;
  }

  std::string_view file_name_;
  std::uint64_t epoch_ = 1;
  std::size_t epoch_line_ = 0;  // where the epoch line is, 0 when there is none
  std::size_t node_lines_ = 0;  // lines with fields, valid or not
  std::vector<StaticMember> members_;
  std::unordered_map<std::string, std::size_t> line_of_id_;
  std::unordered_map<std::string, std::size_t> member_of_address_;  // identity -> members_ index
  MembershipErrors errors_;
};

}  // namespace

Expected<StaticCluster, MembershipErrors> parse_membership_file(std::string_view text,
                                                                std::string_view file_name) {
  Parser parser(file_name);
  std::size_t number = 1;
  while (true) {
    const std::size_t newline = text.find('\n');
    if (!parser.parse_line(text.substr(0, newline), number)) break;
    if (newline == std::string_view::npos) break;
    text.remove_prefix(newline + 1);
    if (text.empty()) break;  // the final LF ends the last line; it does not start another
    ++number;
  }
  return parser.finish(number);
}

Expected<StaticCluster, MembershipErrors> read_membership_file(const std::string& path) {
  const auto fail = [&](std::string_view why) {
    return Unexpected{MembershipErrors{fmt::format("{}: {}", path, why)}};
  };
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                             &std::fclose);
  if (!file) return fail(fmt::format("cannot open: {}", std::strerror(errno)));
  std::string text(kMaxMembershipFileBytes + 1, '\0');
  const std::size_t got = std::fread(text.data(), 1, text.size(), file.get());
  if (std::ferror(file.get())) return fail(fmt::format("cannot read: {}", std::strerror(errno)));
  if (got > kMaxMembershipFileBytes) {
    return fail(fmt::format("larger than {} bytes", kMaxMembershipFileBytes));
  }
  text.resize(got);
  return parse_membership_file(text, path);
}

}  // namespace sluice::cluster
