"""Tune each shipped model config, benchmark it against the other runtimes, and write one table.

    python benchmarks/models.py --out results/models.md                    # the CPU configs
    python benchmarks/models.py --configs configs/cuda-*.json --precisions float32,float16
    python benchmarks/models.py --set autotuner_settings.time_budget=120   # a shorter tune of each

For each config and precision: ``driver.py -m=tune`` (its wall time is the tuning time), then
``driver.py -m=benchmark``, each in its own process so that no runtime's threads outlive its
block; a precision other than the config's own is set with ``--set run_settings.precision=...``
and tunes into its own log. The table gives, per model and precision, every variant's median
latency (with the precision it ran in), the tuned build's speed-up over eager and over the
fastest other runtime (named), and the wall time of the tune and of the benchmark (every
runtime's preparation, torch.compile's included, and its timing). Rerunning resumes the tunes from their logs;
Ctrl-C lets the driver log its trials in flight and writes the table of the configs done.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time

import tabulate

from autotvm.checks import AutoTVMError
from tools.benchmark import results_path
from tools.config import load_config
from tools.runtimes import SHORT, is_tvm
from tools.settings import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _driver(method: str, config: str, overrides: list[str], timeout: float | None = None) -> float | None:
    """The driver's wall time, or None (with a note) where it stopped: the config needs what this
    machine lacks (bfloat16 on a CPU without AVX512-BF16), its one-line error says why, or it ran
    past ``timeout`` seconds (stopped; a tune's records so far stay in its log)."""
    start = time.perf_counter()
    sets = [arg for item in overrides for arg in ("--set", item)]
    command = [sys.executable, os.path.join(ROOT, "driver.py"), f"-m={method}", f"-c={config}", *sets]
    process = subprocess.Popen(command)
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        print(f"note: {os.path.basename(config)} {' '.join(overrides)}: -m={method} stopped after {timeout:g} s; skipped")
        return None
    except KeyboardInterrupt:  # Ctrl-C reached the driver too: it logs the trials in flight and ends
        try:
            process.wait()
        except KeyboardInterrupt:  # a second Ctrl-C: at once
            process.kill()
        raise
    if code:
        print(f"note: {os.path.basename(config)} {' '.join(overrides)}: -m={method} exited {code}; skipped")
        return None
    return time.perf_counter() - start


def _records(log: str) -> int | None:
    """Trials in a model's log (one record each), the budget or time budget may have stopped short."""
    if not os.path.exists(log):
        return None
    with open(log, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=sorted(p for p in glob.glob(os.path.join(ROOT, "configs", "*.json"))
                                                              if not os.path.basename(p).startswith("cuda-")))
    parser.add_argument("--precisions", default=None,
                        help="comma-separated precisions to run each config in (default: each config's own)")
    parser.add_argument("--out", default="results/models.md")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="stop a config's tune or benchmark that runs longer, and go on with the next")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of every config, as driver.py --set does (repeatable), e.g. "
                             "autotuner_settings.time_budget=120")
    args = parser.parse_args()
    # Ctrl-C, or `timeout -s INT`, stops the command even where it was started with SIGINT ignored
    # (a script's background job): Python would then raise no KeyboardInterrupt and go on
    signal.signal(signal.SIGINT, signal.default_int_handler)
    done: dict = {"rows": [], "device": ""}
    try:
        _run(args, done)
    except KeyboardInterrupt:  # the driver in flight has logged its trials; keep the rows done so far
        print("benchmarks/models.py: interrupted; the table has the configs finished before, rerun to resume the rest")
        print(_write(done["rows"], done["device"], args.out))
        sys.exit(130)
    print(_write(done["rows"], done["device"], args.out))
    print(f"wrote {args.out}")


def _run(args: argparse.Namespace, done: dict) -> None:
    """Tune and benchmark each config in each precision, adding to ``done`` a row per model and
    the device's name, and writing the table after each config."""
    rows = done["rows"]
    for path in args.configs:
        try:  # the config as the driver reads it, --set included: where its logs and benchmarks go
            config = load_config(path, args.set)
        except AutoTVMError as error:
            print(f"note: {os.path.basename(path)}: {error}; skipped")
            continue
        own = config.run_settings.precision
        for precision in (args.precisions.split(",") if args.precisions else [own]):
            name = config.autotuner_settings.save_name + ("" if precision == own else f"-{SHORT[precision]}")
            overrides = args.set + ([] if precision == own else [f"run_settings.precision={precision}",
                                                                 f"autotuner_settings.save_name={name}"])
            tune_s = _driver("tune", path, overrides, args.timeout)
            time.sleep(1)
            bench_s = None if tune_s is None else _driver("benchmark", path, overrides, args.timeout)
            if bench_s is None:
                continue
            settings = replace(config.autotuner_settings, save_name=name)
            for model in config.models:
                # the driver ran in this working directory: relative save paths are relative to it
                timed_path = results_path(settings, model.name) + ".json"
                result = json.load(open(timed_path, encoding="utf-8")) if os.path.exists(timed_path) else []
                done["device"] = result[0].get("device", done["device"]) if result else done["device"]
                timed = {r["variant"]: r for r in result}
                tuned = timed.get("tvm-tuned")
                others = "; ".join(f"{v} {r['median_ms']:.3f} ({SHORT.get(r['precision'], r['precision'])})"
                                   for v, r in timed.items() if not is_tvm(v))
                rows.append([model.name, precision, others, tuned["median_ms"] if tuned else None,
                             tuned["speedup_over_eager"] if tuned else None,
                             f"{tuned['speedup_over_fastest_other']:.2f} ({tuned['fastest_other']})" if tuned else "-",
                             _records(settings.log_path(model.name)), round(tune_s), round(bench_s)])
            _write(rows, done["device"], args.out)  # a run stopped later keeps these rows


def _write(rows: list, device: str, out: str) -> str:
    headers = ["model", "precision", "other runtimes, median ms (precision)", "tvm-tuned ms", "x eager",
               "x fastest other", "trials", "tune s", "benchmark s"]
    table = tabulate.tabulate(rows, headers=headers, tablefmt="github", floatfmt=".3f", missingval="-")
    on = f", {device}" if device else ""  # no benchmark finished: no device to name
    text = f"Medians of interleaved rounds, batch 1{on}, {time.strftime('%Y-%m-%d')}\n\n{table}\n"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(text)
    return text


if __name__ == "__main__":
    main()
