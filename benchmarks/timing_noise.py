"""How noisy is one timing on this machine? Read it before reading small gaps between tuners.

A tuner's best is the largest of hundreds of timings, and the tuners' bests differ by a few
percent, so the spread of a single timing sets what a comparison can tell. This benchmark
draws ``--configs`` random configs of one op and measures each ``--rounds`` times (every round
in a fresh order, so that no config is always timed first), under each measurement setting
given, one after the other. Per setting it reports how much a config's timings vary (the
coefficient of variation of its GFLOPS over the rounds: median and 90th percentile over the
configs) and which way the outliers go: readings more than 10% below the config's median
(slowed by the neighbours' load) and more than 10% above it (lucky readings, which a tuner's
best collects).

    python benchmarks/timing_noise.py --op r3x3 --setting 3,3,0 --setting 1,5,20 \
        --out benchmarks/results/timing_noise_r3x3.json

A setting is ``number,repeat,min_repeat_ms`` as in ``autotvm.LocalRunner``; the default,
3,3,0, is the measurement every tuner comparison uses (``comparison_measure_option``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.compare import comparison_measure_option, machine_description, measure_again  # noqa: E402
from tools.workloads import WORKLOADS, workload_task  # noqa: E402

OUTLIER = 0.10  # a reading this far from its config's median counts as an outlier


def parse_setting(text: str) -> tuple[int, int, int]:
    """``"number,repeat,min_repeat_ms"`` as three integers (number and repeat at least 1)."""
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"a setting is number,repeat,min_repeat_ms (three whole numbers, e.g. 3,3,0), got {text!r}")
    number, repeat, min_repeat_ms = (int(p) for p in parts)
    if number < 1 or repeat < 1:
        raise ValueError(f"a setting's number and repeat must be at least 1, got {text!r}")
    return number, repeat, min_repeat_ms


def spread(gflops: dict[int, list[float]]) -> dict:
    """How much each config's readings vary, over the configs that never failed: the median
    and 90th percentile of the coefficient of variation, and the share of all readings more
    than ``OUTLIER`` below and above their config's median."""
    kept = [np.asarray(v, dtype=float) for v in gflops.values() if v and min(v) > 0]
    if not kept:
        return {"configs": 0}
    cvs = [float(v.std() / v.mean()) for v in kept]
    ratios = np.concatenate([v / np.median(v) for v in kept])
    return {"configs": len(kept), "median_cv": statistics.median(cvs), "p90_cv": float(np.percentile(cvs, 90)),
            "slow_outliers": float(np.mean(ratios < 1 - OUTLIER)), "fast_outliers": float(np.mean(ratios > 1 + OUTLIER))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", default="r3x3", help=f"the workload ({', '.join(WORKLOADS)})")
    parser.add_argument("--configs", type=int, default=40, help="random configs to measure")
    parser.add_argument("--rounds", type=int, default=5, help="timings of each config")
    parser.add_argument("--setting", action="append", default=None,
                        help="number,repeat,min_repeat_ms (repeatable; default 3,3,0)")
    parser.add_argument("--seed", type=int, default=0, help="which configs are drawn")
    parser.add_argument("--out", default=None, help="write the figures and every reading here (JSON)")
    args = parser.parse_args()
    if args.op not in WORKLOADS:
        sys.exit(f"unknown --op {args.op!r}; choose from {', '.join(WORKLOADS)}")
    if args.configs < 1 or args.rounds < 2:
        sys.exit(f"--configs must be at least 1 and --rounds at least 2, got {args.configs} and {args.rounds}")
    try:
        settings = [parse_setting(text) for text in (args.setting or ["3,3,0"])]
    except ValueError as err:
        sys.exit(str(err))
    size = len(workload_task(args.op).config_space)
    rng = np.random.default_rng(args.seed)
    indices = [int(i) for i in rng.choice(size, min(args.configs, size), replace=False)]
    results = []
    for number, repeat, min_repeat_ms in settings:
        option = comparison_measure_option(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
        start = time.perf_counter()
        gflops = measure_again(args.op, indices, args.rounds, option, seed=args.seed)
        figures = spread(gflops) | {"setting": f"{number},{repeat},{min_repeat_ms}",
                                    "seconds": time.perf_counter() - start}
        results.append(figures | {"gflops": {str(i): v for i, v in gflops.items()}})
        if figures["configs"]:
            print(f"{figures['setting']:>10}: {figures['configs']} configs, CV median {figures['median_cv']:.3f}, "
                  f"90th percentile {figures['p90_cv']:.3f}; readings >10% below their median "
                  f"{figures['slow_outliers']:.1%}, >10% above {figures['fast_outliers']:.1%} "
                  f"({figures['seconds']:.0f} s)", flush=True)
        else:
            print(f"{figures['setting']:>10}: every config failed at least once", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "machine": machine_description(), "results": results}, f)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
