#!/usr/bin/python3
"""A gRPC client that is not ours (Debian's python3-grpcio, messages compiled from
tools/rls_proto/ with protoc) asks a running sluice-gateway --grpc-listen, in front of a real
cluster, the cases of tests/rls/rls_test.cpp. Run by tests/rls/rls_python_test.cpp with
the config it writes (RLS_CONFIG there) and --rls-headers both.

    rls_check.py GRPC_HOST:PORT HTTP_HOST:PORT

Prints one line per case and "N cases passed"; exits 1 at the first failed check (with what
was expected and what came), 2 when grpc or protoc is missing.
"""
import os
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

try:
    import grpc  # Debian's python3-grpcio
    import rls_call  # tools/rls_call.py: compiles the messages
except ImportError as e:
    print("rls_check: " + str(e) + " (tools/deps.sh installs python3-grpcio)", file=sys.stderr)
    sys.exit(2)

MAX_U32 = 2**32 - 1


class Failed(Exception):
    pass


def expect(what, got, wanted):
    if got != wanted:
        raise Failed("{}: expected {!r}, got {!r}".format(what, wanted, got))


def expect_true(what, condition):
    if not condition:
        raise Failed(what)


class Checker:
    def __init__(self, pb, grpc_address, http_address):
        self.pb = pb
        self.http_address = http_address
        self.channel = grpc.insecure_channel(grpc_address)
        self.stub = rls_call.should_rate_limit(self.channel, pb)
        self.OK = pb.RateLimitResponse.OK
        self.OVER = pb.RateLimitResponse.OVER_LIMIT
        self.HOUR = pb.RateLimitResponse.RateLimit.HOUR

    def request(self, descriptors, domain="rls_test", hits=0):
        return rls_call.build_request(self.pb, domain, descriptors, hits)

    def call(self, req):
        return self.stub(req, timeout=5)

    def ask(self, descriptors, **kwargs):
        return self.call(self.request(descriptors, **kwargs))

    def metrics(self):
        with urllib.request.urlopen("http://{}/metrics".format(self.http_address), timeout=5) as r:
            return r.read().decode()

    def limit(self, what, status, per_unit, name=""):
        expect_true(what + ": current_limit set", status.HasField("current_limit"))
        got = (status.current_limit.requests_per_unit, status.current_limit.unit,
               status.current_limit.name)
        expect(what + ": current_limit", got, (per_unit, self.HOUR, name))

    def reset_in_hour(self, what, status):
        expect_true(what + ": duration_until_reset set", status.HasField("duration_until_reset"))
        rest = 3600 - int(time.time()) % 3600
        got = status.duration_until_reset.seconds
        expect_true("{}: duration_until_reset {} s, the rest of the hour is {} s".format(
            what, got, rest), rest - 1 <= got <= min(3600, rest + 1))


def header(response, name):
    for h in response.response_headers_to_add:
        if h.key == name:
            return h.value
    return None


def nested(c):
    login = [[("authenticated", "false"), ("path", "/login")]]
    for i in range(1, 4):
        r = c.ask(login)
        expect("call {} overall_code".format(i), r.overall_code, c.OK)
        c.limit("call {}".format(i), r.statuses[0], 3, "login")
        expect("call {} limit_remaining".format(i), r.statuses[0].limit_remaining, 3 - i)
    r = c.ask(login)
    expect("4th call overall_code", r.overall_code, c.OVER)
    expect("4th call status", r.statuses[0].code, c.OVER)
    c.limit("4th call", r.statuses[0], 3, "login")
    c.reset_in_hour("4th call", r.statuses[0])
    expect("RateLimit-Policy", header(r, "RateLimit-Policy"), '"login";q=3;w=3600')
    expect_true("RateLimit field", (header(r, "RateLimit") or "").startswith('"login";r=0;t='))
    expect_true("Retry-After", int(header(r, "Retry-After") or "0") >= 1)
    expect("RateLimit-Limit", header(r, "RateLimit-Limit"), "3")
    expect("RateLimit-Remaining", header(r, "RateLimit-Remaining"), "0")
    expect_true("RateLimit-Reset", header(r, "RateLimit-Reset") is not None)


