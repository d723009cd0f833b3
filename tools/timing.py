"""Timing what runs: whole models in interleaved rounds, a build's functions one by one, and
how close a build's outputs are to PyTorch eager's.

``time_interleaved`` times each runtime in blocks, one block per runtime a round, with a pause
before each (thread pools that keep spinning after a call would otherwise steal the cores from
the next runtime). A block is as many calls as fill ``BLOCK_S`` (an autorange, as
``torch.utils.benchmark`` does), so fast and slow models are timed alike.
"""

from __future__ import annotations

import collections
import inspect
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .runtimes import Runtime, openvino_model

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


@dataclass
class FunctionTime:
    """One function of a build, per model run: how often it is called, its time inside the
    model, its time called again at once (operands in cache; ``None`` for VM builtins), both
    medians over runs, and the fastest run's time, in the model or again (``fastest_ms``)."""

    calls: float
    ms: float
    hot_ms: float | None
    fastest_ms: float | None = None


def function_times(exe: Any, target: Any, model: Any, runs: int = 5) -> dict[str, FunctionTime]:
    """Each function's time in a build, per model run, through the VM's instrumentation hook
    around every call it makes: the median over ``runs`` runs, after one run that is not
    counted (the first pays for thread pools, page faults and cold caches). ``hot_ms``: each
    kernel called again at once with the same arguments; what ``ms`` has above it is the time the
    kernel spends fetching its inputs and weights from memory inside the model. VM builtins are
    not called twice."""
    import tvm

    from tvm import relax

    dev = tvm.cuda() if target.kind.name == "cuda" else tvm.cpu()
    vm = relax.VirtualMachine(exe, dev)
    per_run: list[dict[str, list]] = []
    started: dict[str, float] = {}

    def instrument(func, symbol, before_run, ret_value, *args):
        if before_run:
            started[symbol] = time.perf_counter()
            return 0
        dev.sync()
        kernel = not symbol.startswith("vm.builtin.")
        entry = per_run[-1].setdefault(symbol, [0, 0.0, 0.0 if kernel else None])
        entry[0] += 1
        entry[1] += time.perf_counter() - started.pop(symbol, time.perf_counter())
        if kernel:
            start = time.perf_counter()
            func(*args)
            dev.sync()
            entry[2] += time.perf_counter() - start
        return 0

    args = [tvm.runtime.tensor(t.numpy(), dev) for t in model.inputs]
    vm["main"](*args)  # the warm-up, not counted
    vm.set_instrument(tvm.runtime.convert(instrument) if hasattr(tvm.runtime, "convert") else instrument)
    for _ in range(runs):
        per_run.append({})
        vm["main"](*args)

    def ms(name: str, column: int, reduce: Any = np.median) -> float:
        return 1e3 * float(reduce([run[name][column] for run in per_run if name in run]))

    return {name: FunctionTime(calls, ms(name, 1), None if hot is None else ms(name, 2),
                               min(ms(name, 1, np.min), ms(name, 2, np.min)) if hot is not None else None)
            for name, (calls, _, hot) in per_run[-1].items()}


def format_profile(times: dict[str, FunctionTime]) -> str:
    """``function_times`` as CSV (name, calls per run, ms per run, share, hot ms per run), the
    slowest first."""
    grand = sum(t.ms for t in times.values()) or 1.0
    lines = ["name,calls,total_ms,share,hot_ms"]
    for name, t in sorted(times.items(), key=lambda kv: -kv[1].ms):
        hot_ms = "" if t.hot_ms is None else f"{t.hot_ms:.4f}"
        lines.append(f"{name},{t.calls:g},{t.ms:.4f},{t.ms / grand:.4f},{hot_ms}")
    return "\n".join(lines) + "\n"


SLOWER_THAN_RECORDS = 2.0  # a function this many times slower in the model than its record is reported
CALL_OVERHEAD_MS = 0.05  # ... when it also costs this much more per call (the profile's own overhead, a call from Python)


