"""Plots of the evaluation framework (matplotlib, written as PNG files)."""

from __future__ import annotations

import textwrap
from typing import Any, Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .stats import MIN_SEEDS  # noqa: E402


def _save(fig: plt.Figure, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _spread(ax: Any, x: Any, data: np.ndarray, color: Any) -> None:
    """How the seeds spread around a median curve: the 25-75% band from ``MIN_SEEDS`` seeds, with
    fewer each seed's own curve (a band over two or three seeds would look like an interval)."""
    if len(data) >= MIN_SEEDS:
        ax.fill_between(x, np.percentile(data, 25, axis=0), np.percentile(data, 75, axis=0), color=color, alpha=0.18)
    elif len(data) > 1:
        for row in data:
            ax.plot(x, row, color=color, linewidth=0.6, alpha=0.5)


SPREAD = f"median over seeds; 25-75% band from {MIN_SEEDS} seeds, else each seed"


def tuning_curves(runs: Iterable[dict], path: str, title: str, label_key: str = "tuner") -> None:
    """Best GFLOPS vs trials per workload: the median over seeds and how the seeds spread."""
    runs = list(runs)
    ops = sorted({r["op"] for r in runs})
    fig, axes = plt.subplots(1, len(ops), figsize=(5.5 * len(ops), 4.2), squeeze=False)
    for ax, op in zip(axes[0], ops):
        labels = sorted({r[label_key] for r in runs if r["op"] == op})
        for label in labels:
            curves = [r["curve"] for r in runs if r["op"] == op and r[label_key] == label and r["curve"]]
            if not curves:
                continue
            length = min(len(c) for c in curves)
            data = np.array([c[:length] for c in curves])
            x = np.arange(1, length + 1)
            median = np.median(data, axis=0)
            (line,) = ax.plot(x, median, label=f"{label} (n={len(curves)})", linewidth=1.8)
            _spread(ax, x, data, line.get_color())
        ax.set_title(op)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOPS so far")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{title}  ({SPREAD})")
    _save(fig, path)


def bar_chart(rows: list[dict], path: str, subtitle: str = "") -> None:
    """Inference time per model and variant: the median, with error bars from the min to the max
    of the timed rounds (means would let one outlier become the picture)."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    width = 0.8 / len(variants)
    size = max(5.5, 1.8 * len(models) + 2.5)
    fig, ax = plt.subplots(figsize=(size, 4.6))
    for i, variant in enumerate(variants):
        values = [next((r for r in rows if r["model"] == m and r["variant"] == variant), None) for m in models]
        x = np.arange(len(models)) + i * width
        median = np.array([v["median_ms"] if v else np.nan for v in values])
        low = np.array([v.get("min_ms", v["median_ms"]) if v else np.nan for v in values])
        high = np.array([v.get("max_ms", v["median_ms"]) if v else np.nan for v in values])
        ax.bar(x, median, width, yerr=[median - low, high - median], label=variant, capsize=3)
    ax.set_xticks(np.arange(len(models)) + width * (len(variants) - 1) / 2, models)
    ax.set_ylabel("inference time, ms (lower is better)")
    ax.set_yscale("log")
    # the subtitle (device, precision, threads) in lines the figure's width holds
    ax.set_title("\n".join(["Inference time per model: median, min-max bars", *textwrap.wrap(subtitle, int(8 * size))]),
                 fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def hyperparameter_bars(rows: list[dict], path: str) -> None:
    """Final best GFLOPS per hyperparameter trial: mean over seeds with std error bars."""
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 2), 4.5))
    x = np.arange(len(rows))
    ax.bar(x, [r["mean_best_gflops"] for r in rows], yerr=[r["std_best_gflops"] for r in rows], capsize=3,
           color="tab:blue")
    ax.set_xticks(x, [r["label"] for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("best GFLOPS (mean over seeds and workloads)")
    ax.set_title("GA-DQN hyperparameter trials (random search)")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def monitor_plots(monitor: list[dict], path: str, title: str) -> None:
    """Loss, reward, epsilon, GFLOPS and the two agents' action histograms of one GA-DQN run."""
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    trial = [m["trial"] for m in monitor]

    def series(key: str) -> tuple[list, list]:
        pts = [(m["trial"], m[key]) for m in monitor if m.get(key) is not None]
        return [p[0] for p in pts], [p[1] for p in pts]

    for ax, key, label in ((axes[0][0], "mutation_loss", "mutation agent"), (axes[0][0], "crossover_loss", "crossover agent")):
        xs, ys = series(key)
        if ys:
            ax.plot(xs, ys, ".", alpha=0.5, label=label)
    axes[0][0].set(title="Huber loss per training step", xlabel="trial", ylabel="loss")
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend()
    else:  # a run shorter than the agents' warm-up (learning_starts) has no training step
        axes[0][0].text(0.5, 0.5, "no training step yet", ha="center", va="center", transform=axes[0][0].transAxes)
    xs, ys = series("reward")
    axes[0][1].plot(xs, ys, ".", alpha=0.5)
    if len(ys) >= 10:
        k = 10
        axes[0][1].plot(xs[k - 1:], np.convolve(ys, np.ones(k) / k, mode="valid"), label="moving mean (10)")
        axes[0][1].legend()
    axes[0][1].set(title="reward of each child", xlabel="trial", ylabel="reward")
    xs, ys = series("epsilon")
    axes[0][2].plot(xs, ys)
    axes[0][2].set(title="exploration rate (epsilon)", xlabel="trial", ylabel="epsilon")
    axes[1][0].plot(trial, [m["best_gflops"] for m in monitor], label="best")
    axes[1][0].plot(trial, [m["mean_gflops"] for m in monitor], label="mean of measured")
    axes[1][0].set(title="GFLOPS", xlabel="trial", ylabel="GFLOPS")
    axes[1][0].legend()
    for ax, key, name in ((axes[1][1], "crossover_action", "crossover point"), (axes[1][2], "mutated_knob", "mutated knob")):
        values = [m[key] for m in monitor if m.get(key) is not None]
        if values:
            ax.hist(values, bins=np.arange(max(values) + 2) - 0.5, rwidth=0.85)
        ax.set(title=f"chosen {name}", xlabel=name, ylabel="count")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    _save(fig, path)


