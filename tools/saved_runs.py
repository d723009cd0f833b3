"""The bookkeeping every ``-m=experiment`` experiment shares: its output folder, its runs saved
to ``runs.json`` as each finishes, and runs of an earlier output reused instead of re-run."""

from __future__ import annotations

import csv
import json
import os
from typing import Callable

from autotvm.checks import AutoTVMError

from .settings import Config

Result = tuple[list[dict], list[str]]  # an experiment's summary rows and its ratio lines


def check_previous_results_dir(directory: str | None) -> None:
    """An earlier experiment's folder (``experiments.previous_results_dir``) must exist: a wrong
    path would silently run every run again."""
    if directory and not os.path.isdir(directory):
        raise AutoTVMError(f"config key experiments.previous_results_dir: {directory!r} is not a folder; give the "
                           "folder of an earlier experiment's outputs (<save_path>/<save_name>)")


class SavedRuns:
    """Runs keyed by (what was tuned, label, seed, trial budget); ``unit`` names what was tuned
    (an operator workload, or a model)."""

    unit = "op"

    def __init__(self, name: str, config: Config, option: dict, trials: int) -> None:
        self.name, self.config, self.option, self.trials = name, config, option, trials
        exp = config.experiments
        self.seeds = range(exp.repeats)
        self.out_dir = writable_dir(os.path.join(exp.out_dir, name), "experiments.save_path")
        self.previous = self._load_previous(exp.previous_results_dir)
        self.runs: list[dict] = []

    def _load_previous(self, directory: str | None) -> dict:
        if not directory:
            return {}
        check_previous_results_dir(directory)
        path = os.path.join(directory, self.name, "runs.json")
        if not os.path.exists(path):
            path = os.path.join(directory, "runs.json")
        if not os.path.exists(path):
            return {}
        with open(path, encoding="utf-8") as handle:
            return {self._key(r): r for r in json.load(handle) if self.unit in r}

    def _key(self, run: dict) -> tuple:
        return (run[self.unit], run["label"], run["seed"], run["trials_budget"])

    def describe(self, run: dict) -> str:
        """One line on a finished run."""
        return (f"{run['op']:8} {run['label']:22} seed {run['seed']}: best {run['best_gflops']:7.2f} GFLOPS "
                f"({run['wall_seconds']:.1f} s)")

    def run(self, unit: str, label: str, seed: int, make: Callable[[], dict]) -> dict:
        """The saved run of (``unit``, ``label``, ``seed``) at this budget, else ``make()``'s, saved."""
        key = (unit, label, seed, self.trials)
        if key in self.previous:
            run = self.previous[key]
            print(f"  {self.name}: reusing {unit} {label} seed {seed}")
        else:
            run = make()
            run.update(label=label, trials_budget=self.trials)
            print(f"  {self.name}: {self.describe(run)}", flush=True)
        self.runs.append(run)
        self.save()
        return run

    def save(self) -> None:
        with open(os.path.join(self.out_dir, "runs.json"), "w", encoding="utf-8") as handle:
            json.dump(self.runs, handle)

    def write_csv(self, name: str, rows: list[dict]) -> None:
        with open(os.path.join(self.out_dir, name), "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def writable_dir(path: str, key: str) -> str:
    """Create ``path`` if needed; a clear error naming the config ``key`` if it cannot be written."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise AutoTVMError(f"config key {key}: cannot create {path!r} ({err.strerror})") from None
    if not os.access(path, os.W_OK):
        raise AutoTVMError(f"config key {key}: {path!r} is not writable")
    return path
