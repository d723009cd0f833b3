"""``driver.py -m=benchmark``: untuned TVM, tuned TVM and PyTorch eager, side by side.

For each model: TVM's outputs are checked against PyTorch's within tolerance, then inference is
timed (mean, median, std over ``repeat`` runs of ``number`` calls each) for PyTorch eager
(``no_grad``, after a warm-up) and for TVM's Relax VM built without and with the model's
records. Writes a CSV, a JSON and a bar chart PNG; ``profile`` adds a per-function breakdown.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import statistics
import time
from typing import Any

import numpy as np
import tabulate

import autotvm
from autotvm.env import AutoTVMError, device_exists, device_of

from .config import writable_dir
from .plots import bar_chart
from .tune import conv_options, load_program, log_path


def _stats(seconds: list[float]) -> dict:
    ms = [s * 1e3 for s in seconds]
    return {"mean_ms": statistics.mean(ms), "median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms),
            "std_ms": statistics.stdev(ms) if len(ms) > 1 else 0.0}


def time_torch(model: Any, number: int, repeat: int) -> dict:
    import torch

    with torch.no_grad():
        for _ in range(3):
            model.module(*model.inputs)
        runs = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                model.module(*model.inputs)
            runs.append((time.perf_counter() - start) / number)
    return _stats(runs)


def _vm(exe: Any, target: Any) -> tuple[Any, Any]:
    import tvm
    from tvm import relax

    dev = tvm.cuda() if target.kind.name == "cuda" else tvm.cpu()
    return relax.VirtualMachine(exe, dev), dev


def run_tvm(exe: Any, target: Any, model: Any, number: int, repeat: int) -> tuple[list[np.ndarray], dict]:
    """Outputs and timing of a built Relax module on the model's example inputs."""
    import tvm

    vm, dev = _vm(exe, target)
    args = [tvm.runtime.tensor(t.numpy(), dev) for t in model.inputs]
    out = vm["main"](*args)
    outputs = [o.numpy() for o in _flatten_tvm(out)]
    timer = vm.time_evaluator("main", dev, number=number, repeat=repeat)
    return outputs, _stats(list(timer(*args).results))


def _flatten_tvm(out: Any) -> list:
    if hasattr(out, "numpy"):
        return [out]
    return [t for item in out for t in _flatten_tvm(item)]


def profile_tvm(exe: Any, target: Any, model: Any, runs: int = 5) -> str:
    """Per-function time breakdown (CSV: name, calls, total ms, share), timed through the VM's
    instrumentation hook around every call it makes."""
    import tvm

    vm, dev = _vm(exe, target)
    totals: dict[str, list] = {}
    started: dict[str, float] = {}

    def instrument(func, symbol, before_run, ret_value, *args):
        if before_run:
            started[symbol] = time.perf_counter()
        else:
            dev.sync()
            entry = totals.setdefault(symbol, [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - started.pop(symbol, time.perf_counter())
        return 0

    vm.set_instrument(tvm.runtime.convert(instrument) if hasattr(tvm.runtime, "convert") else instrument)
    args = [tvm.runtime.tensor(t.numpy(), dev) for t in model.inputs]
    for _ in range(runs):
        vm["main"](*args)
    grand = sum(v[1] for v in totals.values()) or 1.0
    lines = ["name,calls,total_ms,share"]
    for name, (calls, secs) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"{name},{calls},{1e3 * secs / runs:.4f},{secs / grand:.4f}")
    return "\n".join(lines) + "\n"


def compare_outputs(got: list[np.ndarray], expected: list[np.ndarray], rtol: float, atol: float) -> tuple[float, bool]:
    """(max abs difference, whether every output matches PyTorch within tolerance)."""
    if not got or len(got) < len(expected[:1]):
        return float("inf"), False
    worst, ok = 0.0, True
    for g, e in zip(got, expected):
        if g.shape != e.shape:
            return float("inf"), False
        worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - e))) if g.size else 0.0)
        ok = ok and bool(np.allclose(g, e, rtol=rtol, atol=atol))
    return worst, ok


def benchmark_models(config: dict) -> list[dict]:
    settings, run = config["autotuner_settings"], config["run_settings"]
    out_dir = writable_dir(settings["save_path"], "autotuner_settings.save_path")
    target = autotvm.make_target(config["target"])
    if not device_exists(target):
        raise AutoTVMError(f"config key target: benchmark runs the models on this machine, which has no "
                           f"{device_of(target)} device for {target.kind.name!r}")
    rows = []
    for spec in config["models"]:
        model, mod, params = load_program(spec)
        expected = model.torch_outputs()
        rows.append({"model": spec["name"], "variant": "pytorch-eager", **time_torch(model, run["number"], run["repeat"]),
                     "max_abs_error": 0.0, "matches_pytorch": True})
        log = log_path(settings, spec["name"])
        variants = [("tvm-untuned", None)] + ([("tvm-tuned", log)] if os.path.exists(log) else [])
        for variant, records in variants:
            with autotvm.apply_history_best(records) if records else contextlib.nullcontext():
                exe = autotvm.build_program(mod, target, params, **conv_options(spec))
            outputs, stats = run_tvm(exe, target, model, run["number"], run["repeat"])
            error, ok = compare_outputs(outputs, expected, run["rtol"], run["atol"])
            if not ok:
                print(f"WARNING: {spec['name']} {variant}: outputs differ from PyTorch beyond rtol={run['rtol']}, "
                      f"atol={run['atol']} (max abs error {error:.3g})")
            rows.append({"model": spec["name"], "variant": variant, **stats, "max_abs_error": error,
                         "matches_pytorch": ok})
            if run["profile"]:
                path = os.path.join(out_dir, f"{settings['save_name']}-{spec['name']}-{variant}-profile.csv")
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(profile_tvm(exe, target, model))
        if not os.path.exists(log):
            print(f"note: no records for {spec['name']} at {log}; run -m=tune first to benchmark a tuned build")
    _write(rows, out_dir, settings["save_name"])
    return rows


def _write(rows: list[dict], out_dir: str, name: str) -> None:
    base = os.path.join(out_dir, f"{name}-benchmark")
    with open(base + ".json", "w", encoding="utf-8") as handle:
        json.dump(rows, handle, indent=1)
    with open(base + ".csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    bar_chart(rows, base + ".png")
    eager = {r["model"]: r["median_ms"] for r in rows if r["variant"] == "pytorch-eager"}
    table = [[r["model"], r["variant"], r["median_ms"], r["min_ms"], r["max_ms"],
              eager[r["model"]] / r["median_ms"] if r["median_ms"] > 0 else float("nan"), r["max_abs_error"],
              "yes" if r["matches_pytorch"] else "NO"] for r in rows]
    print()
    print(tabulate.tabulate(table, headers=["model", "variant", "median ms", "min ms", "max ms", "speed-up over eager",
                                            "max abs error", "matches"], floatfmt=("", "", ".3f", ".3f", ".3f", ".2f",
                                                                                   ".2g", "")))
    print(f"wrote {base}.csv, {base}.json and {base}.png")
