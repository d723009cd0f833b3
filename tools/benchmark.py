"""``driver.py -m=benchmark``: the tuned model against what a user would otherwise ship.

For each model, every variant of ``run_settings.variants`` (PyTorch eager, torch.compile, ONNX
Runtime, OpenVINO, TVM untuned and tuned; see ``tools.runtimes``) is prepared with the same
threads, and its outputs are checked against PyTorch eager's. Then all are timed in interleaved
rounds: each round times one block per variant, with a pause before each block (thread pools
that keep spinning after a call would otherwise steal the cores from the next runtime). A block
is as many calls as fill ``BLOCK_S`` (an autorange, as ``torch.utils.benchmark`` does), so fast
and slow models are timed alike. Reported: the median over rounds, min and max, the speed-up over
eager and over the fastest other variant. Writes a CSV, a JSON and a PNG of the medians;
``profile`` adds a per-function breakdown of each TVM build.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import time
from typing import Any

import numpy as np
import tabulate

import autotvm
from autotvm.env import AutoTVMError, device_exists, device_of, runtime_threads, use_runtime_threads

from .config import writable_dir
from .plots import bar_chart
from .runtimes import TVM_VARIANTS, Runtime, RuntimeUnavailable, prepare, tvm_runtime
from .tune import conv_options, load_program, log_path

BLOCK_S = 0.05  # a timed block lasts at least this long: short enough to interleave, long enough for the clock
PAUSE_S = 0.3  # idle time before each block, so the previous runtime's spinning workers go to sleep
NOISY_IQR = 0.15  # a variant whose rounds spread more than this (interquartile range / median) is reported noisy


def calls_per_block(call: Any, number: int | None) -> int:
    """``number`` if set, else the smallest 1-2-5 count whose block lasts ``BLOCK_S``."""
    if number:
        return number
    for count in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000):
        start = time.perf_counter()
        for _ in range(count):
            call()
        if time.perf_counter() - start >= BLOCK_S:
            return count
    return 10000


def time_interleaved(runtimes: list[Runtime], rounds: int, number: int | None) -> dict[str, dict]:
    """Per variant: the per-call seconds of each round, every variant timed once per round."""
    counts = {rt.variant: calls_per_block(rt.call, number) for rt in runtimes}
    samples: dict[str, list[float]] = {rt.variant: [] for rt in runtimes}
    for _ in range(rounds):
        for rt in runtimes:
            time.sleep(PAUSE_S)
            rt.call()  # wakes this runtime's own workers: the block times it warm, as in a serving loop
            count = counts[rt.variant]
            start = time.perf_counter()
            for _ in range(count):
                rt.call()
            samples[rt.variant].append((time.perf_counter() - start) / count)
    return {variant: {**_stats(secs), "calls_per_round": counts[variant]} for variant, secs in samples.items()}


def _stats(seconds: list[float]) -> dict:
    ms = np.array(seconds) * 1e3
    median = float(np.median(ms))
    q1, q3 = np.percentile(ms, [25, 75])
    return {"median_ms": median, "min_ms": float(ms.min()), "max_ms": float(ms.max()),
            "mean_ms": float(ms.mean()), "iqr_ratio": float((q3 - q1) / median) if median > 0 else 0.0,
            "rounds": len(ms)}


def profile_tvm(exe: Any, target: Any, model: Any, runs: int = 5) -> str:
    """Per-function time breakdown (CSV: name, calls, total ms per run, share, hot ms per run),
    timed through the VM's instrumentation hook around every call it makes.

    ``hot_ms``: each kernel called again at once with the same arguments, its operands still in
    cache. What ``total_ms`` has above it is the time the kernel spends fetching its inputs and
    weights from memory inside the model (MiniLM-BERT's matmuls: a fifth of their time). VM
    builtins are not called twice (their column is empty)."""
    import tvm

    from tvm import relax

    dev = tvm.cuda() if target.kind.name == "cuda" else tvm.cpu()
    vm = relax.VirtualMachine(exe, dev)
    totals: dict[str, list] = {}
    started: dict[str, float] = {}

    def instrument(func, symbol, before_run, ret_value, *args):
        if before_run:
            started[symbol] = time.perf_counter()
            return 0
        dev.sync()
        kernel = not symbol.startswith("vm.builtin.")
        entry = totals.setdefault(symbol, [0, 0.0, 0.0 if kernel else None])
        entry[0] += 1
        entry[1] += time.perf_counter() - started.pop(symbol, time.perf_counter())
        if kernel:
            start = time.perf_counter()
            func(*args)
            dev.sync()
            entry[2] += time.perf_counter() - start
        return 0

    vm.set_instrument(tvm.runtime.convert(instrument) if hasattr(tvm.runtime, "convert") else instrument)
    args = [tvm.runtime.tensor(t.numpy(), dev) for t in model.inputs]
    for _ in range(runs):
        vm["main"](*args)
    grand = sum(v[1] for v in totals.values()) or 1.0
    lines = ["name,calls,total_ms,share,hot_ms"]
    for name, (calls, secs, hot) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        hot_ms = "" if hot is None else f"{1e3 * hot / runs:.4f}"
        lines.append(f"{name},{calls},{1e3 * secs / runs:.4f},{secs / grand:.4f},{hot_ms}")
    return "\n".join(lines) + "\n"


def compare_outputs(got: list[np.ndarray], expected: list[np.ndarray], rtol: float,
                    atol: float) -> tuple[float, bool]:
    """(max error relative to the output's scale, whether every output matches).

    An element matches if ``|got - expected| <= rtol * |expected| + atol * max|expected|``: the
    absolute part scales with the output, so outputs near zero (random-weight logits, layer-norm
    centred features) neither fail on rounding nor pass because everything is small."""
    if len(got) != len(expected):
        return float("inf"), False
    worst, ok = 0.0, True
    for g, e in zip(got, expected):
        g, e = np.asarray(g, dtype=np.float64), np.asarray(e, dtype=np.float64)
        if g.shape != e.shape:
            return float("inf"), False
        if not g.size:
            continue
        scale = float(np.max(np.abs(e))) or 1.0
        diff = np.abs(g - e)
        worst = max(worst, float(np.max(diff)) / scale)
        ok = ok and bool(np.all(diff <= rtol * np.abs(e) + atol * scale))
    return worst, ok


def benchmark_models(config: dict) -> list[dict]:
    settings = config["autotuner_settings"]
    out_dir = writable_dir(settings["save_path"], "autotuner_settings.save_path")
    target = autotvm.make_target(config["target"])
    if not device_exists(target):
        raise AutoTVMError(f"config key target: benchmark runs the models on this machine, which has no "
                           f"{device_of(target)} device for {target.kind.name!r}")
    threads = runtime_threads(target)  # every runtime gets the target's cores
    use_runtime_threads(threads)
    rows: list[dict] = []
    for spec in config["models"]:
        rows += _benchmark_model(spec, config, target, threads, out_dir)
    _write(rows, out_dir, settings["save_name"], threads)
    return rows


def _benchmark_model(spec: dict, config: dict, target: Any, threads: int, out_dir: str) -> list[dict]:
    """Prepare every variant of one model, check its outputs, then time them all interleaved."""
    settings, run = config["autotuner_settings"], config["run_settings"]
    model, mod, params = load_program(spec)
    expected = model.torch_outputs()
    log = log_path(settings, spec["name"])
    runtimes, checks = [], {}
    for variant in run["variants"]:
        runtime = _prepare(variant, spec, model, mod, params, target, threads, log, out_dir, run["profile"])
        if runtime is None:
            continue
        error, ok = compare_outputs(runtime.outputs(), expected, run["rtol"], run["atol"])
        if not ok:
            print(f"WARNING: {spec['name']} {variant}: outputs differ from PyTorch eager beyond rtol={run['rtol']}, "
                  f"atol={run['atol']} x max|output| (max error {error:.3g} of the output's scale)")
        runtimes.append(runtime)
        checks[variant] = {"max_rel_error": error, "matches_pytorch": ok}
    print(f"== {spec['name']}: timing {', '.join(rt.variant for rt in runtimes)} in {run['repeat']} interleaved "
          f"rounds, {threads} threads each", flush=True)
    timings = time_interleaved(runtimes, run["repeat"], run["number"])
    rows = []
    for rt in runtimes:
        stats = timings[rt.variant]
        if stats["iqr_ratio"] > NOISY_IQR:
            print(f"WARNING: {spec['name']} {rt.variant}: timing is noisy (rounds spread {100 * stats['iqr_ratio']:.0f}% "
                  f"of the median); close other programs or raise run_settings.repeat")
        rows.append({"model": spec["name"], "variant": rt.variant, **stats, **checks[rt.variant]})
    return rows


def _prepare(variant: str, spec: dict, model: Any, mod: Any, params: dict, target: Any, threads: int, log: str,
             out_dir: str, profile: bool) -> Runtime | None:
    """The variant's runtime, or None with a one-line note when it cannot run here."""
    if variant not in TVM_VARIANTS:
        try:
            return prepare(variant, model, threads)
        except RuntimeUnavailable as why:
            print(f"note: {spec['name']}: {variant} skipped: {why}")
            return None
    if variant == "tvm-tuned" and not os.path.exists(log):
        print(f"note: {spec['name']}: tvm-tuned skipped: no records at {log}; run -m=tune first")
        return None
    with autotvm.apply_history_best(log) if variant == "tvm-tuned" else contextlib.nullcontext():
        exe = autotvm.build_program(mod, target, params, **conv_options(spec))
    if profile:
        path = os.path.join(out_dir, f"{os.path.basename(log)[:-5]}-{variant}-profile.csv")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(profile_tvm(exe, target, model))
    return tvm_runtime(variant, exe, target, model)


def speedups(rows: list[dict]) -> None:
    """Add to each row its speed-up over PyTorch eager and over the fastest other variant of its
    model (for the tuned build: against the best a user could run instead)."""
    for row in rows:
        mine = [r for r in rows if r["model"] == row["model"]]
        eager = next((r["median_ms"] for r in mine if r["variant"] == "pytorch-eager"), float("nan"))
        others = [r["median_ms"] for r in mine if r["variant"] != row["variant"]
                  and not (row["variant"] in TVM_VARIANTS and r["variant"] in TVM_VARIANTS)]
        row["speedup_over_eager"] = eager / row["median_ms"]
        row["speedup_over_fastest_other"] = min(others) / row["median_ms"] if others else float("nan")


def _write(rows: list[dict], out_dir: str, name: str, threads: int) -> None:
    if not rows:
        print("nothing was timed")
        return
    speedups(rows)
    base = os.path.join(out_dir, f"{name}-benchmark")
    with open(base + ".json", "w", encoding="utf-8") as handle:
        json.dump(rows, handle, indent=1)
    with open(base + ".csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    bar_chart(rows, base + ".png", f"batch inference, {threads} threads per runtime")
    table = [[r["model"], r["variant"], r["median_ms"], r["min_ms"], r["max_ms"], r["speedup_over_eager"],
              r["speedup_over_fastest_other"], "yes" if r["matches_pytorch"] else "NO"] for r in rows]
    print()
    print(tabulate.tabulate(table, headers=["model", "variant", "median ms", "min ms", "max ms", "x eager",
                                            "x fastest other", "matches eager"],
                            floatfmt=("", "", ".3f", ".3f", ".3f", ".2f", ".2f", "")))
    print("x fastest other: the fastest other runtime's median over this one's (TVM rows: against the "
          "non-TVM runtimes); > 1 is faster")
    print(f"wrote {base}.csv, {base}.json and {base}.png")
