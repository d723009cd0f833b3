"""``model_tuners``: which tuner gives the fastest model for the same tuning budget?

For each model of ``experiments.models``, seed and tuner of ``experiments.tuners``, the model is
tuned from nothing within ``experiments.model_trials`` trials, spread over its functions by the
task scheduler of ``-m=tune`` (``autotuner_settings.task_scheduler``, rounds of 16 trials, at most
``autotuner_settings.trials`` per function). ``metaschedule`` is MetaSchedule's own ``tune_relax``
(its evolutionary search and XGBoost cost model) on the same fused module, with the same budget,
cap, round size, scheduler and measurement. Every run is then built from its first N trials at
``experiments.checkpoints`` points along the budget and timed: the curve of model latency against
tuning time. Last, the final builds of every run of a model are timed together in interleaved
rounds, beside PyTorch eager and the untuned build, so the latencies the tuners are compared on
come from one timing session.

Writes under ``<save_path>/<save_name>/model_tuners/``: ``runs.json`` (every run, with its
checkpoints), ``summary.csv`` (a row per run), ``table.csv`` (per model and tuner: median latency
over seeds, tuning time, and the trials and seconds needed to come within 5% of the best latency
any run of the model reached), ``ratios.txt`` (each tuner's latency over GA-DQN's, with 90%
bootstrap intervals over seeds), ``functions.csv`` (per model, tuner and function: the best time
measured while tuning, median over seeds; our tuners' runs, MetaSchedule's database does not name
its functions), ``curves.png``, ``bars.png``, and ``logs/`` with each run's records
(MetaSchedule's: its database folder).
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import tabulate

import autotvm
from autotvm.env import device_of, runtime_threads, use_runtime_threads
from autotvm.record import best_by_workload, load_from_file

from . import metaschedule, stats
from .models import ModelSpec, build_model, model_tasks
from .plots import latency_bars, latency_curves
from .runtimes import Placement, Runtime, prepare, tvm_runtime
from .saved_runs import Result, SavedRuns
from .settings import Config, TuningSettings, replace
from .timing import accuracy, time_interleaved
from .tuners import base_tuner
from .tuning import ROUND_TRIALS, tune_model

WITHIN = 0.05  # time to quality: a run has arrived when its model is within 5% of the best any run reached
REFERENCE = "ga-dqn"  # the tuner every other one is compared with in ratios.txt


@dataclass
class LoadedModel:
    """A model as every run of it uses it: loaded, exported and its tasks extracted once."""
    spec: ModelSpec
    model: Any
    mod: Any
    params: dict
    tasks: list
    expected: list  # PyTorch eager's outputs, what every build is checked against

    precision: str

    def build(self, target: Any, **kwargs: Any) -> Any:
        return build_model(self.spec, self.mod, self.params, target, self.precision, **kwargs)


class ModelExperiment(SavedRuns):
    """The runs of ``model_tuners``, saved and reused as every experiment's, keyed by model."""

    unit = "model"

    def __init__(self, config: Config, option: dict) -> None:
        super().__init__("model_tuners", config, option, config.experiments.model_trials)
        self.checkpoints = config.experiments.checkpoints
        self.target = autotvm.make_target(config.target)
        self.log_dir = os.path.join(self.out_dir, "logs")
        os.makedirs(self.log_dir, exist_ok=True)
        self.finals: dict[tuple, Any] = {}  # (model, label, seed) -> the run's final build, kept for the last timing

    def describe(self, run: dict) -> str:
        last = run["checkpoints"][-1]
        return (f"{run['model']:12} {run['label']:16} seed {run['seed']}: {last['latency_ms']:8.3f} ms after "
                f"{run['trials']} trials, {run['tuning_s']:.0f} s of tuning")

    def time_build(self, loaded: LoadedModel, exe: Any) -> tuple[float, bool]:
        """(median ms over ``run_settings.repeat`` blocks, whether its outputs match PyTorch eager)."""
        run = self.config.run_settings
        runtime = tvm_runtime("tvm", exe, self.target, loaded.model, loaded.precision)
        ok = accuracy(runtime, loaded.expected, run)["matches_pytorch"]
        return time_interleaved([runtime], run.repeat, run.number)["tvm"]["median_ms"], ok


