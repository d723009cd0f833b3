"""``driver.py -m=benchmark``: the tuned model against what a user would otherwise ship.

For each model, every variant of ``run_settings.variants`` (PyTorch eager, torch.compile, ONNX
Runtime, OpenVINO, TVM untuned and tuned; see ``tools.runtimes``) is prepared with the same
threads, and its outputs are checked against PyTorch eager's. Then all are timed in interleaved
rounds (``tools.timing``). Reported: the median over rounds, min and max, the speed-up over
eager and over the fastest other variant. Writes each model's CSV, JSON and PNG of the medians
beside its records (``<save_name>-<model>-benchmark.*``, as its log is ``<save_name>-<model>.json``:
configs that share a ``save_name`` keep each other's results); ``profile`` adds a per-function
breakdown of each TVM build.
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
from .runtimes import (SHORT, TUNED_FROM, VARIANTS, Placement, Runtime, RuntimeUnavailable, is_tvm, prepare,
                       tvm_runtime)
from .saved_runs import writable_dir
from .settings import Config, replace
from .timing import (NOISY_IQR, SLOWER_THAN_RECORDS, accuracy, format_profile, function_times, profile_openvino,
                     profile_pytorch, slower_than_records, time_interleaved)

def benchmark_models(config: Config) -> list[dict]:
    settings, run = config.autotuner_settings, config.run_settings
    out_dir = writable_dir(settings.save_path, "autotuner_settings.save_path")
    target = autotvm.make_target(config.target)
    if not device_exists(target):
        raise AutoTVMError(f"config key target: benchmark runs the models on this machine, which has no "
                           f"{device_of(target)} device for {target.kind.name!r}")
    threads = runtime_threads(target)  # every runtime gets the target's cores
    use_runtime_threads(threads)
    where = Placement(device_of(target), threads, run.precision)
    device = device_name(target)
    print(f"== benchmark on {device}, {run.precision}" + (f", {threads} threads per runtime" if where.device == "cpu"
                                                          else ""), flush=True)
    rows: list[dict] = []
    for spec in config.models:
        rows += [dict(row, device=device) for row in _benchmark_model(spec, config, target, where, out_dir)]
    _write(rows, settings, f"{device}, {run.precision}" + (
        f", {threads} threads per runtime" if where.device == "cpu" else ""))
    return rows


def device_name(target: Any) -> str:
    """The device a target's code runs on, by name: the GPU's, or the CPU's with its cores."""
    import tvm

    if target.kind.name == "cuda":
        return str(tvm.cuda(0).device_name)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo", encoding="utf-8")
                if line.startswith("model name")), "CPU") if os.path.exists("/proc/cpuinfo") else "CPU"
    return f"{cpu} ({runtime_threads(target)} cores)"