def key_only(c):
    def ask(address):
        return c.ask([[("remote_address", address)]])

    expect("10.0.0.1 first remaining", ask("10.0.0.1").statuses[0].limit_remaining, 1)
    expect("10.0.0.1 second remaining", ask("10.0.0.1").statuses[0].limit_remaining, 0)
    expect("10.0.0.1 third", ask("10.0.0.1").overall_code, c.OVER)
    other = ask("10.0.0.2")
    expect("10.0.0.2 first", other.overall_code, c.OK)
    expect("10.0.0.2 remaining", other.statuses[0].limit_remaining, 1)


def unlimited(c):
    for i in range(20):
        r = c.ask([[("authenticated", "false"), ("path", "/healthz")]])
        expect("call {} overall_code".format(i), r.overall_code, c.OK)
        expect_true("call {}: no current_limit".format(i),
                    not r.statuses[0].HasField("current_limit"))
        expect("call {} limit_remaining".format(i), r.statuses[0].limit_remaining, MAX_U32)


def shadow(c):
    for i in range(3):
        r = c.ask([[("plan", "bulk")]])
        expect("call {} overall_code".format(i), r.overall_code, c.OK)
        c.limit("call {}".format(i), r.statuses[0], 1, "bulk_shadow")
    text = c.metrics()
    line = 'sluice_gateway_shadow_denials_total{policy="bulk_shadow"} 2'
    expect_true("the gateway's /metrics has " + line, line in text)


def replaces(c):
    for i in range(1, 4):
        r = c.ask([[("tenant", "t1")], [("premium", "p1")]])
        expect("call {} overall_code".format(i), r.overall_code, c.OK)
        expect_true("call {}: per_tenant replaced".format(i),
                    not r.statuses[0].HasField("current_limit"))
        c.limit("call {} premium".format(i), r.statuses[1], 5, "premium")
        expect("call {} premium remaining".format(i), r.statuses[1].limit_remaining, 5 - i)
    expect("t2 alone first", c.ask([[("tenant", "t2")]]).overall_code, c.OK)
    expect("t2 alone second", c.ask([[("tenant", "t2")]]).overall_code, c.OVER)


def hits_addend(c):
    batch = [[("batch", "b1")]]
    expect("hits 0 means 1", c.ask(batch, hits=0).statuses[0].limit_remaining, 9)
    expect("hits 4", c.ask(batch, hits=4).statuses[0].limit_remaining, 5)
    req = c.request(batch, hits=1)
    req.descriptors[0].hits_addend.value = 5
    r = c.call(req)
    expect("descriptor hits 5 overall_code", r.overall_code, c.OK)
    expect("descriptor hits 5 remaining", r.statuses[0].limit_remaining, 0)
    expect("then one more", c.ask(batch, hits=1).overall_code, c.OVER)


def order(c):
    c.ask([[("remote_address", "10.9.9.9")]])
    c.ask([[("remote_address", "10.9.9.9")]])
    r = c.ask([[("batch", "order")], [("nothing", "matches")], [("remote_address", "10.9.9.9")],
               [("authenticated", "false"), ("path", "/login")]])
    expect("overall_code", r.overall_code, c.OVER)
    expect("statuses", len(r.statuses), 4)
    codes = [s.code for s in r.statuses]
    expect("codes in request order", codes, [c.OK, c.OK, c.OVER, c.OVER])
    c.limit("[0]", r.statuses[0], 10)
    expect("[0] remaining", r.statuses[0].limit_remaining, 9)
    expect_true("[1] has no limit", not r.statuses[1].HasField("current_limit"))
    c.limit("[2]", r.statuses[2], 2)
    c.limit("[3]", r.statuses[3], 3, "login")  # used up by the nested case