def model_tuners(config: Config, option: dict) -> Result:
    exp = ModelExperiment(config, option)
    use_runtime_threads(exp.target)
    references: dict[str, dict[str, float]] = {}
    for name in config.experiments.models:
        loaded = _load(config.model(name), exp.target, config.run_settings.precision)  # load_config checked the names
        untuned = loaded.build(exp.target)
        untuned_ms, _ = exp.time_build(loaded, untuned)
        for seed in exp.seeds:
            for label in config.experiments.tuners:
                exp.run(name, label, seed, lambda: _tuned_run(exp, loaded, label, seed, untuned, untuned_ms))
        references[name] = _time_finals(exp, loaded, untuned)
    return _finish(exp, references)


def _load(spec: ModelSpec, target: Any, precision: str) -> LoadedModel:
    model, mod, params, tasks = model_tasks(spec, target, precision)
    return LoadedModel(spec, model, mod, params, tasks, model.torch_outputs(), precision)


def _tuned_run(exp: ModelExperiment, loaded: LoadedModel, label: str, seed: int, untuned: Any,
               untuned_ms: float) -> dict:
    """Tune the model from nothing with one tuner and seed, then build and time it at each checkpoint."""
    name = loaded.spec.name
    where = os.path.join(exp.log_dir, f"{label}-seed{seed}-{name}")
    tune = _tune_metaschedule if base_tuner(label) == "metaschedule" else _tune_autotvm
    progress, build_at = tune(exp, loaded, label, seed, where)
    trials = progress[-1][0] if progress else 0
    checkpoints = [{"trials": 0, "seconds": 0.0, "latency_ms": untuned_ms, "matches_pytorch": True}]
    exe = untuned  # a model with nothing to tune has only its untuned build
    for count in _checkpoint_counts(trials, exp.checkpoints):
        exe = build_at(count)
        latency, ok = exp.time_build(loaded, exe)
        checkpoints.append({"trials": count, "seconds": _seconds_at(progress, count), "latency_ms": latency,
                            "matches_pytorch": ok})
    exp.finals[(name, label, seed)] = exe
    return {"model": name, "tuner": base_tuner(label), "seed": seed, "trials": trials,
            "tuning_s": progress[-1][1] if progress else 0.0, "checkpoints": checkpoints, "records": where,
            "matches_pytorch": all(c["matches_pytorch"] for c in checkpoints)}


def _settings(exp: ModelExperiment, label: str, seed: int, where: str) -> TuningSettings:
    """``autotuner_settings`` for one run: its tuner, seed, the experiment's budget, its own log."""
    settings = exp.config.autotuner_settings
    options = {**settings.tuner_options, **exp.config.experiments.tuner_options.get(label, {})}
    return replace(settings, tuner=base_tuner(label), seed=seed, model_trials=exp.trials, tuner_options=options,
                   save_path=os.path.dirname(where), save_name=f"{label}-seed{seed}")


def _tune_autotvm(exp: ModelExperiment, loaded: LoadedModel, label: str, seed: int,
                  where: str) -> tuple[list, Callable[[int], Any]]:
    """One of our tuners through ``-m=tune``'s own path: ([(trials, seconds)] after each round,
    a function that builds the model from its first N records)."""
    settings = _settings(exp, label, seed, where)
    log = where + ".json"
    if os.path.exists(log):  # a run stopped half-way: start it again, its time must be one run's
        os.remove(log)
    progress, start = [], time.perf_counter()
    tune_model(loaded.spec.name, loaded.tasks, settings, exp.option,
               on_round=lambda used: progress.append((used, time.perf_counter() - start)))
    records = list(load_from_file(log))

    return progress, lambda count: _build_from(loaded, exp.target, records[:count])


def _build_from(loaded: LoadedModel, target: Any, records: Any) -> Any:
    """The model built from a run's records: at a checkpoint, or at the end of a budget smaller
    than the model's functions, some have none, on purpose (no warning of them)."""
    with autotvm.apply_history_best(records), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"build_program: \d+ of the program's")
        return loaded.build(target)


