"""Run tuners side by side on operator workloads and summarise the runs.

One run = one tuner, one op, one seed: its best-so-far GFLOPS after each trial, the final best,
the trials needed to reach 90% of its final best, and its overhead (time inside the tuner over
wall time). MetaSchedule's own search (``tune_tir``) runs under the same builder convention
(weight-layout rewrite removed) and the same evaluator settings.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import tempfile
import time
from functools import partial
from typing import Any, Callable, Iterable

import numpy as np
import scipy.stats
import tabulate
import tvm

import autotvm
from autotvm.env import load_tensor_intrinsics, use_runtime_threads

from .tuners import base_tuner, make_tuner
from .workloads import workload, workload_task


def machine_description() -> dict:
    """The CPU the runs are timed on. GFLOPS from different CPUs are not comparable (C1's best is
    ~50 GFLOPS on 2 Zen 3 cores, ~90 on 2 Zen 4 and ~180 on 2 Zen 5 cores), so result files carry
    it and a comparison refuses to resume on another machine."""
    fields: dict[str, str] = {}
    if os.path.exists("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags", "").split()
    return {"cpu": fields.get("model name", "unknown"), "family": fields.get("cpu family", "?"),
            "model": fields.get("model", "?"), "cores": os.cpu_count(),
            "vector": "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"}


def machine_label(machine: dict | None) -> str:
    """A short name for a ``machine_description`` ("unrecorded" for files written before it)."""
    if not machine:
        return "unrecorded"
    return f"{machine['cpu']} family {machine['family']} model {machine['model']}, {machine['cores']} cores, {machine['vector']}"


def check_one_machine(machines: Iterable[dict | None]) -> None:
    """Raise ``ValueError`` naming the machines when runs timed on more than one would be mixed
    (by pooling result files, or by resuming one on another machine)."""
    labels = {machine_label(machine) for machine in machines}
    if len(labels) > 1:
        raise ValueError(f"runs timed on different machines ({'; '.join(sorted(labels))}) cannot be mixed; "
                         "keep each machine's runs in their own files")


def trials_to_fraction(curve: list[float], fraction: float = 0.9) -> int | None:
    """1-based trial at which the best-so-far first reaches ``fraction`` of its final value."""
    if not curve or curve[-1] <= 0:
        return None
    goal = fraction * curve[-1]
    return next(i + 1 for i, v in enumerate(curve) if v >= goal)


def comparison_measure_option(n_parallel: int = 2, number: int = 3, repeat: int = 3, min_repeat_ms: int = 0) -> dict:
    """The measurement every tuner comparison uses (builds in ``n_parallel`` workers with a
    30 s limit; ``repeat`` timings of ``number`` runs each, with a 10 s limit), so that the
    runs of different benchmarks can be compared."""
    return autotvm.measure_option(autotvm.LocalBuilder(n_parallel=n_parallel, timeout=30),
                                  autotvm.LocalRunner(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                                                      timeout=10))


def run_tuner(op: str, tuner_name: str, seed: int, trials: int, measure_option: dict,
              options: dict | None = None, target: Any = "llvm", log_path: str | None = None,
              save_agent: str | None = None, tuner_factory: Callable[..., Any] | None = None) -> dict:
    """Tune ``op`` with one tuner and seed; returns the run's record (plain data). ``save_agent``:
    where to save a GA-DQN tuner's agents after the run (for a later task to start from).
    ``tuner_factory(task, seed=..., **options)`` builds a tuner that is not in the registry (a
    benchmark's own variant); ``tuner_name`` then only names the run."""
    task = workload_task(op, target)
    tuner = (tuner_factory or partial(make_tuner, tuner_name))(task, seed=seed, **(options or {}))
    callbacks = [autotvm.callback.log_to_file(log_path)] if log_path else []
    start = time.perf_counter()
    tuner.tune(trials, measure_option, callbacks=callbacks)
    wall = time.perf_counter() - start
    if save_agent:
        tuner.save(save_agent)
    curve = [h["best_flops"] / 1e9 for h in tuner.history]
    run = {"op": op, "tuner": tuner_name, "seed": seed, "trials": len(curve), "curve": curve,
           "indices": [h["index"] for h in tuner.history],
           "best_gflops": curve[-1] if curve else 0.0, "trials_to_90": trials_to_fraction(curve),
           "tuner_seconds": tuner.tuner_seconds, "wall_seconds": wall, "overhead": tuner.tuner_seconds / wall,
           "errors": sum(1 for h in tuner.history if h["error_no"])}
    if hasattr(tuner, "monitor"):
        run["monitor"] = tuner.monitor
    return run


def run_grid(out: str, seeds: Iterable[int], ops: list[str], tuners: list[str], trials: int | dict[str, int],
             measure_option: dict, options_for: Callable[[str, str], dict], ms_settings: dict,
             header: dict, factories: dict[str, Callable[..., Any]] | None = None) -> list[dict]:
    """Every (seed, op, tuner) run, saved to ``out`` after each one (with ``header``, e.g. the
    command's arguments, and the machine), so that a stopped comparison resumes where it stopped.
    ``tuner`` is a registry name, or NAME@LABEL for NAME with ``options_for(op, tuner)``, or a
    name of ``factories``, built by that factory (``run_tuner``'s ``tuner_factory``); runs
    already in ``out`` are kept if they were timed on this machine. ``trials``: one budget for
    every tuner, or a budget per tuner name."""
    machine, runs = machine_description(), []
    if os.path.exists(out):
        earlier = json.load(open(out))
        try:
            check_one_machine([earlier.get("machine"), machine] if earlier.get("runs") else [])
        except ValueError as err:
            raise ValueError(f"cannot resume {out}: {err}; pass a new --out") from None
        runs = earlier["runs"]
    done = {(r["op"], r["tuner"], r["seed"]) for r in runs}
    for seed in seeds:
        for op in ops:
            for name in tuners:
                if (op, name, seed) in done:
                    continue
                budget = trials[name] if isinstance(trials, dict) else trials
                if name == "metaschedule":
                    run = run_metaschedule(op, seed, budget, **ms_settings)
                else:
                    run = run_tuner(op, base_tuner(name), seed, budget, measure_option, options_for(op, name),
                                    tuner_factory=(factories or {}).get(name))
                run["tuner"] = name
                runs.append(run)
                print(f"{op:6} {name:16} seed {seed}: best {run['best_gflops']:7.2f} GFLOPS, "
                      f"{run['wall_seconds']:6.1f} s", flush=True)
                os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
                json.dump(header | {"machine": machine, "runs": runs}, open(out, "w"))
    return runs


def best_index_at(run: dict, trials: int | None = None) -> int | None:
    """The config index that was the run's best after its first ``trials`` trials (all of them by
    default; ``None`` if every one failed, or for a run that did not record its configs, such as
    MetaSchedule's): the trial at which the best-so-far reached its value then."""
    curve = run["curve"][:trials]
    if not curve or curve[-1] <= 0 or "indices" not in run:
        return None
    return run["indices"][curve.index(curve[-1])]


def measure_again(op: str, indices: list[int], rounds: int, measure_option: dict | None = None,
                  target: Any = "llvm", seed: int = 0) -> dict[int, list[float]]:
    """GFLOPS of each config of ``op``, measured ``rounds`` times (with ``measure_option``, by
    default ``comparison_measure_option()``), in a fresh random order each round so that no
    config is always timed first or last (0.0 for a failed measurement). A run's best is the
    largest of hundreds of noisy timings, so it reads high: on the Zen 4 machine by a median
    4-11% against the median of its timings again, but 1-2% against the fastest of them, since
    most outliers there are slow readings. Configs measured again together compare fairly."""
    task = workload_task(op, target)
    measure_batch = autotvm.measure.create_measure_batch(task, measure_option or comparison_measure_option())
    rng = np.random.default_rng(seed)
    gflops: dict[int, list[float]] = {index: [] for index in indices}
    for _ in range(rounds):
        order = [indices[i] for i in rng.permutation(len(indices))]
        for start in range(0, len(order), measure_batch.n_parallel):
            chunk = order[start: start + measure_batch.n_parallel]
            inputs = [autotvm.MeasureInput(task.target, task, task.config_space.get(index)) for index in chunk]
            for index, result in zip(chunk, measure_batch(inputs)):
                gflops[index].append(task.flop / result.mean_cost / 1e9 if result.ok else 0.0)
    return gflops


def remeasure_bests(runs: list[dict], rounds: int, done: dict[str, dict] | None = None,
                    save: Callable[[dict], None] | None = None, measure_option: dict | None = None,
                    bests: Callable[[dict], Iterable[int | None]] = lambda run: [best_index_at(run)],
                    target: Any = "llvm") -> dict[str, dict[str, list[float]]]:
    """Each op's configs ``bests(run)`` of every run (by default its final best; runs that did
    not record their configs give none) measured again together, ``rounds`` times:
    ``{op: {str(index): [GFLOPS per round]}}``. An op in ``done`` that already holds all of its
    configs is kept; one that lacks some (runs added since) is measured again whole, so that an
    op's configs are always timed in one pass. ``save`` is called after each op, so a stopped
    run keeps what it measured."""
    again = dict(done or {})
    for op in dict.fromkeys(run["op"] for run in runs):
        indices = sorted({i for run in runs if run["op"] == op for i in bests(run) if i is not None})
        if not indices or {str(i) for i in indices} <= set(again.get(op, {})):
            continue
        again[op] = {str(i): v for i, v in measure_again(op, indices, rounds, measure_option, target).items()}
        if save:
            save(again)
    return again


def remeasure_into(out: str, runs: list[dict], rounds: int, **options: Any) -> dict[str, dict[str, list[float]]]:
    """``remeasure_bests`` (``options``: its ``measure_option``, ``bests``, ``target``) for the
    runs of ``run_grid``'s result file ``out``: what the file already holds under
    ``"remeasured"`` is kept, and each op's measurements are written into it as they finish."""
    with open(out) as handle:
        data = json.load(handle)

    def save(again: dict) -> None:
        data["remeasured"] = again
        with open(out, "w") as handle:
            json.dump(data, handle)

    return remeasure_bests(runs, rounds, data.get("remeasured"), save, **options)


# how a config's timings again are read. The median is the speed a config typically gives; the
# fastest drops the slow readings (a shared machine's outliers are slow ones), and with them how
# unsteady the config is, in which the tuners' bests differ
STATISTICS: dict[str, Callable[[list[float]], float]] = {"median": statistics.median, "fastest": max}


def remeasured_runs(runs: list[dict], again: dict[str, dict[str, list[float]]],
                    statistic: str = "median") -> list[dict]:
    """The runs whose best config was measured again, with ``best_gflops`` the ``statistic``
    ("median" or "fastest", see ``STATISTICS``) of those measurements (for ``summarise`` and the
    ratios). The two read the same runs up to 5 points apart on the Zen 4 machine; a comparison
    quotes one and says which."""
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; allowed: {', '.join(STATISTICS)}")
    out = []
    for run in runs:
        index = best_index_at(run)
        values = again.get(run["op"], {}).get(str(index))
        if values:
            out.append(run | {"best_gflops": STATISTICS[statistic](values)})
    return out


def remeasured_ratio_lines(runs: list[dict], again: dict[str, dict[str, list[float]]],
                           pairs: Iterable[tuple[str, str]], statistic: str = "median") -> list[str]:
    """``ratio_lines`` over the runs compared on their best configs measured again, read by
    ``statistic`` (see ``remeasured_runs``)."""
    measured = remeasured_runs(runs, again, statistic)
    return ratio_lines(summarise(measured), measured, pairs)


def ms_fast_build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default build minus its import of the tensor intrinsics (~50 s per worker)."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def quiet_metaschedule() -> None:
    """Keep MetaSchedule's console output to warnings: it prints every task's table and its cost
    model's training; the whole log still goes to the ``logs/`` folder of its work dir."""
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)


