#include "cli/json_writer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>

namespace sluice::cli {
namespace {

TEST_CASE("objects and arrays get commas between elements only", "[json]") {
  JsonWriter j;
  j.begin_object()
      .field("backend", "sluice")
      .field("sent", std::uint64_t{1000})
      .field("ok", true)
      .key("latency_us")
      .begin_object()
      .field("p50", 120)
      .field("p999", 4100)
      .end_object()
      .key("timeline")
      .begin_array();
  for (int i = 0; i < 2; ++i) j.begin_object().field("sent", i).end_object();
  j.end_array().key("empty").begin_array().end_array().key("none").null().end_object();
  CHECK(j.str() ==
        R"({"backend":"sluice","sent":1000,"ok":true,"latency_us":{"p50":120,"p999":4100},)"
        R"("timeline":[{"sent":0},{"sent":1}],"empty":[],"none":null})");
}

TEST_CASE("strings are escaped", "[json]") {
  JsonWriter j;
  j.begin_array()
      .value(std::string_view("q\"b\\s/\n\r\t\b\f\x01\x1f\0z", 15))
      .value("é")
      .end_array();
  CHECK(j.str() == R"(["q\"b\\s/\n\r\t\b\f\u0001\u001f\u0000z","é"])");
  std::string out;
  JsonWriter::append_quoted(out, "key\"");
  CHECK(out == R"("key\"")");
}

TEST_CASE("numbers: integers exact, doubles shortest, non-finite as null", "[json]") {
  JsonWriter j;
  j.begin_array()
      .value(std::numeric_limits<std::uint64_t>::max())
      .value(std::int64_t{-5})
      .value(0.25)
      .value(3.0)
      .value(1e-7)
      .value(std::nan(""))
      .value(std::numeric_limits<double>::infinity())
      .value(false)
      .end_array();
  CHECK(j.str() == "[18446744073709551615,-5,0.25,3,1e-07,null,null,false]");
}

TEST_CASE("nested arrays of arrays", "[json]") {
  JsonWriter j;
  j.begin_array()
      .begin_array()
      .value(1)
      .value(2)
      .end_array()
      .begin_array()
      .end_array()
      .value(3)
      .end_array();
  CHECK(j.str() == "[[1,2],[],3]");
}

}  // namespace
}  // namespace sluice::cli
