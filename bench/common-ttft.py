#!/usr/bin/env python3
"""TTFT over the requests every run answered: a fair mean when routers fail different requests.

Usage: bench/common-ttft.py RUN_DIR... (each with the samples.jsonl of `saltus bench --samples`,
the same trace and load point).

A router that answers a request another refused (an engine's "the kv cache does not have
sufficient capacity" for a long prompt) adds that request's TTFT to its mean and tail, and the
other router's mean leaves it out. This pairs the requests of the runs and prints each run's
TTFT mean, P50, P99 and goodput (TTFT <= --slo, default 1 s) over the requests all of them
answered. Requests are paired by when the replay was to send them and their prompt's length as
sent (the samples' due_ns and input_tokens, which `saltus bench` writes since 2026-12-07), so any
router's runs pair, nginx's included; older samples pair by their arrival burst (sends less
than 100 ms apart) and their size in blocks (the total of saltus's X-Saltus-Route,
"matched/total ..."), which needs saltus routes.
"""
import argparse
import collections
import json
import os
import statistics


def load(path, gap_ns):
    rows = sorted((json.loads(line) for line in open(path)), key=lambda r: r["at_ns"])
    out, burst, last, seen = {}, 0, None, collections.Counter()
    if rows and all("input_tokens" in r for r in rows):
        for r in rows:
            key = (r.get("due_ns", 0), r["input_tokens"])
            seen[key] += 1
            out[key + (seen[key],)] = r
        return out
    for r in rows:
        if last is not None and r["at_ns"] - last > gap_ns:
            burst += 1
        last = r["at_ns"]
        route = r.get("route", "").split(" ")[0]
        if "/" not in route:
            raise SystemExit(f"{path}: a sample without a saltus route; pairing needs them")
        key = (burst, route.split("/")[1])
        seen[key] += 1
        out[key + (seen[key],)] = r
    return out


def ok(r):
    return r.get("status") == 200 and r.get("ttft_ns", 0) > 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--slo", type=float, default=1.0, help="TTFT objective in seconds")
    ap.add_argument("--gap", type=float, default=0.1, help="seconds between sends that start a new burst")
    a = ap.parse_args()
    runs = [(d, load(os.path.join(d, "samples.jsonl"), a.gap * 1e9)) for d in a.runs]
    keys = set.intersection(*(set(k for k, r in rs.items() if ok(r)) for _, rs in runs))
    total = max(len(rs) for _, rs in runs)
    print(f"{len(keys)} of {total} requests answered by every run")
    print("| run | answered | TTFT mean ms | TTFT p50 ms | TTFT p99 ms | within SLO |")
    print("|---|--:|--:|--:|--:|--:|")
    for d, rs in runs:
        t = sorted(rs[k]["ttft_ns"] / 1e6 for k in keys)
        n = sum(1 for r in rs.values() if ok(r))
        print(f"| {d} | {n} | {statistics.mean(t):.0f} | {t[len(t) // 2]:.0f} | {t[int(len(t) * 0.99)]:.0f} | "
              f"{sum(1 for x in t if x <= a.slo * 1e3)} |")


if __name__ == "__main__":
    main()
