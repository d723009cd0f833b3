"""The experiments of ``-m=experiment``, each a function ``(config, measure_option) -> (rows,
ratio lines)``, and their registry ``EXPERIMENTS`` (which the config schema's enum reads).

Operator experiments tune workloads of ``experiments.workloads`` with tuners and seeds and write
under ``<save_path>/<save_name>/<experiment>/``: ``runs.json`` (every run's raw data),
``summary.csv``, ``ratios.txt`` (geometric-mean ratios with their intervals over seeds, or the
per-seed ratios with fewer than ``tools.stats.MIN_SEEDS`` seeds) and PNG plots. With
``remeasure`` N > 0, each run's best config is measured again N times and ``remeasured.json``,
``summary_remeasured.csv`` and more ratio lines give the comparison on those timings (their
median, then their fastest). With ``previous_results_dir`` set, runs already saved there (same
experiment, workload, variant, seed and trial budget) are reused, not re-run. ``model_tuners``
(``tools.model_tuners``) compares the tuners on whole models.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
from typing import Any, Callable

import numpy as np
import tabulate

from rl_tuner.gadqn_tuner import REWARDS

import autotvm
from autotvm.checks import AutoTVMError

from . import metaschedule, stats
from .headroom import headroom_runtimes
from .model_tuners import model_tuners
from .plots import hyperparameter_bars, monitor_plots, tuning_curves
from .saved_runs import Result, SavedRuns
from .settings import Config
from .tuners import base_tuner
from .stats import best_index_at
from .timing import time_interleaved
from .tuning import remeasure_bests, run_tuner
from .workloads import workload


class Experiment(SavedRuns):
    """An experiment on operator workloads: its runs, summary, ratios and curves."""

    def __init__(self, name: str, config: Config, option: dict) -> None:
        super().__init__(name, config, option, config.experiments.trials)
        self.workloads = config.experiments.workloads

    def tuner_run(self, op: str, label: str, seed: int, tuner: str, options: dict | None = None,
                  callbacks: list | None = None) -> dict:
        settings = self.config.autotuner_settings
        if tuner == "metaschedule":
            return self.run(op, label, seed, lambda: metaschedule.run_on_op(op, seed, self.trials, settings,
                                                                             self.config.target))
        opts = {**settings.tuner_options, **(options or {})}
        return self.run(op, label, seed, lambda: run_tuner(op, tuner, seed, self.trials, self.option, opts,
                                                          self.config.target, callbacks=callbacks))

    def finish(self, title: str, pairs: list[tuple[str, str]] | None = None) -> Result:
        """Write the summary, the ratios of ``pairs`` (label, baseline label) and the curves;
        return the summary rows and the ratio lines."""
        labelled = [dict(r, tuner=r["label"]) for r in self.runs]
        rows = stats.summarise(labelled)
        self.write_csv("summary.csv", rows)
        ratios = stats.ratio_lines(labelled, pairs or [])
        warning = stats.unsettled(labelled, pairs or [])
        ratios += [warning] if warning else []
        if self.config.experiments.remeasure:
            ratios += self._remeasured(labelled, self.config.experiments.remeasure, pairs or [])
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
        by more than the gaps between tuners on a noisy machine (docs/findings.md, timing noise);
        the two readings of the timings again can differ by several points too, so both are shown."""
        path = os.path.join(self.out_dir, "remeasured.json")
        done = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else None

        def save(again: dict) -> None:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(again, handle)

        again = remeasure_bests(labelled, rounds, self.option, done, save, target=self.config.target)
        runs = stats.remeasured_runs(labelled, again)
        if not runs:  # e.g. only MetaSchedule's runs, which do not record their configs
            return []
        self.write_csv("summary_remeasured.csv", stats.summarise(runs))
        lines = stats.ratio_lines(runs, pairs)
        if not lines:
            return []
        return ([f"each run's best config measured again ({rounds} times):"] + lines
                + [f"the same, each config read as the fastest of its {rounds} timings:"]
                + stats.ratio_lines(stats.remeasured_runs(labelled, again, "fastest"), pairs))


def _compare(name: str, config: Config, option: dict, variants: list[tuple[str, str, dict]], title: str,
             pairs: list[tuple[str, str]]) -> Result:
    exp = Experiment(name, config, option)
    for seed in exp.seeds:
        for op in exp.workloads:
            for label, tuner, options in variants:
                exp.tuner_run(op, label, seed, tuner, options)
    return exp.finish(title, pairs)


