"""``driver.py -m=tune``: extract each model's tasks, tune them, log records, print a summary.

Records go to ``<save_path>/<save_name>-<model>.json`` in AutoTVM's format. Re-running with the
same log resumes: each task's past records are loaded first and never measured again, and only
the trials still missing from its budget are run.
"""

from __future__ import annotations

import os
import time
from typing import Any

import tabulate

import autotvm
from autotvm.record import load_from_file, workload_key

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


def tune_models(config: dict) -> list[dict]:
    settings = config["autotuner_settings"]
    writable_dir(settings["save_path"], "autotuner_settings.save_path")
    target = autotvm.make_target(config["target"])
    option = measure_option_from_settings(settings)
    summary = []
    for spec in config["models"]:
        _, _, _, tasks = model_tasks(spec, target)
        log = log_path(settings, spec["name"])
        past = list(load_from_file(log)) if os.path.exists(log) else []
        print(f"== {spec['name']}: {len(tasks)} tasks, {settings['tuner']} tuner, {settings['trials']} trials each, "
              f"log {log}", flush=True)
        for i, task in enumerate(tasks):
            summary.append(_tune_task(task, i, len(tasks), spec["name"], settings, option, log, past))
    print(format_summary(summary))
    for spec in config["models"]:
        print(f"records of {spec['name']}: {log_path(settings, spec['name'])}")
    print("build with them: python driver.py -m=benchmark -c <this config> (times them against PyTorch), or in "
          "Python: with autotvm.apply_history_best(log): exe = autotvm.build_program(mod, target, params) "
          "(README, \"Use the tuned model in your program\")")
    return summary


def _tune_task(task: Any, i: int, n_tasks: int, model: str, settings: dict, option: dict, log: str,
               past: list) -> dict:
    tuner = make_tuner(settings["tuner"], task, seed=settings["seed"], **settings.get("tuner_options", {}))
    mine = [r for r in past if workload_key(r[0].task) == workload_key(task)]
    done = tuner.load_history(mine) if mine else 0
    remaining = min(settings["trials"], task.config_space.range_length) - done
    start = time.perf_counter()
    if remaining > 0:
        prefix = f"[{i + 1}/{n_tasks}] {task.name}"
        tuner.tune(remaining, option, early_stopping=settings["early_stopping"],
                   callbacks=[autotvm.callback.progress_bar(remaining, prefix=prefix),
                              autotvm.callback.log_to_file(log)])
    return {"model": model, "task": task.name, "weight": task.weight, "configs": task.config_space.range_length,
            "trials": done + len(tuner.history),
            "resumed": done, "best_gflops": tuner.best_flops / 1e9, "seconds": time.perf_counter() - start,
            "rejected": tuner.rejected}


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
