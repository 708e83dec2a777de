// The attributes of the request a proxy asks about (GET /check), read from the headers the proxy
// forwards (docs/GATEWAY.md, "GET /check"), as views into the check request: it must outlive
// them.
#pragma once

#include <string_view>

#include "http/server.h"
#include "rules/request.h"

namespace sluice::gateway {

// method: X-Original-Method, X-Forwarded-Method, else the request's own; path: X-Original-URI,
// X-Forwarded-Uri, else the request's own target (rules ignore the query); client IP:
// X-Real-IP, else the first address of X-Forwarded-For, else `peer`; headers: every header of
// the request.
rules::RequestAttributes check_attributes(const http::Request& request, std::string_view peer);

// The first entry of an X-Forwarded-For value ("a, b, c" -> "a"), spaces and tabs trimmed.
std::string_view first_forwarded(std::string_view value);

}  // namespace sluice::gateway