def unknown_domain(c):
    r = c.ask([[("remote_address", "10.0.0.1")]], domain="no_such_domain")
    expect("overall_code", r.overall_code, c.OK)
    expect_true("no current_limit", not r.statuses[0].HasField("current_limit"))


def invalid(c):
    try:
        c.ask([[("a", "b")]], domain="")
    except grpc.RpcError as e:
        expect("status", e.code(), grpc.StatusCode.INVALID_ARGUMENT)
        expect("message", e.details(), "rate limit domain must not be empty")
    else:
        raise Failed("an empty domain was answered")


def raw_call(c, method, payload, timeout=5):
    """A unary call of `payload` bytes to `method`, as grpcio sends any call."""
    call = c.channel.unary_unary(method, request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)
    return call(payload, timeout=timeout)


def refused_raw(c, method, payload, code, details):
    try:
        raw_call(c, method, payload)
    except grpc.RpcError as e:
        expect("status", e.code(), code)
        expect("message", e.details(), details)
    else:
        raise Failed("{} of {} bytes was answered".format(method, len(payload)))


def server_refusals(c):
    should = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    refused_raw(c, "/envoy.service.ratelimit.v3.RateLimitService/Other", b"",
                grpc.StatusCode.UNIMPLEMENTED,
                "unknown method /envoy.service.ratelimit.v3.RateLimitService/Other")
    refused_raw(c, should, b"\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT,
                "the request is not a RateLimitRequest message")
    # The gateway runs with --rls-max-message-bytes 4096: 4096 bytes are taken, 4097 are not.
    fits = c.request([[("batch", "")]])
    entry = fits.descriptors[0].entries[0]
    while len(fits.SerializeToString()) < 4096:  # length prefixes grow with it: one at a time
        entry.value += "x"
    expect("size of the request that fits", len(fits.SerializeToString()), 4096)
    expect("overall_code", c.call(fits).overall_code, c.OK)
    fits.descriptors[0].entries[0].value += "x"
    refused_raw(c, should, fits.SerializeToString(), grpc.StatusCode.RESOURCE_EXHAUSTED,
                "request message larger than 4096 bytes")
    # The channel carries on.
    expect("overall_code", c.ask([[("batch", "after refusals")]]).overall_code, c.OK)


def counted_in_metrics(c):
    text = c.metrics()
    for line in ['sluice_gateway_rls_requests_total{code="OVER_LIMIT",domain="rls_test"}',
                 'sluice_gateway_rls_requests_total{code="OK",domain="unknown"} 1',
                 'sluice_gateway_decision_duration_seconds_count{endpoint="rls"}']:
        expect_true("the gateway's /metrics has " + line, line in text)


CASES = [
    ("a nested descriptor, then OVER_LIMIT with its reset and header fields", nested),
    ("a key-only entry counts each value apart", key_only),
    ("unlimited", unlimited),
    ("shadow_mode: OK, the would-be denials in /metrics", shadow),
    ("replaces", replaces),
    ("hits_addend of the request and of a descriptor", hits_addend),
    ("one status per descriptor in request order", order),
    ("an unknown domain", unknown_domain),
    ("an empty domain is INVALID_ARGUMENT", invalid),
    ("the gRPC server's own refusals, each with its status and message", server_refusals),
    ("requests by domain and code in /metrics", counted_in_metrics),
]


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    # Hourly windows on the UTC clock: a run that would straddle the hour waits for it first.
    rest = 3600 - int(time.time()) % 3600
    if rest < 30:
        print("waiting {} s for the next UTC hour".format(rest))
        time.sleep(rest + 1)
    with tempfile.TemporaryDirectory() as generated:
        pb = rls_call.compile_protos(generated)
        c = Checker(pb, sys.argv[1], sys.argv[2])
        for name, case in CASES:
            try:
                case(c)
            except (Failed, grpc.RpcError) as e:
                print("FAILED: {}: {}".format(name, e))
                return 1
            print("ok: " + name)
    print("{} cases passed".format(len(CASES)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
