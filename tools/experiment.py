"""``driver.py -m=experiment``: named experiments that compare tuners and end in plots.

Each experiment writes under ``<save_path>/<save_name>/<experiment>/``: ``runs.json`` (every
run's raw data), ``summary.csv``, ``ratios.txt`` (the geometric-mean ratios that answer the
experiment's question, with 90% bootstrap intervals over seeds) and PNG plots. With
``remeasure`` N > 0, each run's best config is measured again N times and ``remeasured.json``,
``summary_remeasured.csv`` and more ratio lines give the comparison on those timings (their
median, then their fastest). With ``previous_results_dir`` set, runs already saved there (same
experiment, workload, variant, seed and trial budget) are reused, not re-run.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
from typing import Any, Callable

import numpy as np

from rl_tuner.gadqn_tuner import REWARDS

from .compare import (format_ratios, format_table, ratio_lines, ratios_with_intervals, remeasure_bests,
                      remeasured_ratio_lines, remeasured_runs, run_metaschedule, run_tuner, summarise)
from .measure_setup import measure_option_from_settings
from .model_experiment import format_model_table, model_tuners
from .plots import hyperparameter_bars, monitor_plots, tuning_curves
from .saved_runs import Result, SavedRuns
from .tuners import base_tuner


class Experiment(SavedRuns):
    """An experiment on operator workloads: its runs, summary, ratios and curves."""

    def __init__(self, name: str, config: dict, option: dict) -> None:
        super().__init__(name, config, option, config["experiments"]["trials"])
        self.workloads = config["experiments"]["workloads"]

    def tuner_run(self, op: str, label: str, seed: int, tuner: str, options: dict | None = None) -> dict:
        settings = self.config["autotuner_settings"]
        opts = {**settings.get("tuner_options", {}), **(options or {})}
        if tuner == "metaschedule":
            return self.run(op, label, seed, lambda: run_metaschedule(
                op, seed, self.trials, settings["number"], settings["repeat"], settings["min_repeat_ms"],
                settings["n_parallel"], self.config["target"]))
        return self.run(op, label, seed, lambda: run_tuner(op, tuner, seed, self.trials, self.option, opts,
                                                          self.config["target"]))

    def finish(self, title: str, pairs: list[tuple[str, str]] | None = None) -> Result:
        """Write the summary, the ratios of ``pairs`` (label, baseline label) and the curves;
        return the summary rows and the ratio lines."""
        labelled = [dict(r, tuner=r["label"]) for r in self.runs]
        rows = summarise(labelled)
        self.write_csv("summary.csv", rows)
        measured = ratios_with_intervals(rows, labelled, pairs or [])
        ratios = format_ratios(measured)
        if measured and all(low <= 1.0 <= high for *_, low, high in measured):
            ratios.append(f"Nothing above is settled: every 90% interval includes 1 with {len(self.seeds)} seed(s) per "
                          "variant; raise experiments.repeats to tell the tuners apart (docs/findings.md used 21).")
        if self.config["experiments"]["remeasure"]:
            ratios += self._remeasured(labelled, self.config["experiments"]["remeasure"], pairs or [])
        if ratios:
            with open(os.path.join(self.out_dir, "ratios.txt"), "w", encoding="utf-8") as handle:
                handle.write("\n".join(ratios) + "\n")
        tuning_curves(self.runs, os.path.join(self.out_dir, "curves.png"), title, label_key="label")
        return rows, ratios

    def _remeasured(self, labelled: list[dict], rounds: int, pairs: list[tuple[str, str]]) -> list[str]:
        """``experiments.remeasure``: each run's final best config measured again ``rounds``
        times, a workload's configs together (``remeasured.json``), and the summary
        (``summary_remeasured.csv``) and ratio lines over those timings, read as their median,
        then as their fastest. A run's best is the largest of its noisy timings and reads high,
        by more than the gaps between tuners on a noisy machine (docs/findings.md, "How much
        is there to find above GA?"); the two readings of the timings again can differ by
        several points too, so both are shown before one is quoted."""
        path = os.path.join(self.out_dir, "remeasured.json")
        done = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else None

        def save(again: dict) -> None:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(again, handle)

        again = remeasure_bests(labelled, rounds, done, save, self.option, target=self.config["target"])
        runs = remeasured_runs(labelled, again)
        if not runs:  # e.g. only MetaSchedule's runs, which do not record their configs
            return []
        rows = summarise(runs)
        self.write_csv("summary_remeasured.csv", rows)
        lines = ratio_lines(rows, runs, pairs)
        if not lines:
            return []
        return ([f"each run's best config measured again ({rounds} times):"] + lines
                + [f"the same, each config read as the fastest of its {rounds} timings:"]
                + remeasured_ratio_lines(labelled, again, pairs, "fastest"))


def _compare(name: str, config: dict, option: dict, variants: list[tuple[str, str, dict]], title: str,
             pairs: list[tuple[str, str]]) -> Result:
    exp = Experiment(name, config, option)
    for seed in exp.seeds:
        for op in exp.workloads:
            for label, tuner, options in variants:
                exp.tuner_run(op, label, seed, tuner, options)
    return exp.finish(title, pairs)


def compare_tuners(config: dict, option: dict) -> Result:
    """Every tuner of ``experiments.tuners``; NAME@LABEL is NAME with ``experiments.tuner_options``
    of NAME@LABEL (e.g. ``ga@screen`` with ``{"screen": 16}``). Ratios: each variant over its
    plain tuner, then GA-DQN (else the first tuner) over each other one."""
    tuners, per_tuner = config["experiments"]["tuners"], config["experiments"]["tuner_options"]
    variants = [(t, base_tuner(t), per_tuner.get(t, {})) for t in tuners]
    pairs = [(t, base_tuner(t)) for t in tuners if "@" in t and base_tuner(t) in tuners]
    reference = "ga-dqn" if "ga-dqn" in tuners else tuners[0]
    pairs += [(reference, t) for t in tuners if t != reference and (t, reference) not in pairs]
    return _compare("compare_tuners", config, option, variants, "All tuners", pairs)


def compare_gadqn_ga(config: dict, option: dict) -> Result:
    return _compare("compare_gadqn_ga", config, option, [("ga", "ga", {}), ("ga-dqn", "ga-dqn", {})], "GA-DQN vs GA",
                    [("ga-dqn", "ga")])


# (label, tuner, options) of GA-DQN's random-action ablation, the control of the reward and ablation experiments
ABLATION_VARIANT = ("ga-dqn-random-actions", "ga-dqn-random", {})


def compare_reward(config: dict, option: dict) -> Result:
    """Every reward function against GA and the random-action ablation: the ablation learns
    nothing, so a reward earns its keep only by beating it (measured on the real ops, none did;
    docs/findings.md)."""
    variants = [("ga", "ga", {}), ABLATION_VARIANT] + [(f"ga-dqn[{r}]", "ga-dqn", {"reward": r}) for r in REWARDS]
    pairs = [(label, ABLATION_VARIANT[0]) for label, _, _ in variants[2:]]
    return _compare("compare_reward", config, option, variants, "GA-DQN reward functions vs GA and the ablation",
                    pairs)


def ablation(config: dict, option: dict) -> Result:
    variants = [("ga-dqn", "ga-dqn", {}), ABLATION_VARIANT]
    return _compare("ablation", config, option, variants, "GA-DQN vs the same GA with random actions",
                    [("ga-dqn", ABLATION_VARIANT[0])])


HYPERPARAMETER_SPACE = {
    "lr": [3e-4, 1e-3, 3e-3],
    "gamma": [0.0, 0.5, 0.9],
    "hidden": [[32, 32], [64, 64], [128, 128]],
    "eps_decay_steps": [50, 100, 200],
    "learning_starts": [8, 16, 32],
    "double_dqn": [True, False],
}


def trial_hyperparameters(config: dict, option: dict) -> Result:
    """Random search over DQN hyperparameters; a bar per trial with error bars over seeds."""
    exp = Experiment("trial_hyperparameters", config, option)
    rng = np.random.default_rng(config["autotuner_settings"]["seed"] or 0)
    trials = []
    for t in range(config["experiments"]["hyperparameter_trials"]):
        dqn = {k: v[int(rng.integers(len(v)))] for k, v in HYPERPARAMETER_SPACE.items()}
        label = f"h{t}:lr={dqn['lr']:g},g={dqn['gamma']},h={dqn['hidden'][0]},eps={dqn['eps_decay_steps']}"
        bests = [exp.tuner_run(op, label, seed, "ga-dqn", {"dqn": dqn})["best_gflops"]
                 for seed in exp.seeds for op in exp.workloads]
        trials.append({"label": label, **{k: json.dumps(v) for k, v in dqn.items()},
                       "mean_best_gflops": statistics.mean(bests),
                       "std_best_gflops": statistics.stdev(bests) if len(bests) > 1 else 0.0})
    hyperparameter_bars(trials, os.path.join(exp.out_dir, "hyperparameters.png"))
    with open(os.path.join(exp.out_dir, "hyperparameters.csv"), "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(trials[0]))
        writer.writeheader()
        writer.writerows(trials)
    return exp.finish("GA-DQN hyperparameter trials")


def gadqn_monitor(config: dict, option: dict) -> Result:
    """One GA-DQN run per workload with its monitoring data plotted (loss, reward, epsilon, actions)."""
    exp = Experiment("gadqn_monitor", config, option)
    for op in exp.workloads:
        run = exp.tuner_run(op, "ga-dqn", 0, "ga-dqn")
        with open(os.path.join(exp.out_dir, f"monitor-{op}.json"), "w", encoding="utf-8") as handle:
            json.dump(run.get("monitor", []), handle)
        monitor_plots(run.get("monitor", []), os.path.join(exp.out_dir, f"monitor-{op}.png"),
                      f"GA-DQN monitoring on {op} ({exp.trials} trials)")
    return exp.finish("GA-DQN monitored run")


EXPERIMENT_FUNCS: dict[str, Callable[[dict, dict], Result]] = {
    "compare_tuners": compare_tuners, "compare_gadqn_ga": compare_gadqn_ga, "compare_reward": compare_reward,
    "ablation": ablation, "trial_hyperparameters": trial_hyperparameters, "gadqn_monitor": gadqn_monitor,
    "model_tuners": model_tuners,
}


# the table printer and the plots named for experiments whose outputs differ from the operator experiments'
MODEL_OUTPUTS = {"model_tuners": (format_model_table, "curves.png, bars.png; table.csv: the table above; logs/: every "
                                                      "run's records")}


def run_experiments(config: dict) -> dict[str, Any]:
    option = measure_option_from_settings(config["autotuner_settings"])
    results = {}
    for name in config["experiments"]["names"]:
        print(f"== experiment {name}", flush=True)
        rows, ratios = EXPERIMENT_FUNCS[name](config, option)
        table, plots = MODEL_OUTPUTS.get(name, (format_table, "curves.png"))
        print(table(rows))
        if ratios:
            print("\n".join(ratios))
        exp = config["experiments"]
        out_dir = os.path.join(exp["save_path"], exp["save_name"], name)
        print(f"wrote {out_dir}/: runs.json (every run), summary.csv, ratios.txt and the plots ({plots})")
        results[name] = rows
    return results