def compare_tuners(config: Config, option: dict) -> Result:
    """Every tuner of ``experiments.tuners``; NAME@LABEL is NAME with ``experiments.tuner_options``
    of NAME@LABEL (e.g. ``ga@screen`` with ``{"screen": 16}``). Ratios: each variant over its
    plain tuner, then GA-DQN (else the first tuner) over each other one."""
    tuners, per_tuner = config.experiments.tuners, config.experiments.tuner_options
    variants = [(t, base_tuner(t), per_tuner.get(t, {})) for t in tuners]
    pairs = [(t, base_tuner(t)) for t in tuners if "@" in t and base_tuner(t) in tuners]
    reference = "ga-dqn" if "ga-dqn" in tuners else tuners[0]
    pairs += [(reference, t) for t in tuners if t != reference and (t, reference) not in pairs]
    return _compare("compare_tuners", config, option, variants, "All tuners", pairs)


def compare_gadqn_ga(config: Config, option: dict) -> Result:
    return _compare("compare_gadqn_ga", config, option, [("ga", "ga", {}), ("ga-dqn", "ga-dqn", {})], "GA-DQN vs GA",
                    [("ga-dqn", "ga")])


# (label, tuner, options) of GA-DQN's random-action ablation, the control of the reward and ablation experiments
ABLATION_VARIANT = ("ga-dqn-random-actions", "ga-dqn-random", {})


def compare_reward(config: Config, option: dict) -> Result:
    """Every reward function against GA and the random-action ablation: the ablation learns
    nothing, so a reward earns its keep only by beating it."""
    variants = [("ga", "ga", {}), ABLATION_VARIANT] + [(f"ga-dqn[{r}]", "ga-dqn", {"reward": r}) for r in REWARDS]
    pairs = [(label, ABLATION_VARIANT[0]) for label, _, _ in variants[2:]]
    return _compare("compare_reward", config, option, variants, "GA-DQN reward functions vs GA and the ablation",
                    pairs)


def ablation(config: Config, option: dict) -> Result:
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


def trial_hyperparameters(config: Config, option: dict) -> Result:
    """Random search over DQN hyperparameters; a bar per trial with error bars over seeds."""
    exp = Experiment("trial_hyperparameters", config, option)
    rng = np.random.default_rng(config.autotuner_settings.seed or 0)
    trials = []
    for t in range(config.experiments.hyperparameter_trials):
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


def gadqn_monitor(config: Config, option: dict) -> Result:
    """One GA-DQN run per workload with its monitoring data plotted (loss, reward, epsilon, actions)."""
    exp = Experiment("gadqn_monitor", config, option)
    for op in exp.workloads:
        run = exp.tuner_run(op, "ga-dqn", 0, "ga-dqn")
        with open(os.path.join(exp.out_dir, f"monitor-{op}.json"), "w", encoding="utf-8") as handle:
            json.dump(run.get("monitor", []), handle)
        monitor_plots(run.get("monitor", []), os.path.join(exp.out_dir, f"monitor-{op}.png"),
                      f"GA-DQN monitoring on {op} ({exp.trials} trials)")
    return exp.finish("GA-DQN monitored run")


