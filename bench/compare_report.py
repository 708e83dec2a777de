#!/usr/bin/env python3
"""The report of one bench/compare.sh run: the table, the targets met or missed, the JSON.

Usage: compare_report.py WORK_DIR RESULT_JSON [DOC]

Reads what compare.sh left in WORK_DIR (one sluice-load JSON per run, redis-benchmark CSVs,
w5.txt, w4_rates.txt, affinity.txt, context.txt), prints the table, writes RESULT_JSON and,
when DOC is given, replaces the text between DOC's compare.sh markers with the generated
section. Every statement in the section is computed here from those files.
"""
import datetime
import json
import os
import platform
import sys

BEGIN = "<!-- compare.sh:begin -->"
END = "<!-- compare.sh:end -->"
NAN = float("nan")

work, out_path = sys.argv[1], sys.argv[2]
doc_path = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None


def read_kv(name):
    values = {}
    with open(os.path.join(work, name)) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("=")
            values[key] = value
    return values


ctx = read_kv("context.txt")
secs = int(ctx["seconds"])


def load(name):
    try:
        with open(os.path.join(work, name + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def tput(name):
    r = load(name)
    return r.get("throughput_per_s", NAN) if r else NAN


def rounds_of(w, a, b):
    """The ratio of run a's throughput to run b's in each of workload w's three rounds."""
    return [ratio(tput(f"{w}_{a}{r}"), tput(f"{w}_{b}{r}")) for r in ("", "_r2", "_r3")]


def lat(name):
    r = load(name)
    return (r or {}).get("latency_us") or {}


def ratio(a, b):
    return a / b if b == b and b > 0 else NAN


def median(values):
    values = sorted(v for v in values if v == v)
    return values[len(values) // 2] if values else NAN


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "n/a"
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


rows = []


def row(workload, what, value, target=None, ok=None):
    """A row; with a target, ok says whether it was met (a missing figure never is)."""
    if target is not None:
        ok = bool(ok) and value == value
    rows.append({"workload": workload, "what": what, "value": value, "target": target,
                 "met": ok})


# W1-W3: closed loop, 50 connections, token bucket; Redis designs at the same settings.
for w in ("W1", "W2", "W3"):
    s, p = tput(f"{w}_sluice"), tput(f"{w}_ping")
    lua, iw = tput(f"{w}_redis_lua"), tput(f"{w}_redis_incr_window")
    row(w, "sluice token_bucket /s", s)
    row(w, "sluice ping floor /s", p)
    row(w, "redis lua_token_bucket /s", lua)
    row(w, "redis incr_window (fixed) /s", iw)
    if w in ("W1", "W3"):
        rounds = rounds_of(w, "sluice", "ping")
        m, floor = median(rounds), 0.90 if w == "W1" else 0.85
    if w == "W1":
        row(w, "sluice / redis incr_window", ratio(s, iw), ">= 1.0", ratio(s, iw) >= 1.0)
        row(w, "sluice / ping floor (median of 3)", m, f">= {floor:.2f}", m >= floor)
        row(w, "rounds sluice / ping floor", " ".join(fmt(x) for x in rounds))
        row(w, "sluice / redis lua", ratio(s, lua))
    if w == "W2":
        # Each round's Sluice run beside the two Redis designs' and the ping floor of that round.
        to_lua = rounds_of(w, "sluice", "redis_lua")
        to_iw = rounds_of(w, "sluice", "redis_incr_window")
        to_floor = rounds_of(w, "sluice", "ping")
        row(w, "sluice / redis lua (median of 3)", median(to_lua), ">= 8", median(to_lua) >= 8)
        row(w, "rounds sluice / redis lua", " ".join(fmt(x) for x in to_lua))
        row(w, "sluice / redis incr_window (median of 3)", median(to_iw), ">= 1.5",
            median(to_iw) >= 1.5)
        row(w, "rounds sluice / redis incr_window", " ".join(fmt(x) for x in to_iw))
        row(w, "sluice / ping floor (median of 3)", median(to_floor))
        row(w, "rounds sluice / ping floor", " ".join(fmt(x) for x in to_floor))
    if w == "W3":
        row(w, "sluice / ping floor (median of 3)", m, f">= {floor:.2f}", m >= floor)
        row(w, "rounds sluice / ping floor", " ".join(fmt(x) for x in rounds))
        row(w, "sluice / redis lua", ratio(s, lua))

# W4: open loop at a rate below each backend's capacity measured in this run.
with open(os.path.join(work, "w4_rates.txt")) as f:
    rate_sluice, rate_redis, cap_secs = (int(x) for x in f.read().split())
fraction = float(ctx["w4_fraction"])
how = (f"{fraction:.0%} of its own capacity" if ctx["w4_mode"] == "own"
       else f"{fraction:.0%} of the slower one's capacity")
how_short = f"{fraction:.0%} of {'own' if ctx['w4_mode'] == 'own' else 'slower'} capacity"
def requests_per_s(r):
    """Requests answered per second: decisions, and the PING controls sent between them."""
    t = r.get("throughput_per_s", NAN)
    c = r.get("control")
    decided = r.get("allowed", 0) + r.get("denied", 0)
    if c and decided:
        t = t * (decided + c.get("answered", 0)) / decided
    return t


w4 = {}
for who, rate, cap_name, judged in (
        ("sluice", rate_sluice, "W4_capacity_sluice", True),
        ("redis_lua", rate_redis, "W4_capacity_redis_lua", False)):
    rounds = [load(f"W4_{who}_r{k}") or {} for k in (1, 2, 3)]
    lats = [r.get("latency_us") or {} for r in rounds]
    achieved = [requests_per_s(r) for r in rounds]
    kept_up = [a == a and a >= 0.95 * rate for a in achieved]
    row("W4", f"{who} closed-loop capacity /s ({cap_secs} s)", tput(cap_name))
    row("W4", f"{who} open-loop rate /s ({how_short})", rate)
    row("W4", f"{who} achieved /s (median of 3)", median(achieved))
    row("W4", f"rounds {who} kept up (>= 95% of rate)",
        " ".join("yes" if k else "NO" for k in kept_up))
    for q, name, target in (("p50", "p50", 200), ("p99", "p99", 1000), ("p999", "p99.9", None)):
        m = median([l.get(q, NAN) for l in lats])
        if judged and target is not None:
            row("W4", f"{who} {name} us (median of 3)", m, f"<= {target}", m <= target)
        else:
            row("W4", f"{who} {name} us (median of 3)", m)
        if q != "p999":
            row("W4", f"rounds {who} {name} us", " ".join(fmt(l.get(q, NAN)) for l in lats))
    w4[who] = {"capacity_per_s": tput(cap_name), "rate_per_s": rate, "achieved_per_s": achieved,
               "kept_up": kept_up}


def stored_keys(name):
    try:
        with open(os.path.join(work, f"{name}.keys")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return NAN


# W4 and W4T beside their PING control: in each round every other request is a PING of the same
# keys (--control-every 2), in the same schedule on the same connections. The tail the control
# has is the transport's and the generator's; what the acquires add beyond it is the decision's
# (targets: at most 1.2x on p99 and p99.9, medians). W4's records expire at once; W4T's live
# (100 per hour, after a fill of every key).
for w in ("W4", "W4T"):
    runs = [load(f"{w}_sluice_r{k}") or {} for k in (1, 2, 3)]
    acq = [r.get("latency_us") or {} for r in runs]
    ping = [(r.get("control") or {}).get("latency_us") or {} for r in runs]
    achieved = [requests_per_s(r) for r in runs]
    keys = [stored_keys(f"{w}_sluice_r{k}") for k in (1, 2, 3)]
    if w == "W4T":
        row(w, "sluice open-loop rate /s (W4's)", rate_sluice)
        row(w, "sluice achieved /s (median of 3)", median(achieved))
        for q, name in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
            row(w, f"sluice {name} us (median of 3)", median([l.get(q, NAN) for l in acq]))
    row(w, "keys stored after each round", " ".join(fmt(k) for k in keys))
    for q, name in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
        m = median([l.get(q, NAN) for l in ping])
        if w == "W4" and q == "p99":
            row(w, f"PING control {name} us (median of 3)", m, "< 1000", m < 1000)
        else:
            row(w, f"PING control {name} us (median of 3)", m)
        ratios = [ratio(a.get(q, NAN), c.get(q, NAN)) for a, c in zip(acq, ping)]
        if q == "p50":
            row(w, f"acquire / control {name} (median of 3)", median(ratios))
        else:
            row(w, f"acquire / control {name} (median of 3)", median(ratios), "<= 1.2",
                median(ratios) <= 1.2)
        row(w, f"rounds acquire / control {name}", " ".join(fmt(x) for x in ratios))

# W5: RSS growth of the server process per key, both backends.
w5 = {}
with open(os.path.join(work, "w5.txt")) as f:
    for line in f:
        who, n, before, after = line.split()
        n, before, after = int(n), int(before), int(after)
        w5[f"{who}_{n}"] = {"keys": n, "rss_before": before, "rss_after": after,
                            "bytes_per_key": (after - before) / n}
for who in ("sluice", "redis"):
    for key, m in w5.items():
        if key.startswith(who + "_"):
            n, per_key = m["keys"], m["bytes_per_key"]
            if who == "sluice" and n >= 10_000_000:
                row("W5", f"sluice RSS bytes/key at {n:,} keys", per_key, "<= 48", per_key <= 48)
            else:
                row("W5", f"{who} RSS bytes/key at {n:,} keys", per_key)
for key, m in w5.items():
    if key.startswith("redis_") and f"sluice_{m['keys']}" in w5:
        row("W5", f"redis / sluice at {m['keys']:,} keys",
            ratio(m["bytes_per_key"], w5[f"sluice_{m['keys']}"]["bytes_per_key"]))

# W6: the other algorithms at W2's settings.
s_g, s_sw = tput("W6_sluice_gcra"), tput("W6_sluice_sliding_window")
iw_s = tput("W6_redis_incr_window_sliding")
row("W6", "sluice gcra /s", s_g)
row("W6", "sluice sliding_window /s", s_sw)
row("W6", "redis incr_window (sliding) /s", iw_s)
row("W6", "sluice gcra / redis incr_window", ratio(s_g, iw_s))
row("W6", "sluice sliding_window / redis incr_window", ratio(s_sw, iw_s))


def redis_benchmark_rps(name):
    try:
        with open(os.path.join(work, name + ".csv")) as f:
            return float(f.read().strip().split(",")[1].strip('"'))
    except (OSError, ValueError, IndexError):
        return NAN


bench = {}
for p in (1, 16):
    mine_runs = [tput(f"incr_P{p}_sluice_load_r{k}") for k in (1, 2, 3)]
    theirs_runs = [redis_benchmark_rps(f"incr_P{p}_redis_benchmark_r{k}") for k in (1, 2, 3)]
    mine, bench[p] = median(mine_runs), median(theirs_runs)
    row("INCR", f"P{p} sluice-load /s (median of 3)", mine)
    row("INCR", f"P{p} redis-benchmark /s (median of 3)", bench[p])
    row("INCR", f"P{p} sluice-load / redis-benchmark", ratio(mine, bench[p]), ">= 1.0",
        ratio(mine, bench[p]) >= 1.0)
    row("INCR", f"P{p} rounds sluice-load/redis-benchmark",
        " ".join(fmt(ratio(a, b)) for a, b in zip(mine_runs, theirs_runs)))

# Every run: errors, and decisions denied where every decision should be allowed.
runs, errors, denied = {}, [], 0
for f in sorted(os.listdir(work)):
    if f.endswith(".json"):
        r = load(f[:-5])
        if r is None:
            errors.append(f"{f[:-5]}: no report")
            continue
        r.pop("timeline", None)
        runs[f[:-5]] = r
        control_errors = (r.get("control") or {}).get("errors") or 0
        if r.get("errors") or control_errors:
            errors.append(f"{f[:-5]}: {r.get('errors') or 0:,} errors"
                          + (f", {control_errors:,} control errors" if control_errors else "")
                          + (f" ({r['first_error']})" if r.get("first_error") else ""))
        if f.startswith(("W1_sluice", "W2_sluice", "W3_sluice", "W6_sluice")):
            denied += r.get("denied") or 0

# Pinning, as the kernel reported each process's threads.
expected = {"redis-server": ctx["server_cpu"], "sluiced": ctx["server_cpu"],
            "sluice-load": ctx["load_cpu"], "redis-benchmark": ctx["load_cpu"]}
seen = {}
with open(os.path.join(work, "affinity.txt")) as f:
    for line in f:
        role, _, cpus = line.strip().partition(" ")
        seen.setdefault(role, []).append(cpus)
pinning, pinned_ok = [], True
for role in ("redis-server", "sluiced", "sluice-load", "redis-benchmark"):
    lists = seen.get(role, [])
    distinct = sorted(set(c for c in lists if c != "gone"))
    ok = distinct == [expected[role]]
    pinned_ok = pinned_ok and ok
    pinning.append(f"{role} on CPU {' / '.join(distinct) or '?'} ({len(lists)} processes"
                   + ("" if ok else f"; expected CPU {expected[role]} only") + ")")

# The table.
header = f"{'workload':8} {'measure':52} {'value':>22} {'target':>8} {'met':>4}"
lines = [header]
for r in rows:
    met = "-" if r["met"] is None else ("yes" if r["met"] else "NO")
    lines.append(f"{r['workload']:8} {r['what']:52} {fmt(r['value']):>22} "
                 f"{r['target'] or '-':>8} {met:>4}")
table = "\n".join(lines)
print(table)

judged = [r for r in rows if r["target"] is not None]
missed = [r for r in judged if not r["met"]]


def utc(epoch):
    return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)


start, end = utc(ctx["start_epoch"]), utc(ctx["end_epoch"])
minutes, seconds = divmod(int((end - start).total_seconds()), 60)


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


dirty = ctx["git_dirty"].split()
if ctx["git_commit"] == "not a git checkout":
    code = "not a git checkout (no commit to name)"
elif dirty:
    code = (f"`{ctx['git_commit']}` plus uncommitted changes to {len(dirty)} file(s): "
            + ", ".join(f"`{p}`" for p in dirty[:8]) + (", ..." if len(dirty) > 8 else ""))
else:
    code = f"`{ctx['git_commit']}`, working tree clean"
redis_fields = dict(x.split("=", 1) for x in ctx["redis"].split() if "=" in x)
machine = (f"{cpu_model()}, {os.cpu_count()} cores, "
           f"{int(ctx['mem_kib']) / 2**20:.0f} GiB RAM, Linux {platform.release()}, "
           f"{ctx['os']}, virtualization: {ctx['virt']}")
versions = (f"{ctx['compiler']} ({ctx['build_type']}); Boost {ctx['boost'].replace('_', '.')}; "
            f"Redis {redis_fields.get('v', ctx['redis'])} ({redis_fields.get('malloc', '?')}); "
            f"{ctx['redis_benchmark']}; Sluice {ctx['sluice']}")
settings = (f"{secs} s per throughput workload (INCR rounds {(secs + 1) // 2} s); "
            f"W4 3 rounds of {ctx['w4_seconds']} s per backend at {how} "
            f"(sluice {rate_sluice:,}/s, redis_lua {rate_redis:,}/s); "
            f"W5 at {', '.join(f'{int(n):,}' for n in ctx['w5_keys'].split())} keys; "
            f"sluiced --shards {ctx['shards']}; {ctx['connections']} connections, "
            f"{int(ctx['keys']):,} keys")
if missed:
    verdict = (f"{len(judged) - len(missed)} of {len(judged)} met. Missed: "
               + "; ".join(f"{r['workload']} {r['what']} {fmt(r['value'])} (target "
                           f"{r['target']})" for r in missed) + ".")
else:
    verdict = f"all {len(judged)} met."
if not any(int(n) >= 10_000_000 for n in ctx["w5_keys"].split()):
    verdict += " W5's target is judged at 10,000,000 keys only, not run here."
rel_out = os.path.relpath(out_path, os.path.join(os.path.dirname(__file__), ".."))
summary = [
    f"- **Run**: {start:%Y-%m-%d %H:%M}-{end:%H:%M} UTC ({minutes} min {seconds} s); "
    f"load average {ctx['loadavg_start']} at the start, {ctx['loadavg_end']} at the end",
    f"- **Code**: {code}",
    f"- **Machine**: {machine}",
    f"- **Versions**: {versions}",
    "- **Pinning** (`taskset`; each process's threads as `/proc` reported them): "
    + "; ".join(pinning) + ("" if pinned_ok else ". NOT PINNED AS INTENDED"),
    f"- **Settings**: {settings}",
    f"- **Targets**: {verdict}",
    "- **Errors**: " + ("none" if not errors else "; ".join(errors)),
    "- **Denied** in W1-W3 and W6 on Sluice (1M keys at 100/s each should all be allowed): "
    f"{denied:,}",
    f"- **JSON**: `{rel_out}`",
]
print()
print("\n".join(summary))
section = "\n".join(
    [BEGIN, "<!-- Written by bench/compare.sh on every full run; edits here are overwritten. -->",
     ""] + summary + ["", "```text", table, "```", END])

doc = {
    "date": start.isoformat(),
    "end": end.isoformat(),
    "full_run": ctx["full"] == "1",
    "context": ctx,
    "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "kernel": platform.release()},
    "pinning": {"expected": expected, "seen": seen, "as_intended": pinned_ok},
    "table": rows,
    "targets": {"judged": len(judged), "missed": [f"{r['workload']} {r['what']}" for r in missed]},
    "w4": w4,
    "memory": w5,
    "redis_benchmark_incr_rps": {f"P{p}": v for p, v in bench.items()},
    "errors": errors,
    "runs": runs,
}
tmp = out_path + ".tmp"
with open(tmp, "w") as f:
    f.write(json.dumps(doc, indent=1).replace("NaN", "null"))
os.replace(tmp, out_path)

if doc_path:
    with open(doc_path) as f:
        text = f.read()
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < b:
        sys.exit(f"compare: {doc_path} has no {BEGIN} ... {END} section to replace")
    with open(doc_path + ".tmp", "w") as f:
        f.write(text[:b] + section + text[e + len(END):])
    os.replace(doc_path + ".tmp", doc_path)
