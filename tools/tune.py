"""``driver.py -m=tune``: extract each model's tasks, tune them, log records, print a summary.

Records go to ``<save_path>/<save_name>-<model>.json`` in AutoTVM's format (``tools.tuning``:
each task for ``trials``, or the model's ``model_trials`` spread over its tasks by a task
scheduler). Running the same config again resumes without measuring anything twice.
"""

from __future__ import annotations

from collections import Counter

import tabulate

import autotvm

from .models import model_tasks
from .saved_runs import writable_dir
from .settings import Config
from .tuning import tune_model


def tune_models(config: Config) -> list[dict]:
    settings = config.autotuner_settings
    writable_dir(settings.save_path, "autotuner_settings.save_path")
    target = autotvm.make_target(config.target)
    option = settings.measure_option(target)
    # the build workers import TVM and the run worker opens the device (a CUDA context) while the
    # models load and their tasks are extracted, not in the first round's time
    option["builder"].start()
    option["runner"].start(target)
    summary = []
    for spec in config.models:
        _, _, _, tasks = model_tasks(spec, target, config.run_settings.precision)
        summary += tune_model(spec.name, tasks, settings, option)
    print(format_summary(summary))
    for spec in config.models:
        print(f"records of {spec.name}: {settings.log_path(spec.name)}")
    print("build with them: python driver.py -m=benchmark -c <this config> (times them against PyTorch and the "
          "other runtimes), or in Python: with autotvm.apply_history_best(log): exe = autotvm.build_program(mod, "
          "target, params) (README, \"Use the tuned model in your program\")")
    return summary


def format_summary(rows: list[dict]) -> str:
    """The tuned tasks as a table. ``calls``: how often the model calls the function (a task's
    weight); a function with a single config has nothing to tune and shows no GFLOPS."""
    table = [[r["model"][:16], r["task"][:40], r["weight"], r["configs"], r["trials"],
              f"{r['best_gflops']:.2f}" if r["configs"] > 1 else "- (1 config)", f"{r['seconds']:.1f}"] for r in rows]
    lines = ["", tabulate.tabulate(table, headers=["model", "function", "calls", "configs", "trials", "best GFLOPS",
                                                   "time s"], colalign=("left", "left") + ("right",) * 5)]
    lines.append("calls: times the model calls the function per inference; configs: the size of its design space")
    busy = sum(r["seconds"] for r in rows)  # the tasks' rounds, which overlap when several were in flight
    total = sum({r["model"]: r.get("model_seconds", 0.0) for r in rows}.values()) or busy
    trials = sum(r["trials"] - r.get("resumed", 0) for r in rows)
    lines.append(f"total tuning time: {total:.1f} s" + (f", {trials} trials measured ({trials / total:.2f} a second)"
                                                        if trials and total else ""))
    phases = {name: sum(r.get(f"{key}_seconds", 0.0) for r in rows)
              for name, key in (("proposing", "propose"), ("checking against the target", "check"),
                                ("building", "build"), ("running", "run"))}
    if busy and any(phases.values()):  # where a round's time goes (the rest: logging, switching tasks)
        overlap = f" (rounds in flight at once: {busy:.1f} s of rounds in {total:.1f} s)" if busy > 1.05 * total else ""
        lines.append(f"where the rounds' time went{overlap}: " + ", ".join(
            f"{name} {seconds:.1f} s ({100 * seconds / busy:.0f}%)" for name, seconds in phases.items() if seconds))
    models = {r["model"]: r for r in rows}.values()  # a model's fields, repeated on each of its rows
    capacity = sum(r.get("build_workers", 0) * r.get("model_seconds", 0.0) for r in models)
    builds = sum(r.get("builds", 0) for r in models)
    if capacity and builds:  # below 100%: the workers waited for work (proposals, checks, runs, a round's slowest)
        built = sum(r.get("build_worker_seconds", 0.0) for r in models)
        device = sum(r.get("build_device_compile_seconds", 0.0) for r in models)  # CUDA targets
        compiler = next((r["build_device_compiler"] for r in models if r.get("build_device_compiler")), None)
        lines.append(f"build workers busy {100 * built / capacity:.0f}% of the tuning time ({builds} builds, "
                     f"{built / builds:.2f} s each on average"
                     + (f", {device / builds:.2f} s of it in the CUDA compiler, {compiler or 'nvcc or NVRTC'})"
                        if device else ")"))
    failed = sum((Counter(r.get("failed", {})) for r in rows), Counter())
    if failed:  # AutoTVM's MeasureErrorNo of each failed trial (its message is in the log)
        lines.append(f"trials that failed: {sum(failed.values())} ("
                     + ", ".join(f"{why} {count}" for why, count in failed.most_common()) + ")")
    rejected = sum(r.get("rejected", 0) for r in rows)
    if rejected:  # GPU targets: configs over the device's limits, skipped before building
        lines.append(f"configs the target rejected before building (not trials): {rejected}")
    return "\n".join(lines)