def throughput(config: Config, option: dict) -> Result:
    """Tuning speed on each workload, seed 0: trials per second of the random and XGB tuners
    against MetaSchedule's ``tune_tir`` (same budget and measurement; ``steady``: after the first
    10 trials, the workers' start-up left out), the tuners' own share of the wall time, and the peak
    memory of the tuning process and its workers during the random run (sampled after each batch).
    ``summary.csv`` holds the table."""
    exp = Experiment("throughput", config, option)
    rows = []
    for op in exp.workloads:
        for tuner in ("random", "xgb", "metaschedule"):
            peak = [0.0]

            def sample(tuner_obj: Any, inputs: list, results: list) -> None:
                peak[0] = max(peak[0], _tree_rss_mib())

            run = exp.tuner_run(op, tuner, 0, tuner, callbacks=[sample] if tuner == "random" else None)
            elapsed = run.get("elapsed", [])
            steady = (len(elapsed) - 11) / (elapsed[-1] - elapsed[10]) if len(elapsed) > 11 else None
            rows.append({"op": op, "tuner": tuner, "trials": run["trials"], "wall_s": run["wall_seconds"],
                         "trials_per_s": run["trials"] / run["wall_seconds"], "steady_trials_per_s": steady,
                         "overhead": run["overhead"], "best_gflops": run["best_gflops"],
                         "peak_rss_mib": run.get("peak_rss_mib", peak[0] or None)})
            run.setdefault("peak_rss_mib", peak[0] or None)
    exp.save()
    exp.write_csv("summary.csv", rows)
    tuning_curves(exp.runs, os.path.join(exp.out_dir, "curves.png"), "Tuning speed", label_key="label")
    ratios = [f"{op}: {r['tuner']} {r['trials_per_s']:.2f} trials/s over MetaSchedule's {m['trials_per_s']:.2f}: "
              f"{r['trials_per_s'] / m['trials_per_s']:.2f}x" for op in exp.workloads
              for m in rows if m["op"] == op and m["tuner"] == "metaschedule"
              for r in rows if r["op"] == op and r["tuner"] != "metaschedule"]
    with open(os.path.join(exp.out_dir, "ratios.txt"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(ratios) + "\n")
    return rows, ratios


def _tree_rss_mib() -> float:
    """Resident memory of this process and its children (the builder and runner workers), MiB."""
    import psutil

    total = 0
    for proc in [psutil.Process()] + psutil.Process().children(recursive=True):
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def format_throughput(rows: list[dict]) -> str:
    table = [[r["op"], r["tuner"], r["trials"], f"{r['wall_s']:.1f}", f"{r['trials_per_s']:.2f}",
              "-" if r["steady_trials_per_s"] is None else f"{r['steady_trials_per_s']:.2f}",
              "-" if r["overhead"] is None else f"{100 * r['overhead']:.2f}%", f"{r['best_gflops']:.1f}",
              "-" if r["peak_rss_mib"] is None else f"{r['peak_rss_mib']:.0f}"] for r in rows]
    return tabulate.tabulate(table, headers=["op", "tuner", "trials", "wall s", "trials/s", "steady trials/s",
                                             "overhead", "best GFLOPS", "peak MiB"])


def bf16_headroom(config: Config, option: dict) -> Result:
    """What bfloat16 can give a matmul on this CPU, before any model uses it: for each matmul
    workload, TVM in float32 tuned by GA-DQN (``experiments.trials``), TVM in bfloat16 with the
    micro-kernel (``autotvm.task.x86_bf16``, on AMX's tiles where the CPU has them, every tile that
    fits, the fastest kept), OpenVINO's fully connected layer at its default precision and held to
    float32, and PyTorch's ``linear`` in float32 and bfloat16, all on the target's cores, timed
    together in interleaved rounds (``run_settings.repeat``). ``summary.csv``: each one's median ms and GFLOP/s, with
    OpenVINO's own per-layer time beside its whole call."""
    from autotvm.task import x86_bf16

    target = autotvm.make_target(config.target)
    if not x86_bf16.cpu_has_bf16(target):
        raise AutoTVMError(f"bf16_headroom needs a CPU with AVX512-BF16; {target.attrs.get('mcpu', 'this CPU')!r} has none")
    exp = Experiment("bf16_headroom", config, option)
    threads = autotvm.runtime_threads(target)
    autotvm.use_runtime_threads(threads)
    rows = []
    for op in exp.workloads:
        work = workload(op)
        if work.kind != "matmul":
            raise AutoTVMError(f"experiments.workloads: bf16_headroom times matmuls; {op!r} is a {work.kind}")
        m, k, n = work.shape["n"], work.shape["k"], work.shape["m"]
        run = exp.tuner_run(op, "ga-dqn", 0, "ga-dqn")
        runtimes, notes = headroom_runtimes(op, m, k, n, best_index_at(run), target, threads)
        timings = time_interleaved(runtimes, config.run_settings.repeat, config.run_settings.number)
        flop = 2.0 * m * k * n
        for rt in runtimes:
            median = timings[rt.variant]["median_ms"]
            rows.append({"op": op, "variant": rt.variant, "precision": rt.precision, "median_ms": median,
                         "gflops": flop / median / 1e6, "note": notes.get(rt.variant, "")})
    exp.write_csv("summary.csv", rows)
    return rows, []


def format_headroom(rows: list[dict]) -> str:
    return tabulate.tabulate([[r["op"], r["variant"], r["precision"], f"{r['median_ms']:.4f}", f"{r['gflops']:.0f}",
                               r["note"]] for r in rows],
                             headers=["op", "variant", "precision", "median ms", "GFLOP/s", ""])


# name -> the experiment; the config's ``experiments.names`` takes these
EXPERIMENTS: dict[str, Callable[[Config, dict], Result]] = {
    "compare_tuners": compare_tuners, "compare_gadqn_ga": compare_gadqn_ga, "compare_reward": compare_reward,
    "ablation": ablation, "trial_hyperparameters": trial_hyperparameters, "gadqn_monitor": gadqn_monitor,
    "model_tuners": model_tuners, "throughput": throughput, "bf16_headroom": bf16_headroom,
}
