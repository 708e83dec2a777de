#!/usr/bin/python3
"""One ShouldRateLimit call to an Envoy Rate Limit Service (sluice-gateway --grpc-listen, or
envoyproxy/ratelimit itself), printed one line per descriptor: what Envoy would ask and be told.

    tools/rls_call.py 127.0.0.1:8081 DOMAIN KEY=VALUE[,KEY=VALUE...] [more descriptors...]
        [--hits N] [--timeout SECONDS] [--full]

Each descriptor argument is its entries in order, e.g. authenticated=false,path=/login. It needs
Debian's python3-grpcio and protobuf-compiler (tools/deps.sh installs both); the messages are
compiled from tools/rls_proto/ into a temporary directory on each run. Exit status: 0 OK,
1 OVER_LIMIT, 2 on a usage error, 3 when the call failed (its gRPC status is printed).
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.join(HERE, "rls_proto")
PROTOS = [
    "envoy/type/v3/ratelimit_unit.proto",
    "envoy/config/core/v3/base.proto",
    "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
    "envoy/service/ratelimit/v3/rls.proto",
]
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def compile_protos(out_dir):
    subprocess.run(["protoc", "-I", PROTO_ROOT, "--python_out=" + out_dir] + PROTOS, check=True)
    sys.path.insert(0, out_dir)
    from envoy.service.ratelimit.v3 import rls_pb2  # noqa: E402 (generated just now)

    return rls_pb2


def build_request(rls_pb2, domain, descriptors, hits=0):
    """A RateLimitRequest of `descriptors`, each a list of (key, value) entries."""
    request = rls_pb2.RateLimitRequest(domain=domain, hits_addend=hits)
    for entries in descriptors:
        descriptor = request.descriptors.add()
        for key, value in entries:
            entry = descriptor.entries.add()
            entry.key = key
            entry.value = value
    return request


def should_rate_limit(channel, rls_pb2):
    """The ShouldRateLimit method on `channel`, called with a request and a timeout."""
    return channel.unary_unary(
        METHOD,
        request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
        response_deserializer=rls_pb2.RateLimitResponse.FromString,
    )


def parse_descriptor(text):
    entries = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ValueError("expected KEY=VALUE[,KEY=VALUE...], got " + repr(text))
        entries.append((key, value))
    return entries


def describe(rls_pb2, index, status):
    code = rls_pb2.RateLimitResponse.Code.Name(status.code)
    line = "[{}] {}".format(index, code)
    if status.HasField("current_limit"):
        limit = status.current_limit
        unit = rls_pb2.RateLimitResponse.RateLimit.Unit.Name(limit.unit)
        name = ' "{}"'.format(limit.name) if limit.name else ""
        line += " limit {}/{}{} remaining {}".format(
            limit.requests_per_unit, unit, name, status.limit_remaining
        )
    elif status.limit_remaining:
        line += " remaining {} (unlimited)".format(status.limit_remaining)
    else:
        line += " (no limit applies)"
    if status.HasField("duration_until_reset"):
        reset = status.duration_until_reset
        line += " reset {}s".format(reset.seconds + reset.nanos / 1e9)
    return line


def main():
    parser = argparse.ArgumentParser(description="One ShouldRateLimit call.")
    parser.add_argument("address", help="HOST:PORT of the Rate Limit Service")
    parser.add_argument("domain")
    parser.add_argument("descriptors", nargs="+", help="KEY=VALUE[,KEY=VALUE...] each")
    parser.add_argument("--hits", type=int, default=0, help="the request's hits_addend")
    parser.add_argument("--timeout", type=float, default=1.0, help="the call's deadline (s)")
    parser.add_argument("--full", action="store_true", help="print the whole response too")
    args = parser.parse_args()
    try:
        descriptors = [parse_descriptor(d) for d in args.descriptors]
    except ValueError as e:
        print("rls_call: " + str(e), file=sys.stderr)
        return 2

    import grpc  # Debian's python3-grpcio

    with tempfile.TemporaryDirectory() as generated:
        rls_pb2 = compile_protos(generated)
        request = build_request(rls_pb2, args.domain, descriptors, args.hits)
        with grpc.insecure_channel(args.address) as channel:
            call = should_rate_limit(channel, rls_pb2)
            try:
                response = call(request, timeout=args.timeout)
            except grpc.RpcError as e:
                print("rls_call: {} {}".format(e.code().name, e.details()))
                return 3
        overall = rls_pb2.RateLimitResponse.Code.Name(response.overall_code)
        print("overall_code {}".format(overall))
        for i, status in enumerate(response.statuses):
            print("  " + describe(rls_pb2, i, status))
        for header in response.response_headers_to_add:
            print("  header {}: {}".format(header.key, header.value))
        if args.full:
            print(response)
        return 0 if response.overall_code == rls_pb2.RateLimitResponse.OK else 1


if __name__ == "__main__":
    sys.exit(main())