def _benchmark_model(spec: ModelSpec, config: Config, target: Any, where: Placement, out_dir: str) -> list[dict]:
    """Prepare every variant of one model, check its outputs, then time them all interleaved."""
    run = config.run_settings
    start = time.perf_counter()
    model, mod, params = load_program(spec)
    expected = model.torch_outputs()  # float32 on the CPU: what every variant is checked against
    loaded = time.perf_counter() - start
    log = config.autotuner_settings.log_path(spec.name)
    runtimes, checks, ready = [], {}, {}
    for variant in run.variants or default_variants(where.device):
        start = time.perf_counter()
        runtime = _prepare(variant, spec, model, mod, params, target, where, log, out_dir, run.profile,
                           records_of(variant, config.autotuner_settings, spec.name))
        if runtime is None:
            continue
        checks[variant] = accuracy(runtime, expected, run)  # a first call: torch.compile compiles here
        ready[variant] = time.perf_counter() - start  # built or compiled, and checked
        if not checks[variant]["matches_pytorch"]:
            print(f"WARNING: {spec.name} {variant}: outputs differ from PyTorch eager in float32 beyond "
                  + (f"rtol={run.rtol}, atol={run.atol} x max|output|" if runtime.precision == "float32"
                     else f"a cosine similarity of {run.min_cosine}")
                  + f" (max error {checks[variant]['max_rel_error']:.3g} of the output's scale, cosine "
                  f"{checks[variant]['cosine']:.5f})")
        runtimes.append(runtime)
    if not runtimes:
        print(f"== {spec.name}: no variant to time (each one's note above says why)", flush=True)
        return []
    print(f"== {spec.name}: model loaded in {loaded:.1f} s; each variant ready (built or compiled, and checked) in: "
          + ", ".join(f"{variant} {seconds:.1f} s" for variant, seconds in ready.items()), flush=True)
    print(f"== {spec.name}: timing {', '.join(rt.variant for rt in runtimes)} in {run.repeat} interleaved rounds",
          flush=True)
    start = time.perf_counter()
    timings = time_interleaved(runtimes, run.repeat, run.number)
    print(f"== {spec.name}: timed in {time.perf_counter() - start:.1f} s", flush=True)
    rows = []
    for rt in runtimes:
        stats = timings[rt.variant]
        if stats["iqr_ratio"] > NOISY_IQR:
            print(f"WARNING: {spec.name} {rt.variant}: timing is noisy (rounds spread {100 * stats['iqr_ratio']:.0f}% "
                  f"of the median); close other programs or raise run_settings.repeat")
        rows.append({"model": spec.name, "variant": rt.variant, "precision": rt.precision, **stats,
                     **checks[rt.variant], "ready_seconds": ready[rt.variant]})
    return rows


def default_variants(device: str) -> tuple[str, ...]:
    """Every variant that runs on the device: on a GPU, PyTorch's and TVM's (OpenVINO runs on CPUs);
    on a CPU, all but torch.compile's CUDA graphs."""
    skip = {"cuda": ("openvino", "openvino-f32"), "cpu": ("torch-compile-cudagraphs",)}[device]
    return tuple(v for v in VARIANTS if v not in skip)


def records_of(variant: str, settings: Any, model: str) -> str | None:
    """The records a TVM variant builds with: the config's log for ``tvm-tuned``, another tune's
    (``TUNED_FROM`` its save_name) beside it, none for the others."""
    if variant.startswith(TUNED_FROM):
        return replace(settings, save_name=variant[len(TUNED_FROM):]).log_path(model)
    return settings.log_path(model) if variant == "tvm-tuned" else None


def _prepare(variant: str, spec: ModelSpec, model: Any, mod: Any, params: dict, target: Any, where: Placement,
             log: str, out_dir: str, profile: bool, records: str | None) -> Runtime | None:
    """The variant's runtime, or None with a one-line note when it cannot run here (``records``:
    the tuning records a TVM variant builds with, ``records_of``)."""
    if not is_tvm(variant):
        try:
            runtime = prepare(variant, model, where)
        except RuntimeUnavailable as why:
            print(f"note: {spec.name}: {variant} skipped: {why}")
            return None
        if profile and variant in RUNTIME_PROFILES:  # its own profile, beside TVM's
            _write_profile(out_dir, log, variant, "txt", RUNTIME_PROFILES[variant](model, where))
        return runtime
    tuned = records is not None
    if tuned and not os.path.exists(records):
        print(f"note: {spec.name}: {variant} skipped: no records at {records}; run -m=tune first"
              + (f" with autotuner_settings.save_name={variant[len(TUNED_FROM):]}" if variant != "tvm-tuned" else ""))
        return None
    with autotvm.apply_history_best(records) if tuned else contextlib.nullcontext() as best:
        exe = build_model(spec, mod, params, target, where.precision)
        # a GPU build replays its kernels as one CUDA graph: the profile times a build that launches each
        profiled = build_model(spec, mod, params, target, where.precision, cuda_graph=False) if (
            where.device == "cuda" and profile) else exe
    if profile or tuned:
        times = function_times(profiled, target, model)
        if profile:
            _write_profile(out_dir, log, variant, "csv", format_profile(times))
        if tuned:
            _warn_if_slower_than_records(f"{spec.name} {variant}", times, best.built, records)
    return tvm_runtime(variant, exe, target, model, where.precision)


