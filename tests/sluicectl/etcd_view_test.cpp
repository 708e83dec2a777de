// The formats of sluicectl cluster --etcd from a view built in the test (fetching members needs
// an etcd: tests/failover runs it against a real one), and the errors of a bad or absent etcd.
#include "tools/sluicectl/etcd_view.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

namespace sluice::ctl {
namespace {

EtcdView three_members_and_a_stray_key() {
  EtcdView view;
  view.revision = 42;
  view.members = {
      {"/sluice/prod/members/n1", "n1", "active", "127.0.0.1:17420", "7421,7422", "",
       0x694d7a8e2c1f0a01, 7, 10},
      {"/sluice/prod/members/n2", "n2", "draining", "127.0.0.1:17430", "", "", 0x694d7a8e2c1f0a02,
       -1, 10},
      {"/sluice/prod/members/n3", "n3", "joining", "[::1]:17440", "17441", "", 0, -1, 0},
      {"/sluice/prod/members/x", "", "", "", "", "not JSON", 0, -1, 0},
  };
  return view;
}

TEST_CASE("etcd's view: a row per member with its lease and TTL left, problems on their own",
          "[etcd_view]") {
  CHECK(format_etcd_view("http://127.0.0.1:2379", "prod", three_members_and_a_stray_key(), false) ==
        "etcd http://127.0.0.1:2379: cluster prod, revision 42, 4 member records\n"
        "node                 state     address                shards           lease            "
        " TTL left\n"
        "n1                   active    127.0.0.1:17420        7421,7422        694d7a8e2c1f0a01 "
        " 7 s of 10\n"
        "n2                   draining  127.0.0.1:17430        -                694d7a8e2c1f0a02 "
        " expired\n"
        "n3                   joining   [::1]:17440            17441            0                "
        " no lease\n"
        "/sluice/prod/members/x: not a member record: not JSON\n");
  EtcdView one;
  one.revision = 7;
  one.members = {three_members_and_a_stray_key().members.front()};
  CHECK_THAT(format_etcd_view("http://e:2379", "prod", one, false),
             Catch::StartsWith("etcd http://e:2379: cluster prod, revision 7, 1 member record\n"));
  CHECK(format_etcd_view("http://e:2379", "prod", EtcdView{3, {}}, false) ==
        "etcd http://e:2379: cluster prod, revision 3, 0 member records\n");
}

TEST_CASE("etcd's view in JSON: the revision and every member, its lease in hex", "[etcd_view]") {
  CHECK(format_etcd_view("http://127.0.0.1:2379", "prod", three_members_and_a_stray_key(), true) ==
        R"({"etcd":"http://127.0.0.1:2379","cluster_name":"prod","revision":42,"members":[)"
        R"({"key":"/sluice/prod/members/n1","id":"n1","state":"active",)"
        R"("address":"127.0.0.1:17420","shard_ports":[7421,7422],"lease":"694d7a8e2c1f0a01",)"
        R"("ttl_s":7,"granted_s":10,"problem":null},)"
        R"({"key":"/sluice/prod/members/n2","id":"n2","state":"draining",)"
        R"("address":"127.0.0.1:17430","shard_ports":[],"lease":"694d7a8e2c1f0a02",)"
        R"("ttl_s":-1,"granted_s":10,"problem":null},)"
        R"({"key":"/sluice/prod/members/n3","id":"n3","state":"joining",)"
        R"("address":"[::1]:17440","shard_ports":[17441],"lease":"0","ttl_s":-1,"granted_s":0,)"
        R"("problem":null},{"key":"/sluice/prod/members/x","id":"","state":"","address":"",)"
        R"("shard_ports":[],"lease":"0","ttl_s":-1,"granted_s":0,"problem":"not JSON"}]})"
        "\n");
}

TEST_CASE("a --etcd that is not http://HOST:PORT, or does not answer, is an error naming it",
          "[etcd_view]") {
  const auto bad = fetch_etcd_view("https://127.0.0.1:2379", "prod", std::chrono::seconds(1));
  REQUIRE_FALSE(bad.has_value());
  CHECK_THAT(bad.error(), Catch::StartsWith("--etcd: "));
  // Nothing listens on port 1.
  const auto away = fetch_etcd_view("http://127.0.0.1:1", "prod", std::chrono::milliseconds(500));
  REQUIRE_FALSE(away.has_value());
  CHECK_THAT(away.error(), Catch::StartsWith("etcd at http://127.0.0.1:1: "));
}

}  // namespace
}  // namespace sluice::ctl
