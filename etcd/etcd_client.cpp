#include "etcd/etcd_client.h"

// g++ 12 sees the frame of watch() freed by Asio's awaitable_frame_base::operator delete and
// allocated by its operator new, and warns that they do not match (they do: the two are a
// pair, sized alike); a false positive of its -Wmismatched-new-delete on coroutine frames.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "net/asio.h"  // before any other Asio header

#include "net/connect.h"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <nlohmann/json.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace sluice::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

namespace {

// The longest line a watch stream may send (one message of events); etcd's own requests are
// at most 1.5 MiB. A unary answer is bounded by Beast's default body limit, 8 MiB.
constexpr std::size_t kMaxWatchMessage = 16u << 20;

// The gateway writes int64 values as strings ("revision":"7") and leaves out fields that are 0.
std::int64_t int_field(const json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (!it->is_string()) return 0;
  const std::string& text = it->get_ref<const std::string&>();
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() ? value : 0;
}

bool bool_field(const json& object, const char* name) {
  const auto it = object.find(name);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

std::string bytes_field(const json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end() || !it->is_string()) return "";
  return base64_decode(it->get_ref<const std::string&>()).value_or("");
}

KeyValue key_value(const json& kv) {
  KeyValue out;
  out.key = bytes_field(kv, "key");
  out.value = bytes_field(kv, "value");
  out.create_revision = int_field(kv, "create_revision");
  out.mod_revision = int_field(kv, "mod_revision");
  out.version = int_field(kv, "version");
  out.lease = int_field(kv, "lease");
  return out;
}

std::int64_t header_revision(const json& answer) {
  const auto it = answer.find("header");
  return it != answer.end() && it->is_object() ? int_field(*it, "revision") : 0;
}

// The first key after every key that starts with `prefix` (etcd's range_end for a prefix):
// the prefix with its last byte below 0xff incremented and what follows dropped; "\0" (every
// key) when there is no such byte.
std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

// The message of an error answer ({"error": "...", "code": N} from etcd 3.4's gateway, or
// {"error": {"message": ...}}), or "" when `answer` is not one.
std::string error_of(const json& answer) {
  const auto it = answer.find("error");
  if (it == answer.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto message = it->find("message");
    if (message != it->end() && message->is_string()) return message->get<std::string>();
  }
  return it->dump();
}

// The gRPC code of an error answer: {"error": {"grpc_code": N, ...}} in a stream,
// {"error": "...", "code": N} in a unary answer; 0 when there is none.
std::int64_t grpc_code_of(const json& answer) {
  const auto it = answer.find("error");
  if (it != answer.end() && it->is_object()) return int_field(*it, "grpc_code");
  return int_field(answer, "code");
}

// Parses `text` as a JSON object (the gateway's answer), or says why it is not one.
Expected<json> parse_object(std::string_view text, std::string_view what) {
  json answer = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (answer.is_discarded() || !answer.is_object()) {
    return Unexpected{std::string(what) +
                      ": not a JSON object: " + std::string(text.substr(0, 200))};
  }
  if (std::string why = error_of(answer); !why.empty()) {
    return Unexpected{std::string(what) + ": " + why};
  }
  return answer;
}

WatchBatch watch_batch(const json& result) {
  WatchBatch batch;
  batch.revision = header_revision(result);
  batch.created = bool_field(result, "created");
  batch.canceled = bool_field(result, "canceled");
  batch.compact_revision = int_field(result, "compact_revision");
  const auto events = result.find("events");
  if (events != result.end() && events->is_array()) {
    for (const json& event : *events) {
      WatchEvent out;
      const auto type = event.find("type");
      out.type = type != event.end() && type->is_string() && type->get<std::string>() == "DELETE"
                     ? WatchEvent::Type::kDelete
                     : WatchEvent::Type::kPut;
      const auto kv = event.find("kv");
      if (kv != event.end() && kv->is_object()) out.kv = key_value(*kv);
      batch.events.push_back(std::move(out));
    }
  }
  return batch;
}

// POST `path` to `where` ("HOST:PORT") with a JSON `body`; `keep_alive` false asks the server
// to close once it has answered (a unary call), true keeps the stream (a watch).
http::request<http::string_body> json_post(std::string_view path, const std::string& where,
                                           std::string body, bool keep_alive) {
  http::request<http::string_body> request{http::verb::post, std::string(path), 11};
  request.set(http::field::host, where);
  request.set(http::field::content_type, "application/json");
  request.keep_alive(keep_alive);
  request.body() = std::move(body);
  request.prepare_payload();
  return request;
}

// Adds "WHERE: WHY" to the "; "-separated list of what each endpoint tried said.
void add_error(std::string& errors, const std::string& where, const std::string& why) {
  errors += (errors.empty() ? "" : "; ") + where + ": " + why;
}

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

bool member_specific(int http_status, std::int64_t grpc_code, std::string_view message) {
  if (http_status == 429 || http_status >= 500) return true;
  // gRPC codes: 4 DeadlineExceeded, 8 ResourceExhausted, 10 Aborted, 14 Unavailable.
  if (grpc_code == 4 || grpc_code == 8 || grpc_code == 10 || grpc_code == 14) return true;
  // The gateway's messages, for an answer that lost its codes on the way.
  for (const std::string_view word : {"learner", "leader changed", "no leader", "too many requests",
                                      "timed out", "not capable"}) {
    if (message.find(word) != std::string_view::npos) return true;
  }
  return false;
}

Expected<std::vector<Endpoint>> parse_endpoints(std::string_view urls) {
  std::vector<Endpoint> out;
  constexpr std::string_view kScheme = "http://";
  std::size_t at = 0;
  for (;;) {
    const std::size_t comma = urls.find(',', at);
    const std::string_view url =
        urls.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    const auto bad = [&](std::string_view why) {
      return Unexpected{"etcd endpoint '" + std::string(url) + "': " + std::string(why)};
    };
    if (!url.starts_with(kScheme)) return bad("expected http://HOST:PORT");
    std::string_view rest = url.substr(kScheme.size());
    if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    const std::size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return bad("expected http://HOST:PORT");
    if (rest.find('/') != std::string_view::npos) return bad("a path is not allowed");
    const std::string_view port_text = rest.substr(colon + 1);
    unsigned port = 0;
    const auto [end, error] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (error != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
      return bad("the port must be 1..65535");
    }
    out.push_back(Endpoint{std::string(rest.substr(0, colon)), static_cast<std::uint16_t>(port)});
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const auto n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16 |
                   static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8 |
                   static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  if (i < bytes.size()) {
    std::uint32_t n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) {
      n |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    }
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') return std::nullopt;  // "x=y=" is not padding
    std::uint32_t n = 0;
    for (int k = 0; k < 4 - pad; ++k) {
      const int v = sextet(text[i + static_cast<std::size_t>(k)]);
      if (v < 0) return std::nullopt;
      n |= static_cast<std::uint32_t>(v) << (18 - 6 * k);
    }
    out += static_cast<char>(n >> 16);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

struct Client::Connection {
  explicit Connection(asio::io_context& io) : stream(io) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  bool stopped = false;  // stop_watches() closed it
};

Client::Client(asio::io_context& io, Config config) : io_(io), config_(std::move(config)) {}

Client::~Client() { stop_watches(); }

asio::awaitable<std::string> Client::connect(Connection& connection, const Endpoint& endpoint) {
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  const auto found = co_await resolver.async_resolve(endpoint.host, std::to_string(endpoint.port),
                                                     net::redirect(ec));
  if (ec) co_return "resolve " + endpoint.host + ": " + ec.message();
  ec = co_await net::connect_from(connection.stream, connection.stream.socket(), found,
                                  config_.source_address);
  if (ec) co_return "connect: " + ec.message();
  if (config_.tcp_keepalive_idle.count() > 0) {
    // A member whose host died without a FIN: its connections break after idle + 3 probes.
    const int fd = connection.stream.socket().native_handle();
    const int on = 1;
    const int idle = static_cast<int>(config_.tcp_keepalive_idle.count());
    const int interval = 1;
    const int count = 3;
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  }
  co_return "";
}

std::string Client::where(std::size_t index) const {
  const Endpoint& endpoint = config_.endpoints[index];
  return endpoint.host + ":" + std::to_string(endpoint.port);
}

std::string Client::current_endpoint() const { return where(start_index()); }

std::string Client::watch_endpoint() const { return watched_ ? where(watch_index_) : ""; }

void Client::leave_watch_endpoint() {
  if (!watched_) return;
  preferred_ = (watch_index_ + 1) % config_.endpoints.size();
}

asio::awaitable<Expected<std::string>> Client::post(std::string_view path, std::string body) {
  const auto deadline = SteadyClock::now() + config_.timeout;
  const std::size_t count = config_.endpoints.size();
  const std::size_t first = start_index();
  std::string errors;
  for (std::size_t tried = 0; tried < count; ++tried) {
    const std::size_t index = (first + tried) % count;
    const std::string at = where(index);
    const auto now = SteadyClock::now();
    if (now >= deadline) break;
    // Each endpoint left gets an equal share of the time left, so one that does not answer
    // leaves the others time to.
    const auto share = (deadline - now) / static_cast<int>(count - tried);
    Connection connection(io_);
    connection.stream.expires_after(share);
    std::string why = co_await connect(connection, config_.endpoints[index]);
    if (why.empty()) {
      const auto request = json_post(path, at, body, /*keep_alive=*/false);
      boost::system::error_code ec;
      co_await http::async_write(connection.stream, request, net::redirect(ec));
      http::response<http::string_body> response;
      if (!ec)
        co_await http::async_read(connection.stream, connection.buffer, response,
                                  net::redirect(ec));
      if (ec) {
        why = ec == beast::error::timeout ? "no answer in time" : ec.message();
      } else {
        // The gateway's errors are JSON too: keep its message. A streamed answer (keepalive)
        // carries its error in a body with status 200.
        const bool ok = response.result() == http::status::ok;
        const bool error = !ok || response.body().find("\"error\"") != std::string::npos;
        const json answer = error ? json::parse(response.body(), nullptr, false) : json();
        const std::string message = answer.is_object() ? error_of(answer) : "";
        const std::int64_t code = answer.is_object() ? grpc_code_of(answer) : 0;
        if (ok && message.empty()) {
          preferred_ = index;
          co_return std::move(response.body());
        }
        why = "HTTP " + std::to_string(response.result_int()) +
              (message.empty() ? "" : ": " + message);
        if (!member_specific(response.result_int(), code, message)) {
          // The cluster's answer: another member would say the same.
          preferred_ = index;
          if (ok) co_return std::move(response.body());
          co_return Unexpected{std::string(path) + " at " + at + ": " + why};
        }
      }
    }
    add_error(errors, at, why);
  }
  if (errors.empty()) errors = "no endpoint tried before the deadline";
  co_return Unexpected{std::string(path) + ": " + errors};
}

asio::awaitable<Expected<Lease>> Client::grant(std::chrono::seconds ttl) {
  std::string body = json{{"TTL", ttl.count()}}.dump();
  const Expected<std::string> text = co_await post("/v3/lease/grant", std::move(body));
  if (!text) co_return Unexpected{text.error()};
  const Expected<json> answer = parse_object(*text, "lease grant");
  if (!answer) co_return Unexpected{answer.error()};
  Lease lease{int_field(*answer, "ID"), int_field(*answer, "TTL")};
  if (lease.id == 0) co_return Unexpected{"lease grant: no lease ID in " + *text};
  co_return lease;
}

asio::awaitable<Expected<std::int64_t>> Client::keepalive(std::int64_t lease) {
  std::string body = json{{"ID", std::to_string(lease)}}.dump();
  const Expected<std::string> text = co_await post("/v3/lease/keepalive", std::move(body));
  if (!text) co_return Unexpected{text.error()};
  // A stream of one message here: {"result": {...}} on a line of its own.
  const Expected<json> answer = parse_object(*text, "lease keepalive");
  if (!answer) {
    // etcd 3.4 answers a lease it does not have with an error, as it does an expired one.
    if (answer.error().find("lease not found") != std::string::npos) co_return std::int64_t{0};
    co_return Unexpected{answer.error()};
  }
  const auto result = answer->find("result");
  if (result == answer->end() || !result->is_object()) {
    co_return Unexpected{"lease keepalive: no result in " + *text};
  }
  co_return int_field(*result, "TTL");
}

asio::awaitable<Expected<Client::TimeToLive>> Client::time_to_live(std::int64_t lease) {
  std::string body = json{{"ID", std::to_string(lease)}}.dump();
  const Expected<std::string> text = co_await post("/v3/lease/timetolive", std::move(body));
  if (!text) co_return Unexpected{text.error()};
  const Expected<json> answer = parse_object(*text, "lease timetolive");
  if (!answer) co_return Unexpected{answer.error()};
  TimeToLive out;
  // An expired lease is answered with TTL -1; the field is absent when it is 0.
  out.ttl_s = answer->contains("TTL") ? int_field(*answer, "TTL") : 0;
  out.granted_s = int_field(*answer, "grantedTTL");
  co_return out;
}

asio::awaitable<Expected<bool>> Client::revoke(std::int64_t lease) {
  std::string body = json{{"ID", std::to_string(lease)}}.dump();
  const Expected<std::string> text = co_await post("/v3/lease/revoke", std::move(body));
  if (!text) co_return Unexpected{text.error()};
  const Expected<json> answer = parse_object(*text, "lease revoke");
  if (!answer) co_return Unexpected{answer.error()};
  co_return true;
}

asio::awaitable<Expected<std::int64_t>> Client::put(std::string_view key, std::string_view value,
                                                    std::int64_t lease) {
  json request{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) request["lease"] = std::to_string(lease);
  const Expected<std::string> text = co_await post("/v3/kv/put", request.dump());
  if (!text) co_return Unexpected{text.error()};
  const Expected<json> answer = parse_object(*text, "put");
  if (!answer) co_return Unexpected{answer.error()};
  co_return header_revision(*answer);
}

asio::awaitable<Expected<Client::PutIfAbsent>> Client::put_if_absent(std::string_view key,
                                                                     std::string_view value,
                                                                     std::int64_t lease) {
  json put{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  const json request{{"compare", json::array({json{{"key", base64_encode(key)},
                                                   {"target", "CREATE"},
                                                   {"result", "EQUAL"},
                                                   {"create_revision", "0"}}})},
                     {"success", json::array({json{{"request_put", put}}})}};
  const Expected<std::string> text = co_await post("/v3/kv/txn", request.dump());
  if (!text) co_return Unexpected{text.error()};
  const Expected<json> answer = parse_object(*text, "txn");
  if (!answer) co_return Unexpected{answer.error()};
  co_return PutIfAbsent{bool_field(*answer, "succeeded"), header_revision(*answer)};
}

asio::awaitable<Expected<RangeResult>> Client::range(std::string_view key, bool prefix) {
  json request{{"key", base64_encode(key)}};
  if (prefix) request["range_end"] = base64_encode(prefix_end(key));
  const Expected<std::string> text = co_await post("/v3/kv/range", request.dump());
  if (!text) co_return Unexpected{text.error()};
  const Expected<json> answer = parse_object(*text, "range");
  if (!answer) co_return Unexpected{answer.error()};
  RangeResult out;
  out.revision = header_revision(*answer);
  const auto kvs = answer->find("kvs");
  if (kvs != answer->end() && kvs->is_array()) {
    for (const json& kv : *kvs) out.kvs.push_back(key_value(kv));
  }
  co_return out;
}

asio::awaitable<Expected<std::int64_t>> Client::del(std::string_view key) {
  std::string body = json{{"key", base64_encode(key)}}.dump();
  const Expected<std::string> text = co_await post("/v3/kv/deleterange", std::move(body));
  if (!text) co_return Unexpected{text.error()};
  const Expected<json> answer = parse_object(*text, "delete");
  if (!answer) co_return Unexpected{answer.error()};
  co_return int_field(*answer, "deleted");
}

asio::awaitable<std::string> Client::watch(std::string_view prefix, std::int64_t start_revision,
                                           std::function<bool(const WatchBatch&)> on_batch) {
  json create{{"key", base64_encode(prefix)},
              {"range_end", base64_encode(prefix_end(prefix))},
              {"progress_notify", true}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  const std::string body = json{{"create_request", create}}.dump();
  std::string errors;
  const auto deadline = SteadyClock::now() + config_.timeout;
  const std::size_t count = config_.endpoints.size();
  const std::size_t first = start_index();
  for (std::size_t tried = 0; tried < count; ++tried) {
    const std::size_t index = (first + tried) % count;
    const Endpoint& endpoint = config_.endpoints[index];
    const std::string where = this->where(index);
    const auto now = SteadyClock::now();
    if (now >= deadline) break;
    auto connection = std::make_shared<Connection>(io_);
    watching_.push_back(connection);
    std::erase_if(watching_, [](const std::weak_ptr<Connection>& w) { return w.expired(); });
    // Until the watch is in place (its "created" message), the call's deadline holds, shared
    // among the endpoints left as post() shares it.
    connection->stream.expires_after((deadline - now) / static_cast<int>(count - tried));
    std::string why = co_await connect(*connection, endpoint);
    if (connection->stopped) co_return "stopped";
    if (!why.empty()) {
      add_error(errors, where, why);
      continue;
    }
    auto request = json_post("/v3/watch", where, body, /*keep_alive=*/true);
    // The gateway hands Grpc-Metadata-* headers to etcd as metadata: "hasleader" makes the
    // member end the watch when it has no leader, rather than keep a stream nothing feeds.
    request.set("Grpc-Metadata-Hasleader", "true");
    boost::system::error_code ec;
    co_await http::async_write(connection->stream, request, net::redirect(ec));
    // The answer is one chunked response, a JSON message per line, for as long as the watch
    // lasts: each chunk's bytes are collected and every whole line is handed on.
    std::string pending;
    auto on_chunk = [&pending](std::uint64_t, beast::string_view data, beast::error_code&) {
      pending.append(data.data(), data.size());
      return data.size();
    };
    http::response_parser<http::empty_body> parser;
    parser.body_limit(boost::none);
    parser.on_chunk_body(on_chunk);
    if (!ec)
      co_await http::async_read_header(connection->stream, connection->buffer, parser,
                                       net::redirect(ec));
    if (connection->stopped) co_return "stopped";
    if (ec || parser.get().result() != http::status::ok) {
      why = ec ? ec.message() : "HTTP " + std::to_string(parser.get().result_int());
      add_error(errors, where, why);
      continue;
    }
    bool created = false;
    while (!parser.is_done()) {
      co_await http::async_read_some(connection->stream, connection->buffer, parser,
                                     net::redirect(ec));
      if (connection->stopped) co_return "stopped";
      if (ec) {
        co_return "watch at " + where + ": " +
            (ec == beast::error::timeout ? std::string("not created in time") : ec.message());
      }
      if (pending.size() > kMaxWatchMessage) {
        co_return "watch at " + where + ": a message over " + std::to_string(kMaxWatchMessage) +
            " bytes";
      }
      for (std::size_t end = pending.find('\n'); end != std::string::npos;
           end = pending.find('\n')) {
        const std::string line = pending.substr(0, end);
        pending.erase(0, end + 1);
        if (line.empty()) continue;
        const Expected<json> answer = parse_object(line, "watch");
        if (!answer) co_return answer.error();
        const auto result = answer->find("result");
        if (result == answer->end() || !result->is_object()) {
          co_return "watch: no result in " + line.substr(0, 200);
        }
        const WatchBatch batch = watch_batch(*result);
        if (!created && batch.created) {
          created = true;
          watch_index_ = index;
          watched_ = true;
          connection->stream.expires_never();
        }
        if (!on_batch(batch)) {
          connection->stopped = true;
          beast::error_code ignored;
          connection->stream.socket().close(ignored);
          co_return "";
        }
        if (batch.canceled) {
          co_return "watch canceled by etcd" +
              (batch.compact_revision > 0
                   ? ": revision " + std::to_string(start_revision) + " is compacted (now " +
                         std::to_string(batch.compact_revision) + ")"
                   : std::string());
        }
      }
    }
    co_return "watch at " + where + ": the stream ended";
  }
  co_return "watch: " + (errors.empty() ? std::string("no endpoint") : errors);
}

void Client::stop_watches() {
  for (const std::weak_ptr<Connection>& weak : watching_) {
    if (const auto connection = weak.lock()) {
      connection->stopped = true;
      beast::error_code ignored;
      connection->stream.socket().close(ignored);
    }
  }
  watching_.clear();
}

}  // namespace sluice::etcd