def slower_than_records(times: dict[str, FunctionTime], built: dict[str, Any]) -> list[tuple[str, float, float]]:
    """The functions of a tuned build that run more than ``SLOWER_THAN_RECORDS`` times slower in
    the model than the records it was built from say (calls x the record's cost; ``built``: each
    function's record's ``MeasureResult``, as ``ApplyHistoryBest.built`` notes them): records
    from another machine, damaged or edited ones. (name, measured ms, predicted ms) per run, the
    costliest first. Each kernel is judged by its fastest run, in the model or called again at
    once (a busy machine slows some runs, never all), less the profile's own overhead per call."""
    slow = []
    for symbol, t in times.items():
        name = symbol.removesuffix("_prepacked")  # the build's name for a kernel whose weights are pre-laid-out
        if name in built and t.fastest_ms is not None:
            predicted, measured = 1e3 * t.calls * built[name].mean_cost, t.fastest_ms
            if measured > SLOWER_THAN_RECORDS * predicted + CALL_OVERHEAD_MS * t.calls:
                slow.append((symbol, measured, predicted))
    return sorted(slow, key=lambda item: item[2] - item[1])


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


def cosine(got: list[np.ndarray], expected: list[np.ndarray]) -> float:
    """The smallest cosine similarity between an output and its expected value (1: the same
    direction), the accuracy measure of reduced-precision builds (embeddings, logits)."""
    worst = 1.0
    for g, e in zip(got, expected):
        g, e = np.ravel(np.asarray(g, np.float64)), np.ravel(np.asarray(e, np.float64))
        norms = float(np.linalg.norm(g) * np.linalg.norm(e))
        if g.shape == e.shape and g.size and norms > 0:
            worst = min(worst, float(np.dot(g, e)) / norms)
        elif g.shape != e.shape:
            return 0.0
    return worst


def accuracy(runtime: Runtime, expected: list, run: Any) -> dict:
    """How close a runtime's outputs are to PyTorch eager's in float32: the largest error relative
    to the output's scale, the smallest cosine similarity, and whether they match: within ``rtol``
    and ``atol`` for a float32 runtime, at least ``min_cosine`` for a reduced-precision one."""
    got = runtime.outputs()
    error, within = compare_outputs(got, expected, run.rtol, run.atol)
    similarity = cosine(got, expected)
    ok = within if runtime.precision == "float32" else similarity >= run.min_cosine
    return {"max_rel_error": error, "cosine": similarity, "matches_pytorch": ok}


def profile_pytorch(model: Any, where: Any, runs: int = 10, rows: int = 25) -> str:
    """PyTorch eager's own profile (``torch.profiler``), grouped by input shape: its operators'
    time per call where the benchmark runs it (``where``, a ``runtimes.Placement``: on a GPU, in
    the run's precision, sorted by the time of its CUDA kernels), to set beside a TVM build's
    ``function_times``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from .runtimes import torch_module_and_inputs

    torch.set_num_threads(where.threads)
    module, inputs = torch_module_and_inputs(model, where)
    gpu = where.device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with torch.no_grad():
        for _ in range(5):
            module(*inputs)
        # one cycle: acc_events only keeps PyTorch from warning that it keeps just the last one
        keep = {"acc_events": True} if "acc_events" in inspect.signature(profile).parameters else {}
        with profile(activities=activities, record_shapes=True, **keep) as prof:
            for _ in range(runs):
                module(*inputs)
            if gpu:
                torch.cuda.synchronize()
    return prof.key_averages(group_by_input_shape=True).table(
        sort_by="self_device_time_total" if gpu else "self_cpu_time_total", row_limit=rows,
        max_name_column_width=30, max_shapes_column_width=60)


def profile_openvino(model: Any, where: Any, runs: int = 10, rows: int = 25) -> str:
    """OpenVINO's performance counters summed per layer type (ms per inference, with the kernels
    it chose and their precision), compiled as the benchmark's ``openvino`` variant (its default
    precision)."""
    request = openvino_model(model, where.threads, None, {"PERF_COUNT": "YES"}).create_infer_request()
    inputs = [x.numpy() for x in model.inputs]
    for _ in range(5):
        request.infer(inputs)
    totals: dict[str, list] = collections.defaultdict(lambda: [0, 0.0, set()])
    for _ in range(runs):
        request.infer(inputs)
        for layer in request.get_profiling_info():
            if layer.status.name == "EXECUTED":
                entry = totals[layer.node_type]
                entry[0] += 1
                entry[1] += layer.real_time.total_seconds() * 1e3
                entry[2].add(layer.exec_type)
    grand = sum(entry[1] for entry in totals.values()) / runs
    lines = [f"{'layer type':20} {'calls':>6} {'ms':>8}  kernels", f"{'all':20} {'':>6} {grand:8.3f}"]
    for kind, (calls, ms, kernels) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:rows]:
        lines.append(f"{kind:20} {calls // runs:6d} {ms / runs:8.3f}  {', '.join(sorted(kernels))}")
    return "\n".join(lines)
