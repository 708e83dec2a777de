#include "server/http_endpoint.h"

#include <prometheus/text_serializer.h>
#include <pthread.h>

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <stdexcept>

#include "net/host_port.h"
#include "server/server.h"

namespace sluice::server {

namespace {

// Few scrapers and probes: small limits. A request to these paths has no body.
http::ServerLimits endpoint_limits() {
  http::ServerLimits limits;
  limits.max_header_bytes = 8 * 1024;
  limits.max_body_bytes = 4 * 1024;
  limits.max_connections = 64;
  limits.idle_timeout = std::chrono::seconds(60);
  limits.read_timeout = std::chrono::seconds(10);
  return limits;
}

}  // namespace

HttpEndpoint::HttpEndpoint(const Server& server)
    : server_(server),
      http_(io_, endpoint_limits(),
            [this](const http::Request& request, http::Responder responder) {
              handle(request, std::move(responder));
            }),
      metrics_(server, &http_) {}

HttpEndpoint::~HttpEndpoint() {
  stop();
  join();
}

void HttpEndpoint::start(const std::string& listen) {
  const auto address = net::parse_listen_address(listen);
  if (!address) {
    throw std::invalid_argument("--http-listen " + listen +
                                ": expected HOST:PORT, e.g. 127.0.0.1:9420 or [::1]:9420");
  }
  http_.start(address->host, address->port);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "sluiced-http");
    io_.run();
  });
}

void HttpEndpoint::join() {
  if (thread_.joinable()) thread_.join();
}

void HttpEndpoint::handle(const http::Request& request, http::Responder responder) const {
  namespace beast_http = boost::beast::http;
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics" && path != "/healthz" && path != "/readyz") {
    return responder.send(http::text_response(http::Status::not_found,
                                              "not found: try /metrics, /healthz or /readyz\n"));
  }
  if (request.method() != beast_http::verb::get) {
    http::Response response =
        http::text_response(http::Status::method_not_allowed, "only GET is served here\n");
    response.set(beast_http::field::allow, "GET");
    return responder.send(std::move(response));
  }
  if (path == "/healthz") return responder.send(http::text_response(http::Status::ok, "ok\n"));
  if (path == "/readyz") {
    const std::string why = server_.cluster_status().not_ready_reason();
    if (why.empty()) return responder.send(http::text_response(http::Status::ok, "ready\n"));
    return responder.send(http::text_response(http::Status::service_unavailable, why + "\n"));
  }
  http::Response response(http::Status::ok, 11);
  response.set(beast_http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  response.body() = prometheus::TextSerializer().Serialize(metrics_.Collect());
  responder.send(std::move(response));
}

}  // namespace sluice::server