RUNTIME_PROFILES = {"pytorch-eager": profile_pytorch, "openvino": profile_openvino}


def _write_profile(out_dir: str, log: str, variant: str, suffix: str, text: str) -> None:
    """``<save_name>-<model>-<variant>-profile.<suffix>`` beside the benchmark's outputs (another
    tune's variant named ``tvm-tuned-<its save_name>``)."""
    path = os.path.join(out_dir, f"{os.path.basename(log)[:-5]}-{variant.replace(':', '-')}-profile.{suffix}")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _warn_if_slower_than_records(name: str, times: dict, built: dict, log: str) -> None:
    """One warning naming the functions that run much slower in the tuned build than the records of
    ``log`` it was built with say (``built``: ``ApplyHistoryBest.built``)."""
    slow = slower_than_records(times, built)
    if slow:
        listed = ", ".join(f"{fn} {ms:.3f} ms against {pred:.3f}" for fn, ms, pred in slow[:4])
        print(f"WARNING: {name}: {len(slow)} function{'s' if len(slow) > 1 else ''} run more than "
              f"{SLOWER_THAN_RECORDS:g}x slower than the records at {log} say ({listed}{', ...' if len(slow) > 4 else ''}; "
              "per run): were the records measured on another machine, or edited?")


def speedups(rows: list[dict]) -> None:
    """Add to each row its speed-up over PyTorch eager and over the fastest other variant of its
    model (for the tuned build: against the best a user could run instead), naming that variant
    and its precision: the fastest other may compute in another precision than this row."""
    for row in rows:
        mine = [r for r in rows if r["model"] == row["model"]]
        eager = next((r["median_ms"] for r in mine if r["variant"] == "pytorch-eager"), float("nan"))
        others = [r for r in mine if r["variant"] != row["variant"]
                  and not (is_tvm(row["variant"]) and is_tvm(r["variant"]))]
        fastest = min(others, key=lambda r: r["median_ms"]) if others else None
        row["speedup_over_eager"] = eager / row["median_ms"]
        row["speedup_over_fastest_other"] = fastest["median_ms"] / row["median_ms"] if fastest else float("nan")
        row["fastest_other"] = f"{fastest['variant']} ({SHORT.get(fastest['precision'], fastest['precision'])})" \
            if fastest else ""


def results_path(settings: Any, model: str) -> str:
    """Where a model's benchmark goes, without its suffix: ``<save_path>/<save_name>-<model>-benchmark``."""
    return settings.log_path(model)[: -len(".json")] + "-benchmark"


def _write(rows: list[dict], settings: Any, subtitle: str) -> None:
    if not rows:
        print("nothing was timed")
        return
    speedups(rows)
    written = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        base = results_path(settings, model)
        with open(base + ".json", "w", encoding="utf-8") as handle:
            json.dump(mine, handle, indent=1)
        with open(base + ".csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(mine[0]))
            writer.writeheader()
            writer.writerows(mine)
        bar_chart(mine, base + ".png", f"batch inference, {subtitle}")
        written.append(base)
    table = [[r["model"], r["variant"], SHORT.get(r["precision"], r["precision"]), r["median_ms"], r["min_ms"],
              r["max_ms"], r["speedup_over_eager"], r["speedup_over_fastest_other"], r["fastest_other"],
              f"{'yes' if r['matches_pytorch'] else 'NO'} ({r['max_rel_error']:.1e})"] for r in rows]
    print()
    print(tabulate.tabulate(table, headers=["model", "variant", "precision", "median ms", "min ms", "max ms",
                                            "x eager", "x fastest other", "fastest other", "matches eager (error)"],
                            floatfmt=("", "", "", ".3f", ".3f", ".3f", ".2f", ".2f", "", "")))
    print(f"on {subtitle}; x fastest other: the fastest other runtime's median over this one's (TVM rows: against "
          "the non-TVM runtimes), > 1 is faster; it may run in another precision (named beside it); error: the "
          "largest difference from PyTorch eager in float32, relative to the output's scale")
    print("wrote " + "; ".join(f"{base}.csv, .json and .png" for base in written))
