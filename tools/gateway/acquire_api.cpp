#include "tools/gateway/acquire_api.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "core/verdict.h"

namespace sluice::gateway {
namespace {

using nlohmann::json;

Expected<std::string> string_field(const json& object, const char* name, std::string_view path) {
  const json& value = object.at(name);
  if (!value.is_string()) {
    return Unexpected{std::string(path) + name + ": expected a string"};
  }
  return value.get<std::string>();
}

// Keys and header values come from clients: bytes that are not UTF-8 are replaced, never thrown.
std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The wait in a JSON number; never (kNever) is null.
json wait_ms(std::uint64_t ms) { return ms == kNever ? json(nullptr) : json(ms); }

}  // namespace

rules::RequestAttributes AcquireCall::attributes() const {
  rules::RequestAttributes out;
  out.method = method;
  out.path = path;
  out.client_ip = client_ip;
  out.headers.reserve(headers.size());
  for (const auto& [name, value] : headers) out.headers.emplace_back(name, value);
  return out;
}

Expected<AcquireCall> parse_acquire_call(std::string_view body) {
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Unexpected{std::string("the body is not JSON")};
  if (!doc.is_object()) return Unexpected{std::string("the body must be a JSON object")};
  AcquireCall call;
  bool has_policy = false;
  bool has_key = false;
  bool has_attributes = false;
  for (const auto& [name, value] : doc.items()) {
    if (name == "policy" || name == "key") {
      auto text = string_field(doc, name.c_str(), "");
      if (!text) return Unexpected{text.error()};
      if (text->empty()) return Unexpected{name + ": must not be empty"};
      (name == "policy" ? call.policy : call.key) = std::move(*text);
      (name == "policy" ? has_policy : has_key) = true;
    } else if (name == "cost") {
      if (!value.is_number_unsigned() || value.get<std::uint64_t>() == 0 ||
          value.get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max()) {
        return Unexpected{std::string("cost: expected an integer 1..4294967295")};
      }
      call.cost = static_cast<std::uint32_t>(value.get<std::uint64_t>());
    } else if (name == "peek") {
      if (!value.is_boolean()) return Unexpected{std::string("peek: expected true or false")};
      call.peek = value.get<bool>();
    } else if (name == "attributes") {
      if (!value.is_object()) return Unexpected{std::string("attributes: expected an object")};
      has_attributes = true;
      for (const auto& [field, item] : value.items()) {
        if (field == "method" || field == "path" || field == "client_ip") {
          auto text = string_field(value, field.c_str(), "attributes.");
          if (!text) return Unexpected{text.error()};
          (field == "method" ? call.method
           : field == "path" ? call.path
                             : call.client_ip) = std::move(*text);
        } else if (field == "headers") {
          if (!item.is_object()) {
            return Unexpected{std::string("attributes.headers: expected an object of strings")};
          }
          for (const auto& [header, text] : item.items()) {
            if (!text.is_string()) {
              return Unexpected{"attributes.headers." + header + ": expected a string"};
            }
            call.headers.emplace_back(header, text.get<std::string>());
          }
        } else {
          return Unexpected{"attributes." + field +
                            ": unknown field (method, path, client_ip, headers)"};
        }
      }
    } else {
      return Unexpected{name + ": unknown field (policy, key, attributes, cost, peek)"};
    }
  }
  if (has_attributes && (has_policy || has_key)) {
    return Unexpected{std::string("give either policy and key, or attributes, not both")};
  }
  if (!has_attributes && !(has_policy && has_key)) {
    return Unexpected{std::string(has_policy ? "key: missing (policy needs a key)"
                                  : has_key  ? "policy: missing (key needs a policy)"
                                             : "give policy and key, or attributes")};
  }
  return call;
}

std::string acquire_answer_json(const Answer& answer, std::span<const LimitReport> limits) {
  json out = json::object();
  out["allowed"] = answer.allowed;
  out["status"] = answer.status;
  json list = json::array();
  for (const LimitReport& limit : limits) {
    json item = json::object();
    item["policy"] = limit.policy;
    item["key"] = limit.key;
    item["shadow"] = limit.shadow;
    if (limit.decision) {
      const client::Decision& d = *limit.decision;
      item["allowed"] = d.allowed;
      item["limit"] = d.limit;
      item["remaining"] = d.remaining;
      item["reset_after_ms"] = wait_ms(d.reset_after_ms);
      item["retry_after_ms"] = wait_ms(d.retry_after_ms);
      item["source"] = client::source_name(d.source);
    } else {
      item["error"] = limit.error;
    }
    list.push_back(std::move(item));
  }
  out["limits"] = std::move(list);
  json headers = json::object();
  for (const client::HeaderField& field : answer.headers)
    headers[std::string(field.name)] = field.value;
  out["headers"] = std::move(headers);
  return dump(out);
}

std::string error_json(std::string_view message) {
  json out = json::object();
  out["error"] = message;
  return dump(out);
}

}  // namespace sluice::gateway
