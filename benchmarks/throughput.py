"""Speed benchmark of the foundation: throughput, tuner overhead and memory.

    python benchmarks/throughput.py --out results/throughput.json

1. Throughput: RandomTuner on C1 (n_parallel=2, number=3, repeat=3) against MetaSchedule's own
   ``tune_tir`` on the same op and budget, side by side in one run (MetaSchedule with its default
   builder, which imports the tensor intrinsics in every fresh worker, and with a build function
   that does not).
2. Overhead: time inside next_batch + update over wall time, RandomTuner and XGBTuner.
3. Memory: peak RSS (tuning process plus its workers) of a 1000-trial run, sampled every 100 trials.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotvm.tuner import RandomTuner, XGBTuner  # noqa: E402
from tools.compare import comparison_measure_option, run_metaschedule  # noqa: E402
from tools.workloads import workload_task  # noqa: E402


def tree_rss_mib() -> float:
    me = psutil.Process()
    procs = [me] + me.children(recursive=True)
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def steady_rate(history: list[dict], skip: int = 10) -> float:
    """Trials per second after the first ``skip`` trials (worker start-up excluded)."""
    rows = history[skip:]
    if len(rows) < 2:
        return float("nan")
    return (len(rows) - 1) / (rows[-1]["elapsed"] - rows[0]["elapsed"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--memory-trials", type=int, default=1000)
    parser.add_argument("--out", default="results/throughput.json")
    parser.add_argument("--parts", default="tuners,metaschedule,memory", help="which parts to run")
    args = parser.parse_args()
    option = comparison_measure_option()
    task = workload_task("c1")
    report: dict = {}

    parts = args.parts.split(",")
    if os.path.exists(args.out):  # keep the parts not re-run
        report.update(json.load(open(args.out)))
    for name, cls in (("random", RandomTuner), ("xgb", XGBTuner)) if "tuners" in parts else ():
        tuner = cls(task, seed=0)
        start = time.perf_counter()
        tuner.tune(args.trials, option)
        wall = time.perf_counter() - start
        report[name] = {"trials": len(tuner.history), "wall_s": wall, "trials_per_s": len(tuner.history) / wall,
                        "steady_trials_per_s": steady_rate(tuner.history), "tuner_s": tuner.tuner_seconds,
                        "overhead": tuner.tuner_seconds / wall, "best_gflops": tuner.best_flops / 1e9}
        print(name, json.dumps(report[name]), flush=True)

    # MetaSchedule's default builder imports the tensor intrinsics in every fresh build worker
    # (~50 s here), longer than its 30 s build timeout: here its first batch of 64 builds ran for
    # over 6 minutes without a result. So it runs with a build function that skips that import.
    for label, fast in (("metaschedule_fast_builder", True),) if "metaschedule" in parts else ():
        run = run_metaschedule("c1", 0, args.trials, 3, 3, 0, 2, fast_build=fast)
        report[label] = {"trials": run["trials"], "wall_s": run["wall_seconds"],
                         "trials_per_s": run["trials"] / run["wall_seconds"], "best_gflops": run["best_gflops"]}
        print(label, json.dumps(report[label]), flush=True)

    samples: list = []

    def sample(tuner, inputs, results):
        if len(tuner.history) % 100 < len(results):
            samples.append({"trial": len(tuner.history), "rss_mib": tree_rss_mib()})

    if "memory" in parts:
        tuner = RandomTuner(task, seed=1)
        tuner.tune(args.memory_trials, option, callbacks=[sample])
        report["memory"] = {"samples": samples, "peak_rss_mib": max(s["rss_mib"] for s in samples),
                            "after_warmup_mib": samples[1]["rss_mib"] if len(samples) > 1 else None,
                            "final_mib": samples[-1]["rss_mib"]}
        print("memory", json.dumps(report["memory"]), flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    json.dump(report, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