def run_metaschedule(op: str, seed: int, trials: int, number: int, repeat: int, min_repeat_ms: int,
                     n_parallel: int, target: Any = "llvm", fast_build: bool = True) -> dict:
    """MetaSchedule's own evolutionary search (``tune_tir``) on ``op``; its curve from the database."""
    load_tensor_intrinsics()
    from tvm.s_tir import meta_schedule as ms

    target = autotvm.make_target(target)
    func = workload(op)
    flop = float(tvm.s_tir.analysis.estimate_tir_flops(tvm.IRModule({"main": func})))
    use_runtime_threads(target)  # its runner's workers time with our runner's threads
    with tempfile.TemporaryDirectory(prefix="ms-") as work_dir:
        builder = ms.builder.LocalBuilder(max_workers=n_parallel, f_build=ms_fast_build if fast_build else None)
        runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
            number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, enable_cpu_cache_flush=False))
        quiet_metaschedule()
        start = time.perf_counter()
        ms.tune_tir(func, target, work_dir, max_trials_global=trials, num_trials_per_iter=64, builder=builder,
                    runner=runner, seed=seed, num_tuning_cores=n_parallel)
        wall = time.perf_counter() - start
        curve, best = [], 0.0
        path = os.path.join(work_dir, "database_tuning_record.json")
        errors = 0
        for line in open(path, encoding="utf-8"):
            secs = json.loads(line)[1][1]
            ok = secs and all(0 < s < 1e9 for s in secs)
            errors += not ok
            best = max(best, flop / (sum(secs) / len(secs)) / 1e9 if ok else 0.0)
            curve.append(best)
    return {"op": op, "tuner": "metaschedule", "seed": seed, "trials": len(curve), "curve": curve,
            "best_gflops": best, "trials_to_90": trials_to_fraction(curve), "tuner_seconds": None,
            "wall_seconds": wall, "overhead": None, "errors": errors}


