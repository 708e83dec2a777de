#include "tools/gateway/attributes.h"

#include <optional>

namespace sluice::gateway {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

std::string_view view(boost::beast::string_view text) { return {text.data(), text.size()}; }

}  // namespace

std::string_view first_forwarded(std::string_view value) {
  return trim(value.substr(0, value.find(',')));
}

rules::RequestAttributes check_attributes(const http::Request& request, std::string_view peer) {
  rules::RequestAttributes out;
  out.headers.reserve(16);
  for (const auto& field : request) {
    out.headers.emplace_back(view(field.name_string()), view(field.value()));
  }
  const auto first_of = [&](std::string_view a,
                            std::string_view b) -> std::optional<std::string_view> {
    if (auto value = out.header(a); value && !value->empty()) return value;
    if (auto value = out.header(b); value && !value->empty()) return value;
    return std::nullopt;
  };
  out.method =
      first_of("X-Original-Method", "X-Forwarded-Method").value_or(view(request.method_string()));
  out.path = first_of("X-Original-URI", "X-Forwarded-Uri").value_or(view(request.target()));
  if (auto real = out.header("X-Real-IP"); real && !trim(*real).empty()) {
    out.client_ip = trim(*real);
  } else if (auto forwarded = out.header("X-Forwarded-For");
             forwarded && !first_forwarded(*forwarded).empty()) {
    out.client_ip = first_forwarded(*forwarded);
  } else {
    out.client_ip = peer;
  }
  return out;
}

}  // namespace sluice::gateway
