// The attributes of the request a proxy asks about (GET /check), read from the headers the
// proxy sets (docs/GATEWAY.md, "GET /check"), and the path as the rules match it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "http/server.h"
#include "rules/request.h"

namespace sluice::gateway {

// Which proxy asks, so which headers carry the original request. Only the proxy's own headers
// are read: the client can send any header, and a proxy passes most of them through, so a
// header the proxy does not overwrite must never decide the method, path or address.
enum class ForwardedBy : std::uint8_t {
  // nginx with examples/nginx/sluice.conf: X-Original-Method, X-Original-URI, X-Real-IP (set by
  // proxy_set_header, replacing whatever the client sent).
  kNginx,
  // Traefik's ForwardAuth and Caddy's forward_auth: X-Forwarded-Method, X-Forwarded-Uri, and
  // the last address of X-Forwarded-For (the one the proxy appended; those before it are the
  // client's to write).
  kForwarded,
};

// "nginx", "forwarded"; and back (nullopt for anything else).
std::string_view forwarded_by_name(ForwardedBy by);
std::optional<ForwardedBy> parse_forwarded_by(std::string_view name);

// The attributes of a check request, as views into it (it must outlive them): method, path and
// client IP from the headers of `by` (each absent: the check request's own method and target,
// and `peer`), and every header of the request. `path` is not normalized here.
rules::RequestAttributes check_attributes(const http::Request& request, std::string_view peer,
                                          ForwardedBy by);

// The last entry of an X-Forwarded-For value ("a, b, c" -> "c"), spaces and tabs trimmed.
std::string_view last_forwarded(std::string_view value);

// The path of a request target as the rules match it, the way a server resolves it: the query
// (from '?') and fragment (from '#') dropped, percent-escapes of unreserved characters
// (ALPHA, DIGIT, '-', '.', '_', '~') decoded, runs of '/' merged, and "." and ".." segments
// removed (RFC 3986 5.2.4), so that "/%6Cogin", "//login" and "/a/../login" all match
// "/login". Other escapes stay as they are (an encoded '/' is not a separator). The result
// starts with '/'.
std::string normalize_path(std::string_view target);

}  // namespace sluice::gateway
