#!/usr/bin/env python3
"""Medians of repeated sweeps: bench/engines-compare.sh's summary.md with SWEEPS > 1.

Usage: bench/sweep-medians.py SUMMARY.md

Groups the summary's rows by workload, load point and router (one row per sweep) and prints,
for each, the median of the sweeps and their range: failed requests, TTFT mean and P99, goodput
and token hit ratio. One sweep on a shared machine moves by up to a fifth; the median of three
ranks routers that far apart, the range shows where it cannot.
"""
import statistics
import sys

COLS = ("requests", "failed", "mean", "p50", "p99", "goodput", "hit")


def rows(path):
    out = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 10 or not cells[3].replace(",", "").isdigit():
            continue  # the header, its rule, or anything else
        try:
            vals = dict(zip(COLS, (float(c.replace(",", "")) for c in cells[3:])))
        except ValueError:
            continue
        out.setdefault(tuple(cells[:3]), []).append(vals)
    return out


def cell(vs, key, fmt):
    xs = [v[key] for v in vs]
    med = statistics.median(xs)
    if len(xs) == 1:
        return fmt(med)
    return f"{fmt(med)} ({fmt(min(xs))}–{fmt(max(xs))})"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().split("\n\n")[1])
    data = rows(sys.argv[1])
    if not data:
        sys.exit(f"{sys.argv[1]}: no result rows")
    whole = lambda x: f"{x:,.0f}"
    print("| workload | load | router | sweeps | failed | TTFT mean ms | TTFT p99 ms | goodput req/s | token hit ratio |")
    print("|---|---|---|--:|--:|--:|--:|--:|--:|")
    for key, vs in data.items():
        print(f"| {' | '.join(key)} | {len(vs)} | {cell(vs, 'failed', whole)} | {cell(vs, 'mean', whole)} | "
              f"{cell(vs, 'p99', whole)} | {cell(vs, 'goodput', lambda x: f'{x:.2f}')} | {cell(vs, 'hit', lambda x: f'{x:.3f}')} |")


if __name__ == "__main__":
    main()
