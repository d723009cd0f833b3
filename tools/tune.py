"""``driver.py -m=tune``: extract each model's tasks, tune them, log records, print a summary.

Records go to ``<save_path>/<save_name>-<model>.json`` in AutoTVM's format. Each task is tuned
for ``trials``, or, with ``model_trials``, the model's budget is spread over its tasks by a task
scheduler (``autotvm.tuner.task_scheduler``). Re-running with the same log resumes: each task's
past records are loaded first and never measured again, and only the trials still missing from
the budget are run.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import tabulate
from tqdm import tqdm

import autotvm
from autotvm.record import claim_log, load_from_file, workload_key
from autotvm.tuner.task_scheduler import TaskScheduler, TaskState

from .config import writable_dir
from .measure_setup import measure_option_from_settings
from .models import load_model
from .tuners import make_tuner


def log_path(settings: dict, model_name: str) -> str:
    return os.path.join(settings["save_path"], f"{settings['save_name']}-{model_name}.json")


def bound_params(mod: Any, params: list) -> dict:
    """Name -> tensor for the trailing parameters of ``main`` (what ``detach_params`` split off)."""
    names = [p.name for p in mod["main"].params]
    return dict(zip(names[len(names) - len(params):], params))


def load_program(spec: dict) -> tuple[Any, Any, dict]:
    """(model, relax module, params by name) of a model spec."""
    model = load_model(spec)
    mod, params = model.to_relax()
    return model, mod, bound_params(mod, params)


def model_tasks(spec: dict, target: Any) -> tuple[Any, Any, dict, list]:
    """(model, relax module, params by name, tasks) of a model spec."""
    model, mod, named = load_program(spec)
    return model, mod, named, autotvm.task.extract_from_program(mod, target, named, **conv_options(spec))


def conv_options(spec: dict) -> dict:
    """The model's convolution keys that are set (the API holds the defaults): tuning and
    building must use the same ones."""
    return {key: spec[key] for key in ("conv_layout", "conv_algorithm") if key in spec}


ROUND_TRIALS = 16  # trials a task scheduler gives at a time: one GA-DQN generation at its default pop_size


def tune_models(config: dict) -> list[dict]:
    settings = config["autotuner_settings"]
    writable_dir(settings["save_path"], "autotuner_settings.save_path")
    target = autotvm.make_target(config["target"])
    option = measure_option_from_settings(settings)
    summary = []
    for spec in config["models"]:
        _, _, _, tasks = model_tasks(spec, target)
        summary += tune_model(spec["name"], tasks, settings, option)
    print(format_summary(summary))
    for spec in config["models"]:
        print(f"records of {spec['name']}: {log_path(settings, spec['name'])}")
    print("build with them: python driver.py -m=benchmark -c <this config> (times them against PyTorch and the "
          "other runtimes), or in Python: with autotvm.apply_history_best(log): exe = autotvm.build_program(mod, "
          "target, params) (README, \"Use the tuned model in your program\")")
    return summary


def tune_model(name: str, tasks: list, settings: dict, option: dict,
               on_round: Callable[[int], None] | None = None) -> list[dict]:
    """Tune one model's tasks: each up to ``trials`` in turn, or, with ``model_trials``, within that
    budget spread by the task scheduler. Past records in the log are loaded first, never re-measured.
    ``on_round(trials)`` is called after each scheduled round with the model's trials so far."""
    log = log_path(settings, name)
    claim_log(log)  # before reading: a second tune of this log is refused, a half-written last line cut off
    past = list(load_from_file(log)) if os.path.exists(log) else []
    tuners, loaded = [], []
    for task in tasks:
        tuner = make_tuner(settings["tuner"], task, seed=settings["seed"], **settings.get("tuner_options", {}))
        mine = [r for r in past if workload_key(r[0].task) == workload_key(task)]
        loaded.append(tuner.load_history(mine) if mine else 0)
        tuners.append(tuner)
    log_callback = autotvm.callback.log_to_file(log)
    if settings["model_trials"] is None:
        print(f"== {name}: {len(tasks)} tasks, {settings['tuner']} tuner, {settings['trials']} trials each, log {log}",
              flush=True)
        states = [_tune_in_turn(i, task, tuner, done, settings, option, log_callback, len(tasks))
                  for i, (task, tuner, done) in enumerate(zip(tasks, tuners, loaded))]
    else:
        states = _tune_scheduled(name, tasks, tuners, loaded, settings, option, log_callback, log, on_round)
    return [{"model": name, "task": s.task.name, "weight": s.task.weight, "configs": s.task.config_space.range_length,
             "trials": s.trials, "resumed": done, "best_gflops": s.tuner.best_flops / 1e9, "seconds": s.seconds,
             "rejected": s.tuner.rejected} for s, done in zip(states, loaded)]