def latency_curves(runs: list[dict], path: str) -> None:
    """Model latency against tuning time per tuner, one panel per model: at each checkpoint the
    median over seeds of the seconds and of the latency, with the 25-75% band of the latency. The
    untuned build (checkpoint 0) is named in the title, not drawn: it can be 100x the tuned ones.
    Where the curves still span more than 4x (early checkpoints with functions not yet tuned),
    the latency axis is logarithmic, so the tuners' final differences of a few percent stay visible."""
    models = list(dict.fromkeys(r["model"] for r in runs))
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.4), squeeze=False)
    for ax, model in zip(axes[0], models):
        drawn: list[float] = []
        for label in dict.fromkeys(r["label"] for r in runs if r["model"] == model):
            group = [r["checkpoints"] for r in runs if r["model"] == model and r["label"] == label]
            points = range(1, min(len(c) for c in group))
            seconds = np.median([[c[k]["seconds"] for k in points] for c in group], axis=0)
            latency = np.array([[c[k]["latency_ms"] for k in points] for c in group])
            (line,) = ax.plot(seconds, np.median(latency, axis=0), marker="o", markersize=3,
                              label=f"{label} (n={len(group)})", linewidth=1.8)
            _spread(ax, seconds, latency, line.get_color())
            drawn += list(latency.ravel())
        untuned = next(r["checkpoints"][0]["latency_ms"] for r in runs if r["model"] == model)
        log = bool(drawn) and max(drawn) > 4 * min(drawn)
        if log:
            ax.set_yscale("log")
        ax.set(title=f"{model} (untuned: {untuned:.4g} ms)", xlabel="tuning time, s",
               ylabel=f"model latency, ms{', log scale' if log else ''} (lower is better)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    fig.suptitle(f"Model latency along the tuning budget\n({SPREAD})", fontsize=11)
    _save(fig, path)


def latency_bars(rows: list[dict], references: dict[str, dict[str, float]], path: str) -> None:
    """Median model latency per tuner with its seeds as dots, one panel per model, with PyTorch
    eager as a dashed line and the untuned build's latency in the title."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(max(5.0, 4.5 * len(models)), 4.4), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = [r for r in rows if r["model"] == model]
        ax.bar(range(len(mine)), [r["latency_ms"] for r in mine], color="tab:blue", alpha=0.8)
        for i, r in enumerate(mine):
            ax.plot([i] * len(r["seed_latencies_ms"]), r["seed_latencies_ms"], "k.", markersize=5)
        ax.set_xticks(range(len(mine)), [r["tuner"] for r in mine], rotation=30, ha="right", fontsize=8)
        ax.axhline(references[model]["pytorch-eager"], color="black", linestyle="--", linewidth=1,
                   label="pytorch-eager")
        ax.set(title=f"{model} (untuned: {references[model]['tvm-untuned']:.4g} ms)",
               ylabel="model latency, ms (lower is better)")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Tuned model latency per tuner\n(median over seeds; dots: each seed)", fontsize=11)
    _save(fig, path)