def _tune_metaschedule(exp: ModelExperiment, loaded: LoadedModel, label: str, seed: int,
                       where: str) -> tuple[list, Callable[[int], Any]]:
    """MetaSchedule's ``tune_relax`` on the module our tasks come from, under the same budget,
    cap, rounds and measurement."""
    fused = autotvm.task.relax_integration.fused_program(loaded.mod, exp.target, loaded.params,
                                                         precision=loaded.precision, **loaded.spec.conv_options())
    return metaschedule.tune_model(fused, exp.target, where, exp.trials, ROUND_TRIALS, seed,
                                   exp.config.autotuner_settings, lambda **kwargs: loaded.build(exp.target, **kwargs))


def _checkpoint_counts(trials: int, checkpoints: int) -> list[int]:
    """Trial counts at which a run is built: ``checkpoints`` even steps, the last at ``trials``."""
    counts = [round(trials * k / checkpoints) for k in range(1, checkpoints + 1)]
    return sorted({c for c in counts if c > 0})


def _seconds_at(progress: list, count: int) -> float:
    """Tuning seconds when the run had measured ``count`` trials."""
    return next((seconds for trials, seconds in progress if trials >= count), progress[-1][1] if progress else 0.0)


def _time_finals(exp: ModelExperiment, loaded: LoadedModel, untuned: Any) -> dict[str, float]:
    """Every run's final build of the model timed in one interleaved session with PyTorch eager and
    the untuned build; each run gets ``latency_ms``. Returns the two references' medians."""
    name, run_settings = loaded.spec.name, exp.config.run_settings
    runs = [r for r in exp.runs if r["model"] == name]
    where = Placement(device_of(exp.target), runtime_threads(exp.target), loaded.precision)
    runtimes: list[Runtime] = [prepare("pytorch-eager", loaded.model, where),
                               tvm_runtime("tvm-untuned", untuned, exp.target, loaded.model, loaded.precision)]
    for run in runs:
        key = (name, run["label"], run["seed"])
        exe = exp.finals[key] if key in exp.finals else _rebuild(exp, loaded, run)
        runtimes.append(tvm_runtime(f"{run['label']}/{run['seed']}", exe, exp.target, loaded.model, loaded.precision))
    print(f"== {name}: timing the final build of {len(runs)} runs with PyTorch eager and the untuned build, "
          f"{run_settings.repeat} interleaved rounds", flush=True)
    timings = time_interleaved(runtimes, run_settings.repeat, run_settings.number)
    for run in runs:
        run["latency_ms"] = timings[f"{run['label']}/{run['seed']}"]["median_ms"]
    exp.save()
    return {"pytorch-eager": timings["pytorch-eager"]["median_ms"], "tvm-untuned": timings["tvm-untuned"]["median_ms"]}


def _rebuild(exp: ModelExperiment, loaded: LoadedModel, run: dict) -> Any:
    """The final build of a run reused from earlier results, from its saved records."""
    where = run["records"]
    if os.path.isdir(where):
        return loaded.build(exp.target, database=metaschedule.database(where))
    return _build_from(loaded, exp.target, where + ".json")


