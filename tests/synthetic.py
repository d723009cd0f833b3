"""A synthetic objective for unit-testing search logic without building anything."""

from __future__ import annotations

import time

import numpy as np

from autotvm.measure.measure import MeasureErrorNo, MeasureResult, failed
from autotvm.task.space import ConfigSpace


class SyntheticTask:
    """A task-like object: a knob space and a FLOP count, scored by ``objective(knob) -> GFLOPS``."""

    def __init__(self, dims, objective, name="synthetic", space=None):
        self.name, self.args, self.target = name, (), None
        self.config_space = space or ConfigSpace()
        for i, d in enumerate(dims if space is None else ()):
            self.config_space.define_knob(f"k{i}", list(range(d)))
        self.flop = 1e9
        self.objective = objective
        self.weight = 1


def synthetic_measure(task):
    def measure(inputs):
        out = []
        for inp in inputs:
            gflops = task.objective(inp.config.knob)
            if gflops <= 0:
                out.append(failed(MeasureErrorNo.RUNTIME_DEVICE, "synthetic failure"))
            else:
                out.append(MeasureResult((1.0 / gflops,), 0, 0.0, time.time()))
        return out

    return measure


def one_knob_dominates(dims=(16, 8, 8, 8, 8, 8), peak=11, seed=0):
    """GFLOPS rise sharply as knob 0 nears ``peak``; the other knobs matter a little."""
    rng = np.random.default_rng(seed)
    small = [rng.random(d) for d in dims[1:]]

    def objective(knob):
        main = 10.0 * np.exp(-((knob[0] - peak) ** 2) / 2.0)
        rest = sum(table[k] for table, k in zip(small, knob[1:])) / len(small)
        return 1.0 + main + 0.5 * rest

    return SyntheticTask(dims, objective)


def run(tuner, task, n_trial, batch=2, early_stopping=None):
    tuner.run_loop(synthetic_measure(task), batch, n_trial, early_stopping)
    return tuner


def dominant_knob(width=64, minor=(4, 4, 4, 4, 4), position=3, seed=0):
    """Knob ``position`` (``width`` values) carries almost all the signal: GFLOPS grow with its
    value; the other knobs add at most 0.05. Improvements stay available through the dominant
    knob until it reaches its last value, so a good mutation agent keeps choosing it.

    The dominant knob is not knob 0 on purpose: ties between untrained actions must not favour it.
    """
    rng = np.random.default_rng(seed)
    small = [rng.random(d) for d in minor]

    def objective(knob):
        rest = list(knob[:position]) + list(knob[position + 1:])
        main = 10.0 * (knob[position] / (width - 1)) ** 3
        return 1.0 + main + 0.05 * sum(t[v] for t, v in zip(small, rest)) / len(minor)

    dims = list(minor)
    dims.insert(position, width)
    task = SyntheticTask(tuple(dims), objective)
    best_rest = [int(np.argmax(t)) for t in small]
    task.optimum = objective(best_rest[:position] + [width - 1] + best_rest[position:])
    task.dominant, task.width = position, width
    return task


def trials_to_reach(tuner, target_gflops):
    """The first trial whose best-so-far reaches ``target_gflops`` (a large number if never)."""
    return next((h["trial"] for h in tuner.history if h["best_flops"] / 1e9 >= target_gflops), 10**6)


def nk_landscape(n=10, d=8, k=2, weighted=False, seed=0):
    """Kauffman's NK landscape, a standard rugged objective for genetic algorithms: ``n`` knobs of
    ``d`` values; knob i's contribution is a random table over itself and the next ``k`` knobs
    (so knobs interact, and mutating one changes several terms). ``weighted`` draws unequal
    weights for the contributions, as real schedule knobs matter unequally. GFLOPS = 1 + 10 f^4,
    so the good region is narrow."""
    rng = np.random.default_rng(seed)
    tables = [rng.random((d,) * (k + 1)) for _ in range(n)]
    weights = rng.exponential(size=n) ** 2 if weighted else np.ones(n)
    weights = weights / weights.sum()

    def objective(knob):
        f = sum(w * t[tuple(knob[(i + j) % n] for j in range(k + 1))]
                for i, (w, t) in enumerate(zip(weights, tables)))
        return 1.0 + 10.0 * f ** 4

    return SyntheticTask((d,) * n, objective, name=f"nk{'-weighted' if weighted else ''}-{seed}")


def inner_tiles(extent=256, levels=4, tiles=3):
    """``tiles`` split knobs of ``extent`` into ``levels`` factors; GFLOPS grow with the share of
    every extent on its innermost level, as a vector loop gains from a longer inner tile. Every
    split knob is a hundred-odd factorizations, so the move that helps is a direction (a factor
    moved into the last level), not a knob or a value."""
    space = ConfigSpace()
    for i in range(tiles):
        space.define_split(f"tile{i}", extent, num_outputs=levels)

    def objective(knob):
        inner = [np.log2(kn.entities[v].size[-1]) / np.log2(extent) for kn, v in zip(space.knobs, knob)]
        return 1.0 + 10.0 * float(np.mean(inner)) ** 2

    return SyntheticTask((), objective, name="inner-tiles", space=space)
