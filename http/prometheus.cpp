#include "http/prometheus.h"

#include <string>

namespace sluice::http {

prometheus::MetricFamily metric_family(std::string_view name, prometheus::MetricType type,
                                       std::string_view help) {
  prometheus::MetricFamily f;
  f.name = std::string(name);
  f.help = std::string(help);
  f.type = type;
  return f;
}

prometheus::ClientMetric metric_sample(prometheus::MetricType type, double value,
                                       std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return m;
}

void append_one(std::vector<prometheus::MetricFamily>& out, std::string_view name,
                prometheus::MetricType type, std::string_view help, double value) {
  out.push_back(metric_family(name, type, help));
  out.back().metric.push_back(metric_sample(type, value));
}

namespace {

// One family <prefix>_<name> of one unlabelled sample.
void append_scalar(std::vector<prometheus::MetricFamily>& out, std::string_view prefix,
                   std::string_view name, prometheus::MetricType type, std::string_view help,
                   std::uint64_t value) {
  append_one(out, std::string(prefix) + "_" + std::string(name), type, help,
             static_cast<double>(value));
}

}  // namespace

void append_metric_families(const ServerCounters& c, std::string_view prefix,
                            std::vector<prometheus::MetricFamily>& out) {
  using prometheus::MetricType;
  append_scalar(out, prefix, "requests_total", MetricType::Counter,
                "HTTP requests read whole and passed to the handler", c.requests);
  append_scalar(
      out, prefix, "bad_requests_total", MetricType::Counter,
      "HTTP requests refused with 400 (malformed), 413 (body too large) or 431 (headers too "
      "large); each closed its connection",
      c.bad_requests);
  append_scalar(out, prefix, "connections_total", MetricType::Counter,
                "HTTP connections accepted and served", c.connections_total);
  append_scalar(out, prefix, "connections_open", MetricType::Gauge, "HTTP connections open now",
                c.connections_open);
  append_scalar(out, prefix, "connections_refused_total", MetricType::Counter,
                "HTTP connections closed at accept because max_connections were open",
                c.connections_refused);
  out.push_back(metric_family(std::string(prefix) + "_timeouts_total", MetricType::Counter,
                              "HTTP connections closed by a timeout: idle between requests, or "
                              "too slow to send a request or take a response (read)"));
  out.back().metric.push_back(
      metric_sample(MetricType::Counter, static_cast<double>(c.idle_timeouts), {{"kind", "idle"}}));
  out.back().metric.push_back(
      metric_sample(MetricType::Counter, static_cast<double>(c.read_timeouts), {{"kind", "read"}}));
}

void append_grpc_metric_families(const GrpcCounters& c, std::string_view prefix,
                                 std::vector<prometheus::MetricFamily>& out) {
  using prometheus::MetricType;
  append_scalar(out, prefix, "calls_total", MetricType::Counter,
                "gRPC calls read whole and passed to their method's handler", c.calls);
  append_scalar(
      out, prefix, "refused_calls_total", MetricType::Counter,
      "gRPC calls the server answered itself: a :method other than POST (HTTP 405), a "
      "content-type that is not gRPC (415), a method it does not serve, a compressed or malformed "
      "message, one over the message limit, a malformed grpc-timeout",
      c.refused_calls);
  append_scalar(out, prefix, "connections_total", MetricType::Counter,
                "gRPC connections accepted and served", c.connections_total);
  append_scalar(out, prefix, "connections_open", MetricType::Gauge, "gRPC connections open now",
                c.connections_open);
  append_scalar(out, prefix, "connections_refused_total", MetricType::Counter,
                "gRPC connections closed at accept because max_connections were open",
                c.connections_refused);
  append_scalar(
      out, prefix, "protocol_errors_total", MetricType::Counter,
      "gRPC connections ended with GOAWAY for bytes that are not HTTP/2 or break its rules",
      c.protocol_errors);
  append_scalar(
      out, prefix, "idle_timeouts_total", MetricType::Counter,
      "gRPC connections closed after the idle timeout with no call open, or with answers unread",
      c.idle_timeouts);
}

}  // namespace sluice::http