def _finish(exp: ModelExperiment, references: dict[str, dict[str, float]]) -> Result:
    runs = exp.runs
    summary = []
    for run in runs:
        best = min(c["latency_ms"] for r in runs if r["model"] == run["model"] for c in r["checkpoints"])
        trials_to, seconds_to = stats.arrival(run["checkpoints"], (1 + WITHIN) * best)
        summary.append({"model": run["model"], "tuner": run["label"], "seed": run["seed"], "trials": run["trials"],
                        "tuning_s": run["tuning_s"], "latency_ms": run["latency_ms"],
                        "trials_to_5pct": trials_to, "seconds_to_5pct": seconds_to,
                        "matches_pytorch": run["matches_pytorch"]})
    exp.write_csv("summary.csv", summary)
    functions = _function_bests(runs)
    if functions:
        exp.write_csv("functions.csv", functions)
    table = _table(summary, references)
    exp.write_csv("table.csv", table)
    ratios = _ratio_lines(summary, [r["tuner"] for r in table])
    with open(os.path.join(exp.out_dir, "ratios.txt"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(ratios) + "\n")
    latency_curves(runs, os.path.join(exp.out_dir, "curves.png"))
    latency_bars(table, references, os.path.join(exp.out_dir, "bars.png"))
    return table, ratios


def _function_bests(runs: list[dict]) -> list[dict]:
    """Per model, tuner and function, the median over seeds of each run's best measured time: where
    one tuner's model gains or loses against another's."""
    bests: dict[tuple, list[float]] = {}
    for run in runs:
        log = run["records"] + ".json"
        if not os.path.isfile(log):  # MetaSchedule's database folder
            continue
        for group in best_by_workload(load_from_file(log)).values():
            inp, res = group[0]
            bests.setdefault((run["model"], run["label"], inp.task.name), []).append(res.mean_cost)
    return [{"model": model, "tuner": tuner, "function": function, "seeds": len(times),
             "best_ms": 1e3 * statistics.median(times)}
            for (model, tuner, function), times in sorted(bests.items(), key=lambda item: (item[0][0], item[0][2]))]


def _table(summary: list[dict], references: dict[str, dict[str, float]]) -> list[dict]:
    """Per model and tuner: medians over seeds, and how many seeds came within 5% of the best."""
    rows = []
    for model, tuner in dict.fromkeys((r["model"], r["tuner"]) for r in summary):
        group = [r for r in summary if r["model"] == model and r["tuner"] == tuner]
        latency = stats.median_or_none([r["latency_ms"] for r in group])
        rows.append({"model": model, "tuner": tuner, "seeds": len(group), "latency_ms": latency,
                     "min_latency_ms": min(r["latency_ms"] for r in group),
                     "max_latency_ms": max(r["latency_ms"] for r in group),
                     "seed_latencies_ms": [r["latency_ms"] for r in group],
                     "speedup_over_eager": references[model]["pytorch-eager"] / latency,
                     "tuning_s": stats.median_or_none([r["tuning_s"] for r in group]),
                     "trials": stats.median_or_none([r["trials"] for r in group]),
                     "reached_5pct": sum(r["trials_to_5pct"] is not None for r in group),
                     "trials_to_5pct": stats.median_or_none([r["trials_to_5pct"] for r in group]),
                     "seconds_to_5pct": stats.median_or_none([r["seconds_to_5pct"] for r in group]),
                     "eager_ms": references[model]["pytorch-eager"], "untuned_ms": references[model]["tvm-untuned"]})
    return rows


def _ratio_lines(summary: list[dict], tuners: list[str]) -> list[str]:
    """Each tuner's model latency over GA-DQN's (> 1: GA-DQN's model is faster): the geometric mean
    over models of the ratio of medians over seeds, with its interval over seeds (``tools.stats``)."""
    reference = REFERENCE if REFERENCE in tuners else tuners[0]
    speeds = [{"op": r["model"], "tuner": r["tuner"], "seed": r["seed"], "speed": 1.0 / r["latency_ms"]}
              for r in summary]
    lines = [stats.ratio_line(speeds, reference, other, value="speed", name=f"{other} latency / {reference} latency",
                              note=f"; > 1: {reference}'s model is faster")
             for other in dict.fromkeys(t for t in tuners if t != reference)]
    return [line for line in lines if line]


def format_model_table(rows: list[dict]) -> str:
    """``table.csv`` as printed at the end of the experiment."""
    def opt(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    table = [[r["model"], r["tuner"], r["seeds"], f"{r['latency_ms']:.3f}", f"{r['speedup_over_eager']:.2f}",
              f"{r['tuning_s']:.0f}", f"{r['reached_5pct']}/{r['seeds']}", opt(r["trials_to_5pct"], ".0f"),
              opt(r["seconds_to_5pct"], ".0f")] for r in rows]
    return tabulate.tabulate(table, headers=["model", "tuner", "seeds", "latency ms", "x eager", "tuning s",
                                             "within 5%", "trials to 5%", "seconds to 5%"],
                             colalign=("left", "left") + ("right",) * 7)
