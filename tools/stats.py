"""The statistics the experiments report: medians over seeds, geometric-mean ratios between
tuners, their bootstrap intervals, and time to quality.

A run is a dict with at least ``op`` (what was tuned), ``tuner``, ``seed`` and the value compared
(``best_gflops`` by default, larger is better). An interval over seeds is given only from
``MIN_SEEDS`` seeds per tuner: with fewer, a bootstrap redraws the same two or three values and
its "interval" says nothing, so the per-seed ratios are shown instead.
"""

from __future__ import annotations

import statistics
from typing import Callable, Iterable

import numpy as np
import tabulate

MIN_SEEDS = 5  # seeds per tuner (and per op) below which no interval is given
LEVEL = 0.9  # the intervals' confidence level


def trials_to_fraction(curve: list[float], fraction: float = 0.9) -> int | None:
    """1-based trial at which the best-so-far first reaches ``fraction`` of its final value."""
    if not curve or curve[-1] <= 0:
        return None
    goal = fraction * curve[-1]
    return next(i + 1 for i, v in enumerate(curve) if v >= goal)


def median_or_none(values: Iterable[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarise(runs: Iterable[dict]) -> list[dict]:
    """Median over seeds of best GFLOPS, trials to 90% and overhead, per (op, tuner)."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["op"], run["tuner"]), []).append(run)
    return [{"op": op, "tuner": tuner, "seeds": len(group),
             "median_best_gflops": statistics.median(r["best_gflops"] for r in group),
             "median_trials_to_90": median_or_none(r["trials_to_90"] for r in group),
             "median_overhead": median_or_none(r["overhead"] for r in group),
             "median_wall_seconds": statistics.median(r["wall_seconds"] for r in group)}
            for (op, tuner), group in sorted(groups.items())]


def _values(runs: Iterable[dict], value: str) -> dict[tuple, dict[int, float]]:
    """(op, tuner) -> seed -> value."""
    out: dict[tuple, dict[int, float]] = {}
    for run in runs:
        out.setdefault((run["op"], run["tuner"]), {})[run["seed"]] = run[value]
    return out


def geomean_ratio(runs: Iterable[dict], tuner: str, baseline: str, value: str = "best_gflops") -> float | None:
    """Geometric mean over ops of ``tuner``'s median over seeds over ``baseline``'s."""
    by = _values(runs, value)
    ratios = [statistics.median(by[(op, tuner)].values()) / statistics.median(by[(op, baseline)].values())
              for op, who in by if who == tuner and (op, baseline) in by]
    ratios = [r for r in ratios if np.isfinite(r) and r > 0]
    return float(np.exp(np.mean(np.log(ratios)))) if ratios else None


def per_seed_ratios(runs: Iterable[dict], tuner: str, baseline: str, value: str = "best_gflops") -> list[float]:
    """For each seed both tuners ran on every op: the geometric mean over ops of their ratio."""
    by = _values(runs, value)
    ops = [op for op, who in by if who == tuner and (op, baseline) in by]
    seeds = sorted(set.intersection(*[set(by[(op, tuner)]) & set(by[(op, baseline)]) for op in ops])) if ops else []
    return [float(np.exp(np.mean([np.log(by[(op, tuner)][s] / by[(op, baseline)][s]) for op in ops]))) for s in seeds]


def geomean_ratio_interval(runs: Iterable[dict], tuner: str, baseline: str, resamples: int = 2000, seed: int = 0,
                           value: str = "best_gflops") -> tuple[float, float] | None:
    """Percentile-bootstrap interval (``LEVEL``) of ``geomean_ratio`` over seeds
    (``scipy.stats.bootstrap``): each (op, tuner)'s seeds are redrawn with replacement,
    independently, and the ratio of the medians recomputed. ``None`` when a tuner has fewer
    than ``MIN_SEEDS`` seeds on an op, or the two share no op."""
    by = _values(runs, value)
    ops = [op for op, who in by if who == tuner and (op, baseline) in by]
    if not ops or min(len(by[(op, who)]) for op in ops for who in (tuner, baseline)) < MIN_SEEDS:
        return None
    samples = [np.log(np.maximum(list(by[(op, who)].values()), 1e-12)) for op in ops for who in (tuner, baseline)]

    def mean_log_ratio(*groups: np.ndarray, axis: int = -1) -> np.ndarray:
        medians = [np.median(g, axis=axis) for g in groups]
        return np.mean([medians[i] - medians[i + 1] for i in range(0, len(medians), 2)], axis=0)

    if all(np.ptp(sample) == 0 for sample in samples):  # every seed agrees: the interval is a point
        point = float(np.exp(mean_log_ratio(*samples)))
        return point, point
    import scipy.stats  # here: its import costs a tune's start half a second

    result = scipy.stats.bootstrap(samples, mean_log_ratio, n_resamples=resamples, confidence_level=LEVEL,
                                   method="percentile", paired=False, vectorized=True, rng=np.random.default_rng(seed))
    low, high = np.exp([result.confidence_interval.low, result.confidence_interval.high])
    return float(low), float(high)


def ratio_line(runs: list[dict], tuner: str, baseline: str, value: str = "best_gflops", name: str | None = None,
               note: str = "") -> str | None:
    """One line: ``tuner``'s geometric-mean ratio over ``baseline`` (``name``: how to call it, by
    default "tuner / baseline") and its interval over seeds, or with fewer than ``MIN_SEEDS``
    seeds the per-seed ratios; ``note``: words after them."""
    ratio = geomean_ratio(runs, tuner, baseline, value)
    if ratio is None:
        return None
    interval = geomean_ratio_interval(runs, tuner, baseline, value=value)
    if interval is not None:
        spread = f"{int(LEVEL * 100)}% bootstrap interval over seeds {interval[0]:.3f}-{interval[1]:.3f}"
    else:
        seeds = ", ".join(f"{r:.3f}" for r in per_seed_ratios(runs, tuner, baseline, value)) or "none paired"
        spread = f"per seed {seeds}; too few seeds for an interval, {MIN_SEEDS} needed"
    return f"{name or f'{tuner} / {baseline}'}: geometric mean {ratio:.3f} ({spread}{note})"


def ratio_lines(runs: list[dict], pairs: Iterable[tuple[str, str]], value: str = "best_gflops") -> list[str]:
    """``ratio_line`` of each (tuner, baseline) pair that both ran."""
    lines = [ratio_line(runs, tuner, base, value) for tuner, base in pairs]
    return [line for line in lines if line]


def unsettled(runs: list[dict], pairs: Iterable[tuple[str, str]]) -> str | None:
    """A warning when no pair's interval excludes 1 (or there are too few seeds for intervals)."""
    intervals = [geomean_ratio_interval(runs, tuner, base) for tuner, base in pairs
                 if geomean_ratio(runs, tuner, base) is not None]
    if intervals and all(i is None or i[0] <= 1.0 <= i[1] for i in intervals):
        return ("Nothing above is settled: no interval excludes 1, or there are too few seeds for one; raise "
                "experiments.repeats to tell the tuners apart (docs/findings.md used 21).")
    return None


# how a config's timings again are read. The median is the speed a config typically gives; the
# fastest drops the slow readings (a shared machine's outliers are slow ones), and with them how
# unsteady the config is, in which the tuners' bests differ
STATISTICS: dict[str, Callable[[list[float]], float]] = {"median": statistics.median, "fastest": max}


def best_index_at(run: dict, trials: int | None = None) -> int | None:
    """The config index that was the run's best after its first ``trials`` trials (all of them by
    default; ``None`` if every one failed, or for a run that did not record its configs, such as
    MetaSchedule's): the trial at which the best-so-far reached its value then."""
    curve = run["curve"][:trials]
    if not curve or curve[-1] <= 0 or "indices" not in run:
        return None
    return run["indices"][curve.index(curve[-1])]


def remeasured_runs(runs: list[dict], again: dict[str, dict[str, list[float]]],
                    statistic: str = "median") -> list[dict]:
    """The runs whose best config was measured again, with ``best_gflops`` the ``statistic``
    ("median" or "fastest", see ``STATISTICS``) of those measurements."""
    out = []
    for run in runs:
        values = again.get(run["op"], {}).get(str(best_index_at(run)))
        if values:
            out.append(run | {"best_gflops": STATISTICS[statistic](values)})
    return out


def format_table(rows: list[dict]) -> str:
    """``summarise``'s rows as an aligned text table."""
    table = [[r["op"], r["tuner"], r["seeds"], r["median_best_gflops"],
              "-" if r["median_trials_to_90"] is None else f"{r['median_trials_to_90']:.0f}",
              "-" if r["median_overhead"] is None else f"{100 * r['median_overhead']:.2f}%",
              r["median_wall_seconds"]] for r in rows]
    return tabulate.tabulate(table, headers=["op", "tuner", "seeds", "best GFLOPS", "trials->90%", "overhead",
                                             "wall s"], floatfmt=".2f", colalign=("left", "left", "right", "right",
                                                                                  "right", "right", "right"))


def arrival(checkpoints: list[dict], goal_ms: float) -> tuple[int | None, float | None]:
    """Time to quality: (trials, seconds) at the first checkpoint whose latency is within ``goal_ms``."""
    hit = next((c for c in checkpoints if c["latency_ms"] <= goal_ms), None)
    return (hit["trials"], hit["seconds"]) if hit else (None, None)
