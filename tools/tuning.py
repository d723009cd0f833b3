"""Running our tuners: a model's tasks within its budget, one operator with one tuner and seed,
and configs measured again.

``tune_model`` tunes each task for ``trials``, or, with ``model_trials``, spreads the model's
budget over its tasks with a task scheduler (``autotvm.tuner.task_scheduler``). A log is resumed:
each task's past records are loaded first and never measured again, and only the trials still
missing from the budget are run.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from functools import partial
from typing import Any, Callable

import numpy as np
from tqdm import tqdm

import autotvm
from autotvm.measure import MeasureErrorNo
from autotvm.record import claim_log, load_from_file, workload_key
from autotvm.tuner.task_scheduler import TaskScheduler, TaskState

from .settings import TuningSettings
from .stats import best_index_at, trials_to_fraction
from .tuners import make_tuner
from .workloads import workload_task

ROUND_TRIALS = 16  # trials a task scheduler gives at a time: one GA-DQN generation at its default pop_size


def tune_model(name: str, tasks: list, settings: TuningSettings, option: dict,
               on_round: Callable[[int], None] | None = None) -> list[dict]:
    """Tune one model's tasks: each up to ``trials`` in turn, or, with ``model_trials``, within that
    budget spread by the task scheduler. Past records in the log are loaded first, never re-measured.
    ``on_round(trials)`` is called after each scheduled round with the model's trials so far.
    Returns a summary row per task."""
    log = settings.log_path(name)
    claim_log(log)  # before reading: a second tune of this log is refused, a half-written last line cut off
    past = list(load_from_file(log)) if os.path.exists(log) else []
    tuners, loaded = [], []
    for task in tasks:
        tuner = make_tuner(settings.tuner, task, seed=settings.seed, **settings.tuner_options)
        mine = [r for r in past if workload_key(r[0].task) == workload_key(task)]
        loaded.append(tuner.load_history(mine) if mine else 0)
        tuners.append(tuner)
    log_callback = autotvm.callback.log_to_file(log)
    builder = option["builder"]
    # the builder may have built for others
    builds_before, busy_before, device_before = builder.builds, builder.busy_seconds, builder.device_compile_seconds
    start = time.perf_counter()
    if settings.model_trials is None:
        print(f"== {name}: {len(tasks)} tasks, {settings.tuner} tuner, {settings.trials} trials each, log {log}",
              flush=True)
        deadline = time.monotonic() + (settings.time_budget if settings.time_budget is not None else float("inf"))
        states = [_tune_in_turn(i, task, tuner, done, settings, option, log_callback, len(tasks),
                                time.monotonic() < deadline)
                  for i, (task, tuner, done) in enumerate(zip(tasks, tuners, loaded))]
    else:
        states = _tune_scheduled(name, tasks, tuners, loaded, settings, option, log_callback, log, on_round)
    wall = time.perf_counter() - start  # below the tasks' summed seconds when rounds were in flight at once
    pool = {"build_workers": builder.n_parallel, "builds": builder.builds - builds_before,
            "build_worker_seconds": builder.busy_seconds - busy_before,
            "build_device_compile_seconds": builder.device_compile_seconds - device_before,
            "build_device_compiler": builder.device_compiler}
    return [{"model": name, "model_seconds": wall, **pool, "task": s.task.name, "weight": s.task.weight,
             "configs": s.task.config_space.range_length, "trials": s.trials, "resumed": done, "best_gflops": s.tuner.best_flops / 1e9, "seconds": s.seconds,
             "rejected": s.tuner.rejected, "propose_seconds": s.tuner.tuner_seconds,
             "failed": dict(Counter(MeasureErrorNo(r["error_no"]).name.lower() for r in s.tuner.history if r["error_no"])),
             **{f"{phase}_seconds": seconds for phase, seconds in s.tuner.phase_seconds.items()}}
            for s, done in zip(states, loaded)]


def _tune_in_turn(i: int, task: Any, tuner: Any, done: int, settings: TuningSettings, option: dict,
                  log_callback: Any, n_tasks: int, in_time: bool = True) -> TaskState:
    """One task's ``trials``; none once the model's ``time_budget`` has passed (``in_time`` false)."""
    state = TaskState(task, tuner, min(settings.trials, task.config_space.range_length), trials=done)
    remaining = state.cap - done if in_time else 0
    start = time.perf_counter()
    if remaining > 0:
        bar = autotvm.callback.progress_bar(remaining, prefix=f"[{i + 1}/{n_tasks}] {task.name}")
        try:
            tuner.tune(remaining, option, early_stopping=settings.early_stopping, callbacks=[bar, log_callback])
        finally:
            bar.close()
    state.trials += len(tuner.history)
    state.seconds = time.perf_counter() - start
    return state


def _tune_scheduled(name: str, tasks: list, tuners: list, loaded: list, settings: TuningSettings, option: dict,
                    log_callback: Any, log: str, on_round: Callable[[int], None] | None = None) -> list[TaskState]:
    scheduler = TaskScheduler(tasks, tuners, settings.model_trials, settings.trials, settings.task_scheduler,
                              ROUND_TRIALS, loaded)
    tunable = sum(1 for s in scheduler.states if s.task.config_space.range_length > 1)
    budget = min(settings.model_trials, sum(s.cap for s in scheduler.states if s.cap > 1))
    in_flight = settings.in_flight(tasks[0].target) if tasks else 1
    print(f"== {name}: {len(tasks)} tasks ({tunable} tunable), {settings.tuner} tuner, {settings.model_trials} "
          f"trials for the model ({settings.task_scheduler} task scheduler, at most {settings.trials} per task"
          + (f", {in_flight} rounds in flight" if in_flight > 1 else "") + ")"
          + (f", at most {settings.time_budget:g} s" if settings.time_budget is not None else "")
          + f", log {log}", flush=True)
    bar = tqdm(total=budget, initial=min(scheduler.used, budget), desc=name, unit="trial", dynamic_ncols=True)

    def after_round(state: TaskState, measured: int) -> None:
        bar.set_postfix_str(f"{state.task.name[:28]}  est. {1e3 * scheduler.estimated_latency():.3f} ms", refresh=False)
        bar.update(measured)
        if on_round:
            on_round(scheduler.used)

    try:
        scheduler.tune(option, settings.early_stopping, [log_callback], after_round, settings.time_budget, in_flight)
    finally:
        bar.close()
    return scheduler.states


def run_tuner(op: str, tuner_name: str, seed: int, trials: int, measure_option: dict,
              options: dict | None = None, target: Any = "llvm", log_path: str | None = None,
              save_agent: str | None = None, tuner_factory: Callable[..., Any] | None = None,
              callbacks: list[Callable] | None = None) -> dict:
    """Tune the operator workload ``op`` with one tuner and seed; returns the run's record (plain
    data: its best-so-far curve, the configs it measured and when, its overhead). ``save_agent``:
    where to save a GA-DQN tuner's agents after the run; ``tuner_factory(task, seed=..., **options)``
    builds a tuner that is not in the registry (``tuner_name`` then only names the run);
    ``callbacks`` go to ``Tuner.tune``."""
    task = workload_task(op, target)
    tuner = (tuner_factory or partial(make_tuner, tuner_name))(task, seed=seed, **(options or {}))
    callbacks = list(callbacks or []) + ([autotvm.callback.log_to_file(log_path)] if log_path else [])
    start = time.perf_counter()
    tuner.tune(trials, measure_option, callbacks=callbacks)
    wall = time.perf_counter() - start
    if save_agent:
        tuner.save(save_agent)
    curve = [h["best_flops"] / 1e9 for h in tuner.history]
    run = {"op": op, "tuner": tuner_name, "seed": seed, "trials": len(curve), "curve": curve,
           "indices": [h["index"] for h in tuner.history], "elapsed": [h["elapsed"] for h in tuner.history],
           "best_gflops": curve[-1] if curve else 0.0, "trials_to_90": trials_to_fraction(curve),
           "tuner_seconds": tuner.tuner_seconds, "wall_seconds": wall, "overhead": tuner.tuner_seconds / wall,
           "errors": sum(1 for h in tuner.history if h["error_no"])}
    if hasattr(tuner, "monitor"):
        run["monitor"] = tuner.monitor
    return run


def measure_again(op: str, indices: list[int], rounds: int, measure_option: dict, target: Any = "llvm",
                  seed: int = 0) -> dict[int, list[float]]:
    """GFLOPS of each config of ``op``, measured ``rounds`` times in a fresh random order each round
    (so that no config is always timed first or last; 0.0 for a failed measurement). A run's best
    is the largest of hundreds of noisy timings and reads high; configs measured again together
    compare fairly."""
    task = workload_task(op, target)
    measure_batch = autotvm.measure.create_measure_batch(task, measure_option)
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


def remeasure_bests(runs: list[dict], rounds: int, measure_option: dict, done: dict[str, dict] | None = None,
                    save: Callable[[dict], None] | None = None, target: Any = "llvm") -> dict[str, dict[str, list[float]]]:
    """Each op's final best config of every run (runs that did not record their configs give none)
    measured again together, ``rounds`` times: ``{op: {str(index): [GFLOPS per round]}}``. An op in
    ``done`` that already holds all of its configs is kept; one that lacks some (runs added since)
    is measured again whole, so that an op's configs are always timed in one pass. ``save`` is
    called after each op, so a stopped run keeps what it measured."""
    again = dict(done or {})
    for op in dict.fromkeys(run["op"] for run in runs):
        indices = sorted({i for run in runs if run["op"] == op for i in [best_index_at(run)] if i is not None})
        if not indices or {str(i) for i in indices} <= set(again.get(op, {})):
            continue
        again[op] = {str(i): v for i, v in measure_again(op, indices, rounds, measure_option, target).items()}
        if save:
            save(again)
    return again
