"""Issue 24's totals over a range of sittings, from their committed JSON.

Each sitting is four ``shmatari-bench`` runs (8 and 16 envs, sticky 0 and
0.25; the commands are in docs/performance.md, "Issue 24: every sitting
since the new poll"), written to
``benchmarks/results/bench-breakout-{8,16}envs-sticky{0,025}-sitting<N>.json``.
For each setting this prints, over the sittings FIRST..LAST that have it,
how many runs met each target and the median and range of each ratio. A
run's ratio is the ratio of its backends' medians over the run's rounds
(each backend's ``env_steps_per_s`` in the JSON's ``results``; not the
``summary``'s ratios, which are rounded to three places: 1.049973 read as
1.050 met the target there). Targets: shmatari sync ≥ 0.9×
and shmatari async ≥ 1.05× the ALE-reset ceiling (``ceiling``), each ≥ 1.25×
EnvPool's matching mode. Ratios are rounded half up, as in the README.

    python benchmarks/ceiling_sittings.py --first 57 --last 71
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from decimal import ROUND_HALF_UP, Decimal

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SETTINGS = ((8, "0"), (16, "0"), (8, "025"), (16, "025"))
SYNC_TARGET, ASYNC_TARGET, ENVPOOL_TARGET = 0.9, 1.05, 1.25


def _q(x: float, places: str = "0.01") -> str:
    return str(Decimal(repr(x)).quantize(Decimal(places), ROUND_HALF_UP))


def load(first: int, last: int, results: str = RESULTS) -> dict:
    """{(num_envs, sticky_tag): [(sitting, sync, async, sync_vs_envpool,
    async_vs_envpool), ...]} for the sittings in [first, last] whose JSON is
    there; every value a ratio of medians (float)."""
    runs: dict = {}
    for envs, tag in SETTINGS:
        rows = []
        for n in range(first, last + 1):
            path = os.path.join(results, f"bench-breakout-{envs}envs-sticky{tag}-sitting{n}.json")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                rate = {r["backend"]: r["env_steps_per_s"] for r in json.load(f)["results"]}
            rows.append((n, rate["shmatari"] / rate["ceiling"],
                         rate["shmatari-async"] / rate["ceiling"],
                         rate["shmatari"] / rate["envpool"],
                         rate["shmatari-async"] / rate["envpool-async"]))
        runs[(envs, tag)] = rows
    return runs


def table(runs: dict) -> list[str]:
    """The README's table (markdown lines) of ``load``'s runs."""
    out = ["| envs | sticky | sync / ceiling ≥ 0.9× | sync / ceiling, median (range) | "
           "async / ceiling ≥ 1.05× | async / ceiling, median (range) | both met | "
           "lowest vs EnvPool (sync, async) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (envs, tag), rows in runs.items():
        if not rows:
            continue
        k = len(rows)
        s = [r[1] for r in rows]
        a = [r[2] for r in rows]
        sync_met = sum(x >= SYNC_TARGET for x in s)
        async_met = sum(x >= ASYNC_TARGET for x in a)
        both = sum(r[1] >= SYNC_TARGET and r[2] >= ASYNC_TARGET for r in rows)
        out.append(
            f"| {envs} (batch {envs // 2}) | {'0' if tag == '0' else '0.25'} | {sync_met} of {k} | "
            f"{_q(statistics.median(s))}× ({_q(min(s))}–{_q(max(s))}×) | {async_met} of {k} | "
            f"{_q(statistics.median(a), '0.001')}× ({_q(min(a))}–{_q(max(a))}×) | {both} | "
            f"{_q(min(r[3] for r in rows))}×, {_q(min(r[4] for r in rows))}× |")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--first", type=int, required=True, help="first sitting (4: the new poll)")
    p.add_argument("--last", type=int, default=10**6, help="last sitting (default: all)")
    p.add_argument("--results", default=RESULTS, help="folder of the JSON (default: %(default)s)")
    args = p.parse_args(argv)
    runs = load(args.first, args.last, args.results)
    sittings = sorted({r[0] for rows in runs.values() for r in rows})
    if not sittings:
        p.error(f"no sitting JSON in {args.results} for sittings {args.first}..{args.last}")
    print(f"sittings {sittings[0]}..{sittings[-1]}: {len(sittings)} sittings, "
          f"{sum(len(rows) for rows in runs.values())} runs")
    print("\n".join(table(runs)))
    for tag in ("0", "025"):
        rows = [r for (_, t), rr in runs.items() if t == tag for r in rr]
        print(f"sticky {'0' if tag == '0' else '0.25'}: sync met in "
              f"{sum(r[1] >= SYNC_TARGET for r in rows)} of {len(rows)}, async in "
              f"{sum(r[2] >= ASYNC_TARGET for r in rows)}, both in "
              f"{sum(r[1] >= SYNC_TARGET and r[2] >= ASYNC_TARGET for r in rows)}; both modes "
              f"≥ {ENVPOOL_TARGET}× EnvPool in "
              f"{sum(r[3] >= ENVPOOL_TARGET and r[4] >= ENVPOOL_TARGET for r in rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
