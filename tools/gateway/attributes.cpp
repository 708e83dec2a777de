#include "tools/gateway/attributes.h"

#include <vector>

namespace sluice::gateway {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool unreserved(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

}  // namespace

std::string_view forwarded_by_name(ForwardedBy by) {
  return by == ForwardedBy::kNginx ? "nginx" : "forwarded";
}

std::optional<ForwardedBy> parse_forwarded_by(std::string_view name) {
  if (name == "nginx") return ForwardedBy::kNginx;
  if (name == "forwarded") return ForwardedBy::kForwarded;
  return std::nullopt;
}

std::string_view last_forwarded(std::string_view value) {
  const std::size_t comma = value.rfind(',');
  return trim(comma == std::string_view::npos ? value : value.substr(comma + 1));
}

rules::RequestAttributes check_attributes(const http::Request& request, std::string_view peer,
                                          ForwardedBy by) {
  rules::RequestAttributes out;
  out.headers.reserve(16);
  for (const auto& field : request) {
    out.headers.emplace_back(http::as_view(field.name_string()), http::as_view(field.value()));
  }
  const bool nginx = by == ForwardedBy::kNginx;
  const auto present = [&](std::string_view name) -> std::optional<std::string_view> {
    auto value = out.header(name);
    if (value && !trim(*value).empty()) return trim(*value);
    return std::nullopt;
  };
  out.method = present(nginx ? "X-Original-Method" : "X-Forwarded-Method")
                   .value_or(http::as_view(request.method_string()));
  out.path = present(nginx ? "X-Original-URI" : "X-Forwarded-Uri")
                 .value_or(http::as_view(request.target()));
  out.client_ip = peer;
  if (nginx) {
    if (auto real = present("X-Real-IP")) out.client_ip = *real;
  } else if (auto forwarded = present("X-Forwarded-For")) {
    if (!last_forwarded(*forwarded).empty()) out.client_ip = last_forwarded(*forwarded);
  }
  return out;
}

std::string normalize_path(std::string_view target) {
  const std::size_t end = target.find_first_of("?#");
  if (end != std::string_view::npos) target = target.substr(0, end);
  // Unreserved escapes decoded; every other byte kept.
  std::string decoded;
  decoded.reserve(target.size() + 1);
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] == '%' && i + 2 < target.size()) {
      const int high = hex_value(target[i + 1]);
      const int low = hex_value(target[i + 2]);
      if (high >= 0 && low >= 0) {
        const char c = static_cast<char>(high * 16 + low);
        if (unreserved(c)) {
          decoded.push_back(c);
          i += 2;
          continue;
        }
      }
    }
    decoded.push_back(target[i]);
  }
  // Segments: empty ones (runs of '/') and "." dropped, ".." removes the one before.
  std::vector<std::string_view> segments;
  const std::string_view path = decoded;
  std::size_t at = 0;
  while (at <= path.size()) {
    const std::size_t slash = path.find('/', at);
    const std::string_view segment =
        path.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at);
    if (segment == "..") {
      if (!segments.empty()) segments.pop_back();
    } else if (!segment.empty() && segment != ".") {
      segments.push_back(segment);
    }
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
  // A trailing '/' (or "/." and "/..") keeps the path a directory: "/a/" stays "/a/".
  const bool directory = !path.empty() && (path.back() == '/' || path.ends_with("/.") ||
                                           path.ends_with("/..") || path == "." || path == "..");
  std::string out;
  out.reserve(path.size() + 1);
  for (const std::string_view segment : segments) {
    out.push_back('/');
    out.append(segment);
  }
  if (out.empty() || directory) out.push_back('/');
  return out;
}

}  // namespace sluice::gateway
