"""``driver.py -m=benchmark``: the tuned model against what a user would otherwise ship.

For each model, every variant of ``run_settings.variants`` (PyTorch eager, torch.compile, ONNX
Runtime, OpenVINO, TVM untuned and tuned; see ``tools.runtimes``) is prepared with the same
threads, and its outputs are checked against PyTorch eager's. Then all are timed in interleaved
rounds (``tools.timing``). Reported: the median over rounds, min and max, the speed-up over
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

import tabulate

import autotvm
from autotvm.checks import AutoTVMError
from autotvm.env import device_exists, device_of, runtime_threads, use_runtime_threads

from .models import ModelSpec, build_model, load_program
from .plots import bar_chart
from .runtimes import TVM_VARIANTS, Runtime, RuntimeUnavailable, prepare, tvm_runtime
from .saved_runs import writable_dir
from .settings import Config
from .timing import (NOISY_IQR, compare_outputs, profile_openvino, profile_pytorch, profile_tvm,
                     time_interleaved)

def benchmark_models(config: Config) -> list[dict]:
    settings = config.autotuner_settings
    out_dir = writable_dir(settings.save_path, "autotuner_settings.save_path")
    target = autotvm.make_target(config.target)
    if not device_exists(target):
        raise AutoTVMError(f"config key target: benchmark runs the models on this machine, which has no "
                           f"{device_of(target)} device for {target.kind.name!r}")
    threads = runtime_threads(target)  # every runtime gets the target's cores
    use_runtime_threads(threads)
    rows: list[dict] = []
    for spec in config.models:
        rows += _benchmark_model(spec, config, target, threads, out_dir)
    _write(rows, out_dir, settings.save_name, threads)
    return rows


def _benchmark_model(spec: ModelSpec, config: Config, target: Any, threads: int, out_dir: str) -> list[dict]:
    """Prepare every variant of one model, check its outputs, then time them all interleaved."""
    run = config.run_settings
    model, mod, params = load_program(spec)
    expected = model.torch_outputs()
    log = config.autotuner_settings.log_path(spec.name)
    runtimes, checks = [], {}
    for variant in run.variants:
        runtime = _prepare(variant, spec, model, mod, params, target, threads, log, out_dir, run.profile)
        if runtime is None:
            continue
        error, ok = compare_outputs(runtime.outputs(), expected, run.rtol, run.atol)
        if not ok:
            print(f"WARNING: {spec.name} {variant}: outputs differ from PyTorch eager beyond rtol={run.rtol}, "
                  f"atol={run.atol} x max|output| (max error {error:.3g} of the output's scale)")
        runtimes.append(runtime)
        checks[variant] = {"max_rel_error": error, "matches_pytorch": ok}
    print(f"== {spec.name}: timing {', '.join(rt.variant for rt in runtimes)} in {run.repeat} interleaved "
          f"rounds, {threads} threads each", flush=True)
    timings = time_interleaved(runtimes, run.repeat, run.number)
    rows = []
    for rt in runtimes:
        stats = timings[rt.variant]
        if stats["iqr_ratio"] > NOISY_IQR:
            print(f"WARNING: {spec.name} {rt.variant}: timing is noisy (rounds spread {100 * stats['iqr_ratio']:.0f}% "
                  f"of the median); close other programs or raise run_settings.repeat")
        rows.append({"model": spec.name, "variant": rt.variant, **stats, **checks[rt.variant]})
    return rows


def _prepare(variant: str, spec: ModelSpec, model: Any, mod: Any, params: dict, target: Any, threads: int, log: str,
             out_dir: str, profile: bool) -> Runtime | None:
    """The variant's runtime, or None with a one-line note when it cannot run here."""
    if variant not in TVM_VARIANTS:
        try:
            runtime = prepare(variant, model, threads)
        except RuntimeUnavailable as why:
            print(f"note: {spec.name}: {variant} skipped: {why}")
            return None
        if profile and variant in RUNTIME_PROFILES:  # the runtime's own profile, to set beside TVM's
            _write_profile(out_dir, log, variant, "txt", RUNTIME_PROFILES[variant](model, threads))
        return runtime
    if variant == "tvm-tuned" and not os.path.exists(log):
        print(f"note: {spec.name}: tvm-tuned skipped: no records at {log}; run -m=tune first")
        return None
    with autotvm.apply_history_best(log) if variant == "tvm-tuned" else contextlib.nullcontext():
        exe = build_model(spec, mod, params, target)
    if profile:
        _write_profile(out_dir, log, variant, "csv", profile_tvm(exe, target, model))
    return tvm_runtime(variant, exe, target, model)


RUNTIME_PROFILES = {"pytorch-eager": profile_pytorch, "openvino": profile_openvino}


def _write_profile(out_dir: str, log: str, variant: str, suffix: str, text: str) -> None:
    """``<save_name>-<model>-<variant>-profile.<suffix>`` beside the benchmark's outputs."""
    path = os.path.join(out_dir, f"{os.path.basename(log)[:-5]}-{variant}-profile.{suffix}")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


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