def summarise(runs: Iterable[dict]) -> list[dict]:
    """Median over seeds of best GFLOPS, trials to 90% and overhead, per (op, tuner)."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["op"], run["tuner"]), []).append(run)
    rows = []
    for (op, tuner), group in sorted(groups.items()):
        t90 = [r["trials_to_90"] for r in group if r["trials_to_90"] is not None]
        overhead = [r["overhead"] for r in group if r["overhead"] is not None]
        rows.append({"op": op, "tuner": tuner, "seeds": len(group),
                     "median_best_gflops": statistics.median(r["best_gflops"] for r in group),
                     "median_trials_to_90": statistics.median(t90) if t90 else None,
                     "median_overhead": statistics.median(overhead) if overhead else None,
                     "median_wall_seconds": statistics.median(r["wall_seconds"] for r in group)})
    return rows


def geomean_ratio(rows: list[dict], tuner: str, baseline: str) -> float | None:
    """Geometric mean over ops of ``tuner``'s median best over ``baseline``'s."""
    by = {(r["op"], r["tuner"]): r["median_best_gflops"] for r in rows}
    ratios = [by[(op, tuner)] / by[(op, baseline)] for op, t in by if t == tuner
              and (op, baseline) in by and by[(op, baseline)] > 0]
    return float(np.exp(np.mean(np.log(ratios)))) if ratios else None


def geomean_ratio_interval(runs: Iterable[dict], tuner: str, baseline: str, level: float = 0.9,
                           resamples: int = 2000, seed: int = 0,
                           value: str = "best_gflops") -> tuple[float, float] | None:
    """Percentile-bootstrap interval of ``geomean_ratio`` over seeds (``scipy.stats.bootstrap``):
    each (op, tuner)'s seeds are redrawn with replacement, independently, and the ratio of the
    medians recomputed. With three to eight seeds a median moves a lot between runs; the
    interval says how far a ratio could move with other seeds. ``value``: the key of each run
    compared, larger is better."""
    best: dict[tuple, list[float]] = {}
    for run in runs:
        best.setdefault((run["op"], run["tuner"]), []).append(run[value])
    ops = [op for op, t in best if t == tuner and (op, baseline) in best]
    if not ops:
        return None
    samples = [np.log(np.maximum(best[(op, who)], 1e-12)) for op in ops for who in (tuner, baseline)]

    def mean_log_ratio(*groups: np.ndarray, axis: int = -1) -> np.ndarray:
        medians = [np.median(g, axis=axis) for g in groups]
        return np.mean([medians[i] - medians[i + 1] for i in range(0, len(medians), 2)], axis=0)

    if all(np.ptp(sample) == 0 for sample in samples):  # every seed agrees: the interval is a point
        point = float(np.exp(mean_log_ratio(*samples)))
        return point, point
    result = scipy.stats.bootstrap(samples, mean_log_ratio, n_resamples=resamples, confidence_level=level,
                                   method="percentile", paired=False, vectorized=True, rng=np.random.default_rng(seed))
    low, high = np.exp([result.confidence_interval.low, result.confidence_interval.high])
    return float(low), float(high)


def ratios_with_intervals(rows: list[dict], runs: list[dict],
                          pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str, float, float, float]]:
    """(tuner, baseline, geometric-mean ratio of the medians, and its 90% bootstrap interval over
    seeds) of each pair present in ``rows``."""
    out = []
    for tuner, base in pairs:
        ratio = geomean_ratio(rows, tuner, base)
        if ratio is not None:
            out.append((tuner, base, ratio, *geomean_ratio_interval(runs, tuner, base)))
    return out


def format_ratios(ratios: list[tuple[str, str, float, float, float]]) -> list[str]:
    """One line per ``ratios_with_intervals`` entry."""
    return [f"{tuner} / {base}: geometric mean {ratio:.3f} (90% bootstrap interval over seeds {low:.3f}-{high:.3f})"
            for tuner, base, ratio, low, high in ratios]


def ratio_lines(rows: list[dict], runs: list[dict], pairs: Iterable[tuple[str, str]]) -> list[str]:
    """One line per (tuner, baseline) pair present in ``rows``: the geometric-mean ratio of the
    medians and its 90% bootstrap interval over seeds."""
    return format_ratios(ratios_with_intervals(rows, runs, pairs))


def format_table(rows: list[dict]) -> str:
    """The summary rows as an aligned text table."""
    table = [[r["op"], r["tuner"], r["seeds"], r["median_best_gflops"],
              "-" if r["median_trials_to_90"] is None else f"{r['median_trials_to_90']:.0f}",
              "-" if r["median_overhead"] is None else f"{100 * r['median_overhead']:.2f}%",
              r["median_wall_seconds"]] for r in rows]
    return tabulate.tabulate(table, headers=["op", "tuner", "seeds", "best GFLOPS", "trials->90%", "overhead",
                                             "wall s"], floatfmt=".2f", colalign=("left", "left", "right", "right",
                                                                                  "right", "right", "right"))