def _tune_in_turn(i: int, task: Any, tuner: Any, done: int, settings: dict, option: dict, log_callback: Any,
                  n_tasks: int) -> TaskState:
    state = TaskState(task, tuner, min(settings["trials"], task.config_space.range_length), trials=done)
    remaining = state.cap - done
    start = time.perf_counter()
    if remaining > 0:
        bar = autotvm.callback.progress_bar(remaining, prefix=f"[{i + 1}/{n_tasks}] {task.name}")
        try:
            tuner.tune(remaining, option, early_stopping=settings["early_stopping"], callbacks=[bar, log_callback])
        finally:
            bar.close()
    state.trials += len(tuner.history)
    state.seconds = time.perf_counter() - start
    return state


def _tune_scheduled(name: str, tasks: list, tuners: list, loaded: list, settings: dict, option: dict,
                    log_callback: Any, log: str, on_round: Callable[[int], None] | None = None) -> list[TaskState]:
    scheduler = TaskScheduler(tasks, tuners, settings["model_trials"], settings["trials"], settings["task_scheduler"],
                              ROUND_TRIALS, loaded)
    tunable = sum(1 for s in scheduler.states if s.task.config_space.range_length > 1)
    budget = min(settings["model_trials"], sum(s.cap for s in scheduler.states if s.cap > 1))
    print(f"== {name}: {len(tasks)} tasks ({tunable} tunable), {settings['tuner']} tuner, {settings['model_trials']} "
          f"trials for the model ({settings['task_scheduler']} task scheduler, at most {settings['trials']} per task), "
          f"log {log}", flush=True)
    bar = tqdm(total=budget, initial=min(scheduler.used, budget), desc=name, unit="trial", dynamic_ncols=True)

    def after_round(state: TaskState, measured: int) -> None:
        bar.set_postfix_str(f"{state.task.name[:28]}  est. {1e3 * scheduler.estimated_latency():.3f} ms", refresh=False)
        bar.update(measured)
        if on_round:
            on_round(scheduler.used)

    try:
        scheduler.tune(option, settings["early_stopping"], [log_callback], after_round)
    finally:
        bar.close()
    return scheduler.states


def format_summary(rows: list[dict]) -> str:
    """The tuned tasks as a table. ``calls``: how often the model calls the function (a task's
    weight); a function with a single config has nothing to tune and shows no GFLOPS."""
    table = [[r["model"][:16], r["task"][:40], r["weight"], r["configs"], r["trials"],
              f"{r['best_gflops']:.2f}" if r["configs"] > 1 else "- (1 config)", f"{r['seconds']:.1f}"] for r in rows]
    lines = ["", tabulate.tabulate(table, headers=["model", "function", "calls", "configs", "trials", "best GFLOPS",
                                                   "time s"], colalign=("left", "left") + ("right",) * 5)]
    lines.append("calls: times the model calls the function per inference; configs: the size of its design space")
    total = sum(r["seconds"] for r in rows)
    lines.append(f"total tuning time: {total:.1f} s")
    rejected = sum(r.get("rejected", 0) for r in rows)
    if rejected:  # GPU targets: configs over the device's limits, skipped before building
        lines.append(f"configs the target rejected before building (not trials): {rejected}")
    return "\n".join(lines)
